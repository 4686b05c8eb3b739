"""`run --json` and the run record say when each phase of the run was reached (issue 40): the
facts, the launch, the first rank, the last rank's last line, the last torchrun's exit, the return,
in seconds since the command started, in that order; and the controller's CPU seconds at each."""
from __future__ import annotations

import contextlib
import io
import json
import os
import socket
from pathlib import Path

import pytest

from clusterctl.run.phases import NAMES
from clusterctl_helpers import FIXTURE_JOBS
from clusterctl_helpers import free_port


def _free_port() -> int:
    return free_port()  # tests/clusterctl_helpers.py: below the ephemeral range


def test_run_json_and_the_run_record_carry_every_phase_in_order(tmp_path, monkeypatch):
    if not any(Path(d, "python3").exists() for d in os.environ.get("PATH", "").split(os.pathsep)):
        pytest.skip("no python3 on PATH for the local ranks")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"""name: phases-{os.getpid()}
hosts:
  - {{name: local, connection: local}}
rendezvous: {{port: {_free_port()}}}
job:
  command: [{FIXTURE_JOBS / 'tiny.py'}]
  args: [--out, "{{outputs}}/ranks"]
  nproc_per_node: 2
  outputs: {tmp_path / 'outputs'}
checks: {{ib: off}}
""")
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("hello\n")
    from clusterctl.cli import main

    out = io.StringIO()
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", "--json", "-i", str(inventory), str(prompt)],
                    env={**os.environ, "CLUSTERCTL_STATE": str(tmp_path / "state")})
    document = json.loads(out.getvalue())
    assert code == 0 and document["ok"], document
    phases = document["phases"]
    assert list(phases) == list(NAMES), phases
    assert list(phases.values()) == sorted(phases.values()), phases
    record = json.loads((tmp_path / "state" / "runs" / document["run_id"] / "run.json").read_text())
    assert record["phases"] == phases
    cpu = document["phases_cpu"]  # the controller's CPU seconds so far at each phase: only ever more
    assert list(cpu) == list(NAMES) and list(cpu.values()) == sorted(cpu.values()) and cpu["probe"] > 0, cpu
    assert record["phases_cpu"] == cpu
