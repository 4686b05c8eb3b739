"""Whatever a failing node's log calls its machine (a hostname, an FQDN, `localhost`, an
address), the run names an inventory host: never a KeyError, never a name the inventory lacks.
And an unexpected exception while a run is watched stops every rank, records the run, and
ends in one "internal error" line naming the log that holds the traceback (exit 1)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import socket
from pathlib import Path

import pytest
from clusterctl.run.runner import JobRunner
from clusterctl_helpers import FIXTURE_JOBS, processes_with, wait_until

from unit.test_failure_attribution import inventory
from clusterctl_helpers import free_port


def _free_port() -> int:
    return free_port()  # tests/clusterctl_helpers.py: below the ephemeral range


def test_an_internal_error_while_watching_stops_the_ranks_records_the_run_and_says_where_the_traceback_is(
        tmp_path, monkeypatch):
    if not any(Path(d, "python3").exists() for d in os.environ.get("PATH", "").split(os.pathsep)):
        pytest.skip("no python3 on PATH for the local ranks")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"""name: crash-{os.getpid()}
hosts:
  - {{name: local, connection: local}}
rendezvous: {{port: {_free_port()}}}
job:
  command: [{FIXTURE_JOBS / 'tiny.py'}]
  args: [--out, "{{outputs}}/ranks", --sleep, "60"]
  nproc_per_node: 2
  outputs: {tmp_path / 'outputs'}
checks: {{ib: off}}
""")
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("hello\n")
    calls = {"n": 0}

    def crash_after_the_ranks_started(self):
        calls["n"] += 1
        if calls["n"] >= 3 and any(n.ranks_seen for n in self.nodes.values()):
            raise RuntimeError("a bug in the status line")
        if calls["n"] > 60:
            raise AssertionError("the ranks never started")

    monkeypatch.setattr(JobRunner, "_report_status", crash_after_the_ranks_started)
    from clusterctl.cli import main

    out, err = io.StringIO(), io.StringIO()
    env = {**os.environ, "CLUSTERCTL_STATE": str(tmp_path / "state")}
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", "--json", "-i", str(inventory), str(prompt)], env=env)
    document = json.loads(out.getvalue())
    assert code == 1 and document["ok"] is False and document["error"] == "internal error", document
    log = Path(document["traceback_log"])
    assert "RuntimeError: a bug in the status line" in log.read_text() and log.stat().st_mode & 0o077 == 0
    lines = [line for line in err.getvalue().splitlines() if "internal error" in line]
    assert len(lines) == 1 and str(log) in err.getvalue() and "Traceback" not in err.getvalue()
    records = list((tmp_path / "state" / "runs").glob("*/run.json"))
    assert len(records) == 1
    record = json.loads(records[0].read_text())
    assert record["internal_error"] == "RuntimeError: a bug in the status line" and record["exit_code"] == 1
    outputs = str(tmp_path / "outputs")  # on every rank's and torchrun's command line
    assert wait_until(lambda: not [p for p in processes_with(outputs) if "pytest" not in p[1]], 15,
                      what="no process of the crashed run") is True
