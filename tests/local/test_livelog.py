"""A live log people can read (Issue 27, part 3): `\\r` progress collapsed to each rank's latest
state, identical lines of many ranks shown once with a count, `run --ranks`, and lines that
never mix two ranks. The stream is the one the node's follow command writes (`tail -v -F` over
each rank's own files and agent.log, watch/follow.py), the time is injected (watch/livelog.py)."""
from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import sys

import pytest
from clusterctl_helpers import FIXTURE_JOBS
from clusterctl.plan import wrapper as agent
from clusterctl.watch.follow import FollowStream
from clusterctl.models import Host, Inventory

from unit.test_livelog import ATT, final_state
from clusterctl_helpers import free_port


# --------------------------------------------------------------------------- on this machine, for real


def test_the_follow_command_streams_each_ranks_own_file_and_agent_log(tmp_path):
    """The node side for real (sh and tail here): a run dir as torchrun leaves it."""
    from clusterctl.transport.local import LocalTransport

    run_dir = tmp_path / "run"
    for rank in range(2):
        (run_dir / ATT / str(rank)).mkdir(parents=True)
        (run_dir / ATT / str(rank) / "stdout.log").write_bytes(f"\rr{rank} 1\rr{rank} 2\nr{rank} end".encode())
        (run_dir / ATT / str(rank) / "stderr.log").write_bytes(b"")
    (run_dir / "agent.log").write_bytes(b"[node1 rank0]: r0 1\n[node1 rank0]: r0 2\ntorchrun says\n")
    (run_dir / "agent.exit").write_text("0\n")
    inventory = Inventory("t", (Host("local", "127.0.0.1", connection="local"),))
    stream = FollowStream(2)

    class Sink:
        def __init__(self):
            self.pieces = []

        def write(self, data: bytes) -> None:
            self.pieces += stream.feed(data)

    sink = Sink()
    result = LocalTransport(inventory.hosts[0]).run_to_sink(agent.follow_command(inventory, str(run_dir), 2), sink)
    assert result.exit_code == 0, result
    lines = {(p.source.local_rank, p.text) for p in sink.pieces + stream.finish() if p.complete}
    assert lines == {(0, "\rr0 1\rr0 2"), (0, "r0 end"), (1, "\rr1 1\rr1 2"), (1, "r1 end"), (None, "torchrun says")}


def test_the_stream_renews_the_lease_when_asked_answers_on_stderr_and_ends_with_its_stdin(tmp_path):
    """issue 52: a running node's lease is renewed through its output stream, no process started per poll
    (executor.Streams writing to the follower's stdin, for real)."""
    import time

    from clusterctl.executor import Connections
    from clusterctl.executor.streams import Streams
    from clusterctl.transport import connect
    from clusterctl.watch.pace import Pace

    run_dir = tmp_path / "run"
    (run_dir / ATT / "0").mkdir(parents=True)
    (run_dir / "lease").write_text("")
    os.utime(run_dir / "lease", (1, 1))
    inventory = Inventory("t", (Host("local", "127.0.0.1", connection="local"),))
    pace, ended, out = Pace(4.0), {}, []
    streams = Streams(inventory.hosts, lambda host: agent.follow_command(inventory, str(run_dir), 1, lease=True),
                      lambda name, data: out.append(data), lambda name, result: ended.setdefault(name, result),
                      Connections(connect), on_stderr=lambda name, data: pace.said(name, data, time.monotonic()))
    deadline = time.monotonic() + 20
    while pace.streamed_at("local") is None and time.monotonic() < deadline:
        streams.send("local", agent.RENEW)
        time.sleep(0.3)
    assert pace.streamed_at("local") is not None and (run_dir / "lease").stat().st_mtime > 1
    assert b"clusterctl-follow" in b"".join(out)
    (run_dir / "agent.exit").write_text("0\n")
    assert streams.wait(10) and "local" in ended
    assert pace.exited("local") == "exit 0"  # its last line: the run's end asks no poll after it
    assert not streams.send("local", agent.RENEW)  # ended: nothing to ask
    import subprocess

    os.remove(run_dir / "agent.exit")
    follower = subprocess.Popen(agent.follow_command(inventory, str(run_dir), 1, lease=True).argv,
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    follower.stdin.close()  # the controller gone: the stream ends, nothing renews the lease any more
    assert follower.wait(20) == 0


def _free_port() -> int:
    return free_port()  # tests/clusterctl_helpers.py: below the ephemeral range


def test_run_on_this_machine_shows_a_tqdm_workload_in_at_most_40_progress_lines_with_each_final_state(
        tmp_path, monkeypatch):
    """`clusterctl run` for real on this machine (connection: local, torchrun of this interpreter)."""
    pytest.importorskip("torch")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"""name: livelog-{os.getpid()}
hosts:
  - {{name: local, connection: local}}
rendezvous: {{port: {_free_port()}}}
job:
  command: [{FIXTURE_JOBS / 'progress.py'}]
  args: [--steps, "200", --delay, "0.01"]
  nproc_per_node: 4
  python: {sys.executable}
  outputs: {tmp_path / 'outputs'}
checks: {{ib: off}}
""")
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("hello\n")
    from clusterctl.cli import main

    out, err = io.StringIO(), io.StringIO()
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", "-i", str(inventory), str(prompt)], env={**os.environ, "CLUSTERCTL_STATE": str(tmp_path / "state")})
    live = err.getvalue()
    assert code == 0, live[-3000:]
    progress = [line for line in live.splitlines() if re.search(r"\d+/200", line)]
    assert 4 <= len(progress) <= 40, progress
    for rank in range(4):
        assert f"[local r{rank}] {final_state(rank)}" in live.splitlines(), live[-3000:]
    warnings = [line for line in live.splitlines() if "the same on every rank" in line]
    assert len(warnings) == 2 and "[repeated 3x across 3 ranks]" in warnings[1], warnings
    # the files keep every byte as the ranks wrote them
    logs = list((tmp_path / "outputs" / "logs").glob("*/local/*/attempt_0/2/stdout.log"))
    assert len(logs) == 1 and logs[0].read_bytes().count(b"\r") == 201 and logs[0].read_bytes().endswith(
        final_state(2).encode() + b"\nrank 2 finished\n")
