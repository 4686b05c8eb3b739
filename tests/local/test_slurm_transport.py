"""SrunTransport without a Slurm: a stand-in `srun` on PATH (it logs its argv, then runs the command
after its options, as srun runs the task) shows what each Command becomes. The real srun is in
tests/rehearsal/test_cluster_slurm.py."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from clusterctl.models import Command, Host
from clusterctl.slurm.transport import SrunTransport

STAND_IN = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["SRUN_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
while args and args[0].startswith("--"):
    args.pop(0)
os.execvp(args[0], args)
"""


@pytest.fixture
def transport(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(STAND_IN)
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SRUN_LOG", str(tmp_path / "srun.log"))
    transport = SrunTransport(Host(name="node7", address="10.0.0.7"), "4242")
    yield transport
    transport.close()


def calls(tmp_path: Path) -> list:
    return [json.loads(line) for line in (tmp_path / "srun.log").read_text().splitlines()]


def test_a_command_is_one_task_step_on_its_node_of_the_allocation(transport, tmp_path):
    result = transport.run(Command(("sh", "-c", 'printf "%s|%s" "$X" "$(pwd)"'), env=(("X", "a b"),), cwd="/tmp",
                                   timeout=None))
    assert result.exit_code == 0 and result.stdout == "a b|/tmp"
    (argv,) = calls(tmp_path)
    assert argv[:8] == ["--jobid=4242", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=node7", "--quiet",
                        "--kill-on-bad-exit=0", "env"]


def test_stdin_reaches_the_task_and_exit_codes_come_back(transport):
    assert transport.run(Command(("cat",), stdin=b"hello\n")).stdout == "hello\n"  # stdin: a step of its own
    assert transport.run(Command(("sh", "-c", "exit 3"))).exit_code == 3


def test_a_detached_launch_becomes_a_step_of_its_own_that_outlives_the_call(transport, tmp_path):
    marker = tmp_path / "done"
    started = time.monotonic()
    result = transport.run(Command(("setsid", "-f", "sh", "-c", f"sleep 1; touch {marker}")))
    assert result.exit_code == 0 and time.monotonic() - started < 1
    assert not marker.exists()
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists()
    # the step runs the command in its foreground (no setsid -f: the step would lose it)
    assert calls(tmp_path)[0][7:9] == ["sh", "-c"]


def test_close_ends_a_step_still_running(transport, tmp_path):
    transport.run(Command(("setsid", "-f", "sleep", "30")))
    (step,) = transport._steps
    transport.close()
    assert step.poll() is not None


def test_short_commands_share_one_step_and_keep_stdout_stderr_and_exit_codes_apart(transport, tmp_path):
    for i in range(5):
        result = transport.run(Command(("sh", "-c", f'printf "out{i}\\n\\001\\377"; echo err{i} >&2; exit {i}')))
        assert (result.exit_code, result.stderr) == (i, f"err{i}\n")
        assert result.stdout.startswith(f"out{i}\n")
    assert len(calls(tmp_path)) == 1  # one srun for all five


def test_a_short_command_past_its_timeout_ends_the_shell_step_and_the_next_starts_another(transport, tmp_path):
    result = transport.run(Command(("sleep", "5"), timeout=0.5))
    assert result.timed_out and result.exit_code is None
    assert transport.run(Command(("echo", "again"))).stdout == "again\n"
    assert len(calls(tmp_path)) == 2
