"""The run's supervision on the cluster (node/node_agent.py, run/supervision.py; issue 27): the
supervisor's decisions on a fake clock, then a real supervisor and keeper talking HTTP on loopback
(signed messages, a forged or replayed one refused), and a run on this machine handed over with
`run --detach`: it goes on with no clusterctl process, fails fast on its own, and `status` and
`attach` name the failed rank."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from clusterctl_helpers import as_from_a_terminal

from clusterctl.node import engine, node_agent
from clusterctl.run import supervision
from clusterctl_helpers import free_port

SCRIPT = Path(node_agent.__file__)


def _free_port() -> int:
    return free_port()  # tests/clusterctl_helpers.py: below the ephemeral range


def _config(run_dir: Path, host: str, port: int, hosts=("n1",)) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    for path in (SCRIPT, *supervision.BESIDE_AGENT):  # the agent and what ships beside it, as a run ships them
        (run_dir / path.name).write_bytes(path.read_bytes())
    (run_dir / node_agent.CONFIG).write_text(json.dumps({
        "run_id": "r1", "address": "127.0.0.1", "port": port, "key": node_agent.keeper_key("k" * 64, host),
        "supervisor_key": "k" * 64, "lease_s": 5, "lost_after_s": 15, "hosts": list(hosts), "host": host}))


def _wait(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_real_supervisor_and_keeper_hold_the_lease_then_stop_the_node_and_end(tmp_path):
    port = _free_port()
    master, node = tmp_path / "n1", tmp_path / "n2"
    _config(master, "n1", port, hosts=("n1", "n2"))
    _config(node, "n2", port, hosts=("n1", "n2"))
    for d in (master, node):
        (d / "lease").touch()
        os.utime(d / "lease", (1, 1))
    procs = [subprocess.Popen([sys.executable, str(master / "node_agent.py"), "supervise", str(master)]),
             subprocess.Popen([sys.executable, str(master / "node_agent.py"), "keep", str(master)]),
             subprocess.Popen([sys.executable, str(node / "node_agent.py"), "keep", str(node)])]
    try:
        state = master / node_agent.STATE
        _wait(lambda: state.exists() and all(n["seen_s_ago"] is not None
                                             for n in json.loads(state.read_text())["nodes"].values()), 20, "both heard")
        assert (node / "lease").stat().st_mtime > 1  # renewed by the supervisor's answers

        # a forged message: refused, and the answer of a refusal carries no valid order
        body = json.dumps({"host": "n2", "seq": 10 ** 15, "exit_code": 1}).encode()
        forged = urllib.request.Request(f"http://127.0.0.1:{port}/beat", data=body,
                                        headers={node_agent.MAC_HEADER: "0" * 64, node_agent.HOST_HEADER: "n2"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(forged, timeout=5)
        assert refused.value.code == 403
        # n2's beat signed with n1's own key (a job on n1 read its node's config): refused, in either name
        n1_key = node_agent.keeper_key("k" * 64, "n1")
        for named in ("n2", "n1"):
            stolen = urllib.request.Request(f"http://127.0.0.1:{port}/beat", data=body, headers={
                node_agent.MAC_HEADER: node_agent.sign(n1_key, body), node_agent.HOST_HEADER: named})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(stolen, timeout=5)
            assert refused.value.code == (403 if named == "n2" else 409)
        # a replayed one (an old sequence number, correctly signed): refused too
        old = json.dumps({"host": "n2", "seq": 1, "exit_code": 1}).encode()
        replay = urllib.request.Request(f"http://127.0.0.1:{port}/beat", data=old, headers={
            node_agent.MAC_HEADER: node_agent.sign(node_agent.keeper_key("k" * 64, "n2"), old),
            node_agent.HOST_HEADER: "n2"})
        with pytest.raises(urllib.error.HTTPError) as replayed:
            urllib.request.urlopen(replay, timeout=5)
        assert replayed.value.code == 409
        assert json.loads(state.read_text())["state"] == "running"

        (node / "agent.log").write_text("[rank3]: RuntimeError: boom\n")
        (node / "agent.exit").write_text("1\n")
        _wait(lambda: (master / "stop").exists(), 15, "the master told to stop")
        assert "n2 failed (exit 1)" in (master / "stop").read_text()
        (master / "agent.exit").write_text("143\n")
        for p in procs:
            assert p.wait(timeout=30) == 0
        final = json.loads(state.read_text())
        assert final["final"] and final["state"] == "failed" and final["failures"][0]["host"] == "n2"
        assert "RuntimeError: boom" in final["failures"][0]["tail"]
        with socket.socket() as s, pytest.raises(ConnectionRefusedError):  # nothing listens any more
            s.connect(("127.0.0.1", port))
    finally:
        for p in procs:
            p.kill()


def test_a_keeper_whose_supervisor_is_gone_leaves_the_lease_to_run_out(tmp_path):
    node = tmp_path / "n2"
    _config(node, "n2", _free_port(), hosts=("n1", "n2"))
    (node / "lease").touch()
    os.utime(node / "lease", (1, 1))
    started = time.monotonic()
    keeper = subprocess.run([sys.executable, str(node / "node_agent.py"), "keep", str(node)], timeout=30,
                            capture_output=True, text=True)
    assert keeper.returncode == 1 and "leaving the lease to run out" in keeper.stdout
    assert 5 <= time.monotonic() - started < 15 and (node / "lease").stat().st_mtime == 1


def test_a_hang_up_sets_the_flag_and_silences_output_but_not_under_nohup(tmp_path):
    """In a child process (it dup2s /dev/null over its stdout): SIGHUP turns the flag on and later
    output goes nowhere; with SIGHUP ignored at the start (nohup), the handler is not installed."""
    code = r'''
import os, signal, sys
from clusterctl.backends.hangup import hang_up_detaches
if sys.argv[1] == "nohup":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
with hang_up_detaches() as hung_up:
    print("before", flush=True)
    os.kill(os.getpid(), signal.SIGHUP)
    print("after", hung_up(), flush=True)
print("restored", signal.getsignal(signal.SIGHUP) in (signal.SIG_DFL, signal.SIG_IGN), flush=True)
'''
    plain = subprocess.run([sys.executable, "-c", code, "plain"], capture_output=True, text=True, timeout=60,
                           preexec_fn=as_from_a_terminal)
    assert plain.returncode == 0 and plain.stdout == "before\n", (plain.stdout, plain.stderr)
    nohup = subprocess.run([sys.executable, "-c", code, "nohup"], capture_output=True, text=True, timeout=60)
    assert nohup.stdout == "before\nafter False\nrestored True\n", (nohup.stdout, nohup.stderr)
