"""`clusterctl diagnose DIR` agrees with `clusterctl collect-logs` on the rehearsal cluster (issue 18):
a run that succeeded is no failure for both (from the run's exit codes, whatever its logs print),
and a failed run gets the same ranked findings, each with a confidence. Not run by the fast suite."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, FIXTURE_JOBS, Cli, variant

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]
JOBS_DIR = "cc-diagnose-jobs"


def _faults_job(sb, path: Path, *args: str) -> Path:
    def change(doc):
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/faults.py"],
                          args=[*args, "--out", "{outputs}/{run_id}"], nproc_per_node=1)
    return variant(sb, path, change)


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    jobs = sandbox.shared_outputs / JOBS_DIR
    jobs.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURE_JOBS / "faults.py", jobs / "faults.py")
    where = tmp_path_factory.mktemp("diagnose")
    cli = Cli(where / "state")
    (where / "prompt.txt").write_text("a cat\n")
    inventory = _faults_job(sandbox, where / "ok.yaml", "--mode", "ok")
    code, doc = cli.json("up", str(inventory))
    assert code == 0, doc
    yield cli, where
    cli.json("down", "-i", str(inventory))
    shutil.rmtree(jobs, ignore_errors=True)


def _run_and_collect(cli, inventory: Path, prompt: Path, dest: Path) -> tuple[dict, dict]:
    code, run = cli.json("run", "-i", str(inventory), str(prompt))
    code, collected = cli.json("collect-logs", "-i", str(inventory), "--run", run["run_id"], "--dest", str(dest))
    assert code == 0, collected
    return run, collected


def test_a_run_that_succeeded_is_no_failure_for_collect_logs_and_for_diagnose(sandbox, cluster):
    cli, where = cluster
    inventory = _faults_job(sandbox, where / "ok.yaml", "--mode", "ok")  # its ranks print secrets and warnings
    run, collected = _run_and_collect(cli, inventory, where / "prompt.txt", where / "ok-collected")
    assert run["exit_code"] == 0 and collected["findings"] == []
    code, diagnosed = cli.json("diagnose", str(where / "ok-collected"))
    assert code == 0 and diagnosed["findings"] == [] and diagnosed["root_cause"] is None


def test_a_failed_run_gets_the_same_ranked_findings_from_both(sandbox, cluster):
    cli, where = cluster
    inventory = _faults_job(sandbox, where / "exit.yaml", "--mode", "exit", "--rank", "1")
    run, collected = _run_and_collect(cli, inventory, where / "prompt.txt", where / "exit-collected")
    assert run["exit_code"] != 0 and 1 <= len(collected["findings"]) <= 3
    code, diagnosed = cli.json("diagnose", str(where / "exit-collected"))
    assert code == 0 and diagnosed["findings"] == collected["findings"]
    assert all(0 <= f["confidence"] <= 1 for f in diagnosed["findings"])
