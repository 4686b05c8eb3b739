"""The straggler analysis (clusterctl/watch/stragglers.py) on real py-spy samples, and the progress lines
it reads the step time from. The samples: clusterctl's node script (16 non-blocking samples 0.5 s
apart) of tests/fixtures/jobs/straggler.py under torchrun with 2 gloo ranks, rank 1 0.35 s slower on a
0.2 s step, and the same job with both ranks alike (tests/fixtures/pyspy/SOURCES.md)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import socket
import sys
from pathlib import Path

import pytest

FIXTURE_JOBS = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"


# --------------------------------------------------------------------------- `clusterctl run` on this machine


def _inventory(tmp_path, *args: str) -> Path:
    """An inventory of this machine (connection: local, 4 gloo ranks of straggler.py with `args`)."""
    pytest.importorskip("torch")
    from clusterctl_helpers import free_port  # below the ephemeral range

    port = free_port()
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"""name: stragglers-{os.getpid()}
hosts:
  - {{name: local, connection: local}}
rendezvous: {{port: {port}}}
job:
  command: [{FIXTURE_JOBS / 'straggler.py'}]
  args: {json.dumps(list(args))}
  nproc_per_node: 4
  python: {sys.executable}
  outputs: {tmp_path / 'outputs'}
checks: {{ib: off}}
""")
    (tmp_path / "prompt.txt").write_text("hello\n")
    return inventory


def _cli(tmp_path, monkeypatch, *argv: str) -> tuple[int, str]:
    """`clusterctl ARGV` in-process, its state under tmp_path: (exit code, what it printed)."""
    from clusterctl.cli import main

    out, err = io.StringIO(), io.StringIO()
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv), env={**os.environ, "CLUSTERCTL_STATE": str(tmp_path / "state")})
    return code, err.getvalue() + out.getvalue()


def _run_here(tmp_path, monkeypatch, *args: str) -> tuple[int, str, dict]:
    """`clusterctl run` for real on this machine: (exit code, the live log, run.json)."""
    inventory = _inventory(tmp_path, *args)
    code, live = _cli(tmp_path, monkeypatch, "run", "-i", str(inventory), str(tmp_path / "prompt.txt"))
    record = json.loads(next((tmp_path / "state" / "runs").glob("*/run.json")).read_text())
    return code, live, record


@pytest.mark.slow
@pytest.mark.heavy
def test_a_run_here_names_the_slow_rank_live_and_in_its_record(tmp_path, monkeypatch):
    code, live, record = _run_here(tmp_path, monkeypatch, "--steps", "60", "--slow_rank", "2", "--extra", "0.35")
    assert code == 0, live[-3000:]
    assert [(s["host"], s["rank"]) for s in record["stragglers"]] == [("local", 2)], live[-3000:]
    # the lag in seconds once a progress line gave the step time, else as a share of the step (named sooner)
    assert re.search(r"\[straggler\] local r2: \+(?:0\.[0-9]{2} s per step|[0-9]+% of each step) \([0-9.]+x the "
                     r"median\), \d+ of the last \d+ samples working while the other 3 ranks waited in a collective",
                     live), live[-3000:]
    print(f"\nnamed {record['stragglers'][0]['since'] - record['started']:.1f}s after the start: {record['stragglers'][0]}")


@pytest.mark.slow
@pytest.mark.heavy
def test_a_run_here_with_every_rank_alike_names_nobody(tmp_path, monkeypatch):
    code, live, record = _run_here(tmp_path, monkeypatch, "--steps", "100")
    assert code == 0 and record["stragglers"] == [] and "[straggler]" not in live, live[-3000:]


@pytest.mark.slow
@pytest.mark.heavy
def test_a_detached_run_here_is_watched_by_its_keeper_and_status_names_the_slow_rank_while_it_runs(tmp_path, monkeypatch):
    """`run --detach`: the keeper samples the ranks (node/node_stragglers.py), the supervisor names the rank
    (node/straggler_verdict.py); `status --json` has it while the run goes on; no py-spy is left at the end."""
    import time

    inventory = _inventory(tmp_path, "--steps", "200", "--slow_rank", "2", "--extra", "0.35")
    code, said = _cli(tmp_path, monkeypatch, "run", "--json", "-i", str(inventory), "--detach", str(tmp_path / "prompt.txt"))
    assert code == 0, said[-3000:]
    run_id = json.loads(said[said.index("{"):])["run_id"]
    deadline, run = time.monotonic() + 150, {}
    while time.monotonic() < deadline and not run.get("stragglers"):
        time.sleep(2)
        code, said = _cli(tmp_path, monkeypatch, "status", "--json", "-i", str(inventory))
        run = next((r for r in json.loads(said[said.index("{"):])["runs"] if r["run_id"] == run_id), {})
    assert [(s["host"], s["rank"]) for s in run.get("stragglers") or ()] == [("local", 2)], run
    assert run["state"] == "running" and run["stragglers"][0]["evidence"].endswith("waited in a collective"), run
    code, said = _cli(tmp_path, monkeypatch, "attach", "-i", str(inventory), run_id)  # until the end
    record = json.loads((tmp_path / "state" / "runs" / run_id / "run.json").read_text())
    assert [(s["host"], s["rank"]) for s in record["stragglers"]] == [("local", 2)], said[-3000:]
    assert not list((tmp_path / "outputs").rglob("py-spy*"))  # the keeper removed what it unpacked
