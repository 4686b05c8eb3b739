"""Stragglers of a detached run on the rehearsal cluster (issue 46): 3 nodes x 2 gloo ranks in containers
running tests/fixtures/jobs/straggler.py (0.2 s steps, an all_reduce each), handed over with `run --detach`.
Each keeper samples its node's ranks with py-spy (node/node_stragglers.py) and the supervisor names the rank
the others wait for (node/straggler_verdict.py, the attached watch's verdict): a rank 0.35 s slower per step
is named, with its host, in `status --json` while the run goes on and in run.json at its end; the same job
with every rank alike names nobody; after the end no keeper, no py-spy and no shipped binary is left."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, cluster_with_jobs, processes_with, variant, wait_until

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

JOBS_DIR = "straggler-detached-jobs"


def _job(sb, path: Path, *args: str) -> Path:
    def change(doc):
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/straggler.py"], args=list(args), nproc_per_node=2)

    return variant(sb, path, change)


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    yield from cluster_with_jobs(sandbox, tmp_path_factory, JOBS_DIR, "straggler.py")


def _run_of(cli, inventory, run_id):
    code, status = cli.json("status", "-i", str(inventory))
    return next((r for r in status.get("runs") or () if r["run_id"] == run_id), {}) if code == 0 else {}


def _ended_clean(sb, cli, inventory, run_id):
    """Wait for the end (`attach`), then: no process of the run (keepers, ranks, py-spy) and no py-spy in its run dirs."""
    code, ended = cli.json("attach", "-i", str(inventory), run_id)
    assert code == 0, ended
    left = lambda: [cmd for _, cmd in processes_with(run_id) + processes_with("py-spy") if "pytest" not in cmd]  # noqa: E731
    wait_until(lambda: not left(), 30, what=f"the run's processes to end: {left()}")
    shipped = [str(p) for p in (sb.shared_outputs / "logs" / run_id).rglob("py-spy*")]
    assert not shipped, shipped
    return json.loads((cli.state_dir / "runs" / run_id / "run.json").read_text())


def test_a_detached_run_names_the_rank_0_35_s_slower_per_step_in_status_while_it_runs(sandbox, cluster, tmp_path):
    cli, where = cluster
    inventory = _job(sandbox, tmp_path / "slow.yaml", "--steps", "200", "--slow_rank", "3", "--extra", "0.35")
    code, doc = cli.json("run", "-i", str(inventory), "--detach", str(where / "prompt.txt"))
    assert code == 0 and doc.get("run_id"), json.dumps(doc)[-3000:]
    run_id = doc["run_id"]
    run = wait_until(lambda: (lambda r: r if r.get("stragglers") else None)(_run_of(cli, inventory, run_id)), 150,
                     interval=2.0, what="status --json to name a straggler")
    assert run["state"] == "running", run
    named = run["stragglers"]
    assert [(s["host"], s["rank"]) for s in named] == [("node2", 3)], named
    assert named[0]["ratio"] > 1.5 and named[0]["evidence"].endswith("waited in a collective"), named
    print(f"\nnamed {named[0]['since'] - (run.get('started') or 0):.1f}s after the start: {named[0]}")
    record = _ended_clean(sandbox, cli, inventory, run_id)
    assert [(s["host"], s["rank"]) for s in record["stragglers"]] == [("node2", 3)], record["stragglers"]


def test_a_detached_run_with_every_rank_alike_names_nobody(sandbox, cluster, tmp_path):
    cli, where = cluster
    inventory = _job(sandbox, tmp_path / "healthy.yaml", "--steps", "150")
    code, doc = cli.json("run", "-i", str(inventory), "--detach", str(where / "prompt.txt"))
    assert code == 0 and doc.get("run_id"), json.dumps(doc)[-3000:]
    record = _ended_clean(sandbox, cli, inventory, doc["run_id"])
    assert record["state"] == "succeeded" and record.get("stragglers", []) == [], record
