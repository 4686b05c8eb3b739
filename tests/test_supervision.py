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

from clusterctl.node import node_agent
from clusterctl.run import supervision

SCRIPT = Path(node_agent.__file__)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _supervisor(hosts=("a", "b"), lost_after_s=15.0):
    clock = Clock()
    config = {"run_id": "r1", "hosts": list(hosts), "lost_after_s": lost_after_s}
    return node_agent.Supervisor(config, "/nonexistent", now=clock), clock


def _beat(sup, host, seq, **report):
    return sup.beat({"host": host, "seq": seq, "exit_code": None, "ranks": 2, **report})


def test_a_failed_node_stops_everyone_after_the_others_had_a_moment_to_report():
    sup, clock = _supervisor()
    assert _beat(sup, "a", 1)["stop"] is False and _beat(sup, "b", 1)["stop"] is False
    clock.t += 1
    assert _beat(sup, "b", 2, exit_code=1, tail="boom")["stop"] is False  # settling
    assert sup.tick() is False and sup.state == "running"
    clock.t += node_agent.SETTLE_S
    assert sup.tick() is False and sup.state == "failed"  # a still runs: told to stop, awaited
    answer = _beat(sup, "a", 2)
    assert answer["stop"] is True and "b failed (exit 1)" in answer["reason"] and answer["ack"] is False
    assert _beat(sup, "a", 3, exit_code=-15)["ack"] is True
    assert sup.tick() is True
    document = sup.document(final=True)
    assert [f["host"] for f in document["failures"]] == ["b", "a"] and document["failures"][0]["tail"] == "boom"


def test_every_node_exiting_0_is_success_and_a_stop_mark_is_a_stop():
    sup, clock = _supervisor()
    _beat(sup, "a", 1, exit_code=0)
    assert sup.tick() is False
    _beat(sup, "b", 1, exit_code=0)
    assert sup.tick() is True and sup.state == "succeeded"
    sup, clock = _supervisor()
    _beat(sup, "a", 1, exit_code=143, stopped=True)
    assert sup.state == "stopped" and sup.failures == []
    assert _beat(sup, "b", 1)["stop"] is True


def test_a_silent_node_is_lost_and_one_never_heard_is_lost_later():
    sup, clock = _supervisor(lost_after_s=15)
    _beat(sup, "a", 1)
    _beat(sup, "b", 1)
    clock.t += 10
    _beat(sup, "a", 2)
    clock.t += 6  # b silent for 16 s
    sup.tick()
    assert sup.state == "failed" and sup.failures[0]["host"] == "b" and sup.failures[0]["lost"]
    sup, clock = _supervisor(lost_after_s=15)
    _beat(sup, "a", 1)
    clock.t += 20
    _beat(sup, "a", 2)
    assert sup.tick() is False and sup.state == "running"  # b has a minute to come up
    clock.t += node_agent.NEVER_SEEN_S
    _beat(sup, "a", 3)
    sup.tick()
    assert sup.state == "failed" and sup.failures[0]["host"] == "b"


def test_a_run_whose_ranks_all_went_silent_for_the_stall_timeout_is_reported_stalled_not_stopped():
    clock = Clock()
    sup = node_agent.Supervisor({"run_id": "r1", "hosts": ["a", "b"], "lost_after_s": 15, "stall_timeout_s": 60},
                                "/nonexistent", now=clock)
    _beat(sup, "a", 1, silent_s=50.0)
    _beat(sup, "b", 1, silent_s=2.0)
    sup.tick()
    assert sup.stalled_s is None  # b wrote 2 s ago
    clock.t += 1
    _beat(sup, "a", 2, silent_s=70.0)
    _beat(sup, "b", 2, silent_s=65.0)
    clock.t += 0.5
    assert sup.tick() is False and sup.stalled_s == 65.5 and sup.state == "running"
    assert sup.document()["stalled_s"] == 65.5 and _beat(sup, "a", 3, silent_s=71.0)["stop"] is False
    _beat(sup, "b", 3, silent_s=0.5)  # b printed again
    sup.tick()
    assert sup.stalled_s is None
    off, _ = _supervisor()  # no stall_timeout_s: never
    _beat(off, "a", 1, silent_s=1e6)
    _beat(off, "b", 1, silent_s=1e6)
    off.tick()
    assert off.stalled_s is None


def test_a_run_past_its_timeout_is_stopped_and_says_so():
    clock = Clock()
    sup = node_agent.Supervisor({"run_id": "r1", "hosts": ["a"], "lost_after_s": 15, "timeout_s": 30},
                                "/nonexistent", now=clock)
    _beat(sup, "a", 1)
    clock.t += 29
    _beat(sup, "a", 2)
    assert sup.tick() is False and sup.state == "running"
    clock.t += 2
    _beat(sup, "a", 3)
    sup.tick()
    assert sup.state == "failed" and _beat(sup, "a", 4)["stop"] is True
    code, first = supervision.outcome_of(sup.document(), inventory=None)
    assert code == 1 and "ran past --timeout 30s" in first["diagnosis"][0]["evidence"]


def test_an_old_or_repeated_sequence_number_and_an_unknown_host_are_refused():
    sup, _ = _supervisor()
    assert _beat(sup, "a", 5) is not None
    assert _beat(sup, "a", 5) is None and _beat(sup, "a", 4) is None
    assert _beat(sup, "zz", 9) is None
    assert sup.beat({"host": "a", "seq": "6"}) is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(run_dir: Path, host: str, port: int, hosts=("n1",)) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "node_agent.py").write_bytes(SCRIPT.read_bytes())
    (run_dir / node_agent.CONFIG).write_text(json.dumps({
        "run_id": "r1", "address": "127.0.0.1", "port": port, "key": "k" * 64, "lease_s": 5,
        "lost_after_s": 15, "hosts": list(hosts), "host": host}))


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
                                        headers={node_agent.MAC_HEADER: "0" * 64})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(forged, timeout=5)
        assert refused.value.code == 403
        # a replayed one (an old sequence number, correctly signed): refused too
        old = json.dumps({"host": "n2", "seq": 1, "exit_code": 1}).encode()
        replay = urllib.request.Request(f"http://127.0.0.1:{port}/beat", data=old,
                                        headers={node_agent.MAC_HEADER: node_agent.sign("k" * 64, old)})
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


def test_the_state_read_from_a_node_says_how_old_it_is_and_whether_its_supervisor_is_gone():
    running = json.dumps({"state": "running", "final": False})
    assert supervision.parse_state(f"1000 999\n{running}")["gone"] is False
    assert supervision.parse_state(f"1000 900\n{running}")["gone"] is True
    final = json.dumps({"state": "failed", "final": True})
    assert supervision.parse_state(f"1000 900\n{final}")["gone"] is False
    for bad in ("", "x y\n{}", "1 2\nnot json", "1 2\n[1]"):
        assert supervision.parse_state(bad) is None


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
