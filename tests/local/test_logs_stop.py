"""`clusterctl logs`, `clusterctl stop` and the runs of `clusterctl status` (issue 27, long runs) on this
machine through `connection: local` inventories: `logs` of a run's files as a node keeps them; `stop` of a
run whose node agent runs (a marked `sleep` for torchrun; no torch needed); and (slow) a real 2-rank run of
tests/fixtures/jobs/stall.py: `logs --rank 1` while it runs, `stop` from a second process, the attached
`run` ending with exit 1 saying it was stopped, `status` listing it as stopped. The pure parts are in
tests/unit/test_logs_stop.py."""
from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterctl.cli import main
from clusterctl.plan import wrapper as agent
from clusterctl.state import State
from clusterctl_helpers import FIXTURE_JOBS, environ_of, processes_with, wait_until

from unit.test_logs_stop import _ended, _record, _write
from clusterctl_helpers import free_port

# a `logs --follow` on a node: node/run_files.py's `logs` operation, its argv element (the program's text,
# sent on the command line, names every operation: matching a word of it would find any run_files process)
LOGS_FOLLOWER = "\0logs\0"


def test_the_logs_command_reads_the_chosen_files_and_follows_with_stdin_open(tmp_path):
    from clusterctl.inventory.load import load_inventory

    inventory = load_inventory(_local_inventory(tmp_path, "c-logs"))
    command = agent.logs_command(inventory, "/o/logs/R/local", (1,), False, 20, follow=False)
    assert command.argv[-7:] == ("logs", "/o", "logs/R/local", "20", "0", "0", "1")
    assert command.timeout and not command.stdin_open
    command = agent.logs_command(inventory, "/o/logs/R/local", (0, 1), True, None, follow=True)
    assert command.argv[-8:] == ("logs", "/o", "logs/R/local", "+1", "1", "1", "0", "1")
    assert command.timeout is None and command.stdin_open


def test_the_poll_reports_the_stopped_mark(tmp_path):
    from clusterctl.plan import node_files

    (tmp_path / "agent.exit").write_text("143\n")
    poll = node_files.argv("python3", "poll", str(tmp_path))
    run = lambda: subprocess.run(poll, capture_output=True, text=True).stdout  # noqa: E731
    assert run() == "exit 143\n"
    (tmp_path / "stopped").write_text("clusterctl stop\n")
    assert run() == "exit 143 stopped\n"


# --------------------------------------------------------------------------- on this machine


def _free_port() -> int:
    return free_port()  # tests/clusterctl_helpers.py: below the ephemeral range


def _local_inventory(tmp_path: Path, name: str, job: str = "command: [x.py]") -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(f"name: {name}-{os.getpid()}\nhosts:\n  - {{name: local, connection: local}}\n"
                    f"rendezvous: {{port: {_free_port()}}}\njob:\n  {job}\n  outputs: {tmp_path / 'outputs'}\n"
                    "checks: {ib: off}\n")
    return path


def _cli(tmp_path: Path, *argv: str) -> tuple[int, dict]:
    out = io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main([argv[0], "--json", *argv[1:]], env={**os.environ, "CLUSTERCTL_STATE": str(tmp_path / "state")})
    return code, json.loads(out.getvalue())


def _ended_run_on_disk(tmp_path: Path, inventory: Path) -> str:
    """A run that ended, as `clusterctl run` leaves it: the record here, the files on the node."""
    run_id = "20250101-120000-abcdef"
    topology = [{"host": "local", "node_rank": 0, "ranks": [0, 1], "gpus": None, "nic": None, "local_addr": "127.0.0.1"}]
    state = State(tmp_path / "state")
    _write(state, _ended(run_id, 0, topology=topology, outputs=str(tmp_path / "outputs"), inventory=str(inventory),
                         cluster=f"logs-{os.getpid()}"))
    node = tmp_path / "outputs" / "logs" / run_id / "local"
    for local in (0, 1):
        rank_dir = node / f"{run_id}_x1/attempt_0/{local}"
        rank_dir.mkdir(parents=True)
        (rank_dir / "stdout.log").write_text("".join(f"rank {local} line {i}\n" for i in range(5)))
        (rank_dir / "stderr.log").write_text(f"rank {local} warns\n" if local else "")
    (node / "agent.log").write_text("[local rank0]: rank 0 line 0\ntorchrun: started\n")
    (node / "agent.exit").write_text("0\n")
    return run_id


def test_logs_of_an_ended_run_every_rank_one_rank_and_the_last_lines(tmp_path, capsys):
    inventory = _local_inventory(tmp_path, "logs")
    run_id = _ended_run_on_disk(tmp_path, inventory)
    code, doc = _cli(tmp_path, "logs")  # the last run
    assert code == 0 and doc["ok"] and doc["run_id"] == run_id, doc
    texts = [(line["rank"], line["stream"], line["text"]) for line in doc["lines"]]
    assert texts[:5] == [(0, "stdout", f"rank 0 line {i}") for i in range(5)]
    assert (1, "stderr", "rank 1 warns") in texts and (None, "stdout", "torchrun: started") in texts
    assert len(texts) == 12  # 5 + 5 + 1 + torchrun's own line; its copy of rank 0's line is not shown twice

    code, doc = _cli(tmp_path, "logs", run_id, "--rank", "1", "--tail", "2")
    assert code == 0 and [(line["host"], line["rank"], line["text"]) for line in doc["lines"]] == [
        ("local", 1, "rank 1 line 3"), ("local", 1, "rank 1 line 4"), ("local", 1, "rank 1 warns")]

    code = main(["logs", run_id, "--node", "local", "--tail", "1", "--follow"],  # an ended run: read once, ends
                env={**os.environ, "CLUSTERCTL_STATE": str(tmp_path / "state")})
    out = capsys.readouterr().out
    assert code == 0 and "[local r0] rank 0 line 4\n" in out and "[local r1] rank 1 line 4\n" in out
    assert "[local] torchrun: started\n" in out


def test_logs_of_a_run_that_does_not_exist_or_a_rank_it_does_not_have_is_exit_2(tmp_path):
    inventory = _local_inventory(tmp_path, "logs")
    run_id = _ended_run_on_disk(tmp_path, inventory)
    code, doc = _cli(tmp_path, "logs", "20240101-000000-000000")
    assert code == 2 and doc["error"] == "no record of run 20240101-000000-000000" and "clusterctl status" in doc["fix"]
    code, doc = _cli(tmp_path, "logs", "../etc")
    assert code == 2 and doc["error"].startswith("not a run id")
    code, doc = _cli(tmp_path, "logs", run_id, "--rank", "7")
    assert code == 2 and doc["error"] == f"run {run_id}: the run has no rank 7; its ranks are 0-1"
    code, doc = _cli(tmp_path, "logs", run_id, "--follow")
    assert code == 2 and "--json" in doc["error"]


def test_stop_of_a_run_that_ended_says_so_and_touches_nothing(tmp_path):
    inventory = _local_inventory(tmp_path, "logs")
    run_id = _ended_run_on_disk(tmp_path, inventory)
    code, doc = _cli(tmp_path, "stop", run_id)
    assert code == 0 and doc == {"ok": True, "run_id": run_id, "state": "succeeded", "already_ended": True, "hosts": {}}


def _left(text: str) -> list:
    """Processes whose command line holds `text` (paths here hold "pytest-of-...": not filtered on)."""
    return processes_with(text)


def _marked(run_id: str) -> list[int]:
    """Processes carrying the run's marker in their environment (as the stop scan finds them)."""
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit()
            and environ_of(int(pid)).get("CLUSTERCTL_RUN_ID") == run_id and not _zombie(int(pid))]


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1] == "Z"
    except (OSError, IndexError):
        return True


def test_stop_ends_a_node_agent_and_its_marked_processes_and_records_the_run_stopped(tmp_path):
    """A run whose controller is gone (record "running", no lock): its node agent still runs a
    marked process (a `sleep` for torchrun, started as `clusterctl run` starts torchrun)."""
    from clusterctl.inventory.load import load_inventory
    from clusterctl.modules import process
    from clusterctl.transport import connect

    path = _local_inventory(tmp_path, "stop")
    inventory = load_inventory(path)
    run_id = "20250101-120000-5709aa"
    run_dir = f"{tmp_path / 'outputs'}/logs/{run_id}/local"
    transport = connect(inventory.hosts[0])
    env = process.marker_env(inventory.name, "local", run_id)
    try:
        for command in (agent.write_env_command(inventory, run_dir, env),
                        agent.start_command(inventory, run_dir, ("sleep", "300"), lease_s=120)):
            assert transport.run(command).ok
        transport.close()
        wait_until(lambda: _marked(run_id), 10, what="the marked sleep")
        assert _left(run_dir), "no node agent"
        topology = [{"host": "local", "node_rank": 0, "ranks": [0, 0], "gpus": None, "nic": None,
                     "local_addr": "127.0.0.1"}]
        _write(State(tmp_path / "state"), _record(run_id, topology=topology, outputs=str(tmp_path / "outputs"),
                                                  inventory=str(path), cluster=inventory.name))
        started = time.monotonic()
        code, doc = _cli(tmp_path, "stop", run_id)
        took = time.monotonic() - started
        assert code == 0 and doc["ok"] and doc["state"] == "stopped", doc
        assert doc["hosts"]["local"]["status"] == "changed" and doc["hosts"]["local"]["ended"] >= 1, doc
        assert "the node agent ended (exit " in doc["hosts"]["local"]["detail"]
        assert took < 15
        assert Path(run_dir, "stopped").read_text().startswith("clusterctl stop from ")
        assert Path(run_dir, "agent.exit").exists()
        assert wait_until(lambda: not _left(run_dir) and not _marked(run_id), 5, what="nothing left") is True
        record = json.loads((tmp_path / "state" / "runs" / run_id / "run.json").read_text())
        assert record["state"] == "stopped" and record["stopped"] is True and record["stopped_by"]
        code, doc = _cli(tmp_path, "stop", run_id)  # again: it has ended
        assert code == 0 and doc["already_ended"] is True and doc["state"] == "stopped"
    finally:
        transport.close()
        for pid in [p for p, _cmd in _left(run_dir)] + _marked(run_id):
            os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- a real run (torch, slow)


def _env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "MASTER_", "RANK", "WORLD_SIZE"))}
    env["CLUSTERCTL_STATE"] = str(tmp_path / "state")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # torch's python3 for the ranks
    return env


def _clusterctl(tmp_path: Path, *argv: str, json_output: bool = True) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "clusterctl", *argv[:1], *(["--json"] if json_output else []),
                             *argv[1:]], cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_run_going_on_shows_its_logs_and_stop_from_another_process_ends_it_and_the_attached_run(tmp_path):
    pytest.importorskip("torch")
    path = _local_inventory(tmp_path, "stopreal", job=f"command: [{FIXTURE_JOBS / 'stall.py'}]\n"
                                                      "  args: [--mode, hang, --rank, 1, --seconds, '600']\n"
                                                      "  nproc_per_node: 2")
    (tmp_path / "prompt.txt").write_text("a cat\n")
    run = _clusterctl(tmp_path, "run", "-i", str(path), "--stall-timeout", "0", str(tmp_path / "prompt.txt"),
                      json_output=False)
    run_id = None
    try:
        def up():
            for log in (tmp_path / "outputs" / "logs").glob("*/local/*/attempt_0/1/stdout.log"):
                if "up, world 2" in log.read_text(errors="replace"):
                    return log.parts[-6]
            return None

        run_id = wait_until(up, 90, interval=0.5, what="rank 1 up")
        logs = _clusterctl(tmp_path, "logs", run_id, "--rank", "1", json_output=False)
        out, err = logs.communicate(timeout=60)
        assert logs.returncode == 0 and "[local r1] [stall rank 1] up, world 2\n" in out, (out, err)
        assert all(line.startswith("[local r1] ") for line in out.splitlines()), out
        logs = _clusterctl(tmp_path, "logs", run_id, "--rank", "1")
        out, err = logs.communicate(timeout=60)
        lines = json.loads(out)["lines"]
        assert [(x["rank"], x["text"]) for x in lines if x["stream"] == "stdout"] == [(1, "[stall rank 1] up, world 2")]

        refused = _clusterctl(tmp_path, "run", "-i", str(path), str(tmp_path / "prompt.txt"))
        out, err = refused.communicate(timeout=60)
        doc = json.loads(out)
        assert refused.returncode == 2 and f"(run {run_id}, pid {run.pid} since" in doc["error"], doc
        assert doc["fix"] == f"wait for it to end, or stop it: `clusterctl stop {run_id}`"

        status = _clusterctl(tmp_path, "status", "-i", str(path))
        out, err = status.communicate(timeout=60)
        assert json.loads(out)["runs"][0]["run_id"] == run_id and json.loads(out)["runs"][0]["state"] == "running"

        interrupted = _clusterctl(tmp_path, "logs", "--follow", json_output=False)
        wait_until(lambda: processes_with(LOGS_FOLLOWER), 20, what="a follower")
        time.sleep(1)
        interrupted.send_signal(signal.SIGINT)
        assert interrupted.wait(timeout=20) == 130
        assert wait_until(lambda: not processes_with(LOGS_FOLLOWER), 5, what="no follower left after Ctrl-C")
        follow = _clusterctl(tmp_path, "logs", run_id, "--follow", "--rank", "0", json_output=False)
        wait_until(lambda: processes_with(LOGS_FOLLOWER), 20, what="a follower")

        started = time.monotonic()
        stop = _clusterctl(tmp_path, "stop")  # the last run
        out, err = stop.communicate(timeout=60)
        doc = json.loads(out)
        assert stop.returncode == 0 and doc["ok"] and doc["state"] == "stopped", (doc, err)
        _out, err = run.communicate(timeout=30)
        took = time.monotonic() - started
        assert run.returncode == 1, err[-3000:]
        assert f"run {run_id} was stopped (clusterctl stop)" in err, err[-3000:]
        assert "first failure" not in err
        assert took < 15, f"the run ended {took:.1f}s after the stop began"
        out, err = follow.communicate(timeout=15)  # the run ended: so does the follower
        assert follow.returncode == 0 and "[local r0] [stall rank 0] up, world 2\n" in out, (out, err)
        assert wait_until(lambda: not _marked(run_id) and not _left(str(tmp_path / "outputs")), 10, what="nothing left")
        record = json.loads((tmp_path / "state" / "runs" / run_id / "run.json").read_text())
        assert record["state"] == "stopped" and record["exit_code"] != 0 and record["first_failure"] is None

        status = _clusterctl(tmp_path, "status", "-i", str(path))
        out, err = status.communicate(timeout=60)
        assert json.loads(out)["runs"][0]["state"] == "stopped"
    finally:
        for proc in (run, locals().get("follow"), locals().get("interrupted")):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        for pid in [p for p, _cmd in _left(str(tmp_path / "outputs"))] + (_marked(run_id) if run_id else []):
            os.kill(pid, signal.SIGKILL)
