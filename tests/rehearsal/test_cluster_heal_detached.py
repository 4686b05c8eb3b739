"""A detached run that heals itself on the rehearsal cluster (issue 35): `run --detach` returns, and
from then on only `status` is asked; the supervisor on the master node (node/node_agent.py with
node/node_healing.py) does what an attached run's controller does. 3 nodes, the job on 2 (node3 the
spare, with an idle keeper), one gloo rank a node (tests/fixtures/jobs/checkpointed.py, as
tests/rehearsal/test_cluster_heal.py runs it). A node cut off the network mid-run, a Python exception on every
rank (the job's own fault: not retried) and `clusterctl stop` during a relaunch."""
from __future__ import annotations

import json
import time

import pytest

from clusterctl_helpers import cluster_with_jobs, wait_until

from rehearsal.test_cluster_heal import JOBS_DIR, STEPS, _done, _here, _inventory, _left_over, _stepped

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]


@pytest.fixture(scope="module")
def cli(sandbox, tmp_path_factory):
    for cli, _ in cluster_with_jobs(sandbox, tmp_path_factory, JOBS_DIR, "checkpointed.py"):
        yield cli


@pytest.fixture
def prompt(tmp_path):
    path = tmp_path / "prompt.txt"
    path.write_text("a cat\n")
    return path


def _status(cli, inventory, run_id: str) -> dict:
    code, doc = cli.json("status", "-i", str(inventory))
    assert "runs" in doc, doc
    return next(r for r in doc["runs"] if r["run_id"] == run_id)


def _ended(cli, inventory, run_id: str):
    run = _status(cli, inventory, run_id)
    return run if run["state"] not in ("running", "unknown") else None


def _detach(cli, inventory, prompt) -> str:
    code, doc = cli.json("run", "--detach", "-i", str(inventory), str(prompt))
    assert code == 0 and doc["detached"] is True, json.dumps(doc)[-3000:]
    return doc["run_id"]


def test_a_detached_run_heals_itself_when_a_node_is_cut_off_with_no_clusterctl_watching(sandbox, cli, prompt, tmp_path):
    name = "detached-cut"
    # job.lost_after 6: node2 is lost 6 s after its last report (15 by default)
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", name, restarts=1, lost_after=6)
    run_id = _detach(cli, inventory, prompt)  # returns: from here on nothing of clusterctl runs but `status`
    try:
        wait_until(lambda: _stepped(sandbox, name, 3), 120, interval=0.3, what="a checkpoint of step 3")
        cut = time.time()
        sandbox.cut_network("node2")
        run = wait_until(lambda: _ended(cli, inventory, run_id), 300, interval=3, what="the run's end")
    finally:
        sandbox.restore_network("node2")
    assert run["state"] == "succeeded" and run["exit_code"] == 0, json.dumps(run)[-3000:]
    first, second = run["attempts"]
    assert first["hosts"] == ["node1", "node2"] and first["exit_code"] == 1
    assert first["excluded"] == [{"host": "node2", "cause": "node_unreachable"}]
    assert second["attempt"] == 2 and second["hosts"] == ["node1", "node3"] and second["exit_code"] == 0
    assert second["checkpoint"].rsplit("/", 1)[-1].startswith("step-")
    done = _done(sandbox, name)
    resumed = int(done["resumed_from"].rsplit("-", 1)[-1])
    assert done["attempt"] == 2 and done["ran"] == list(range(resumed + 1, STEPS + 1))
    assert done["total"] == sum(range(1, STEPS + 1))
    print(f"\ndetached heal: the cut at {cut:.1f}, attempt 2 started {second['started'] - cut:.1f} s after it "
          f"(relaunch_s {second['relaunch_s']})")
    code, health = cli.json("health", "-i", str(inventory), "node2")  # the controller kept the exclusion
    assert any(e["kind"] == "heal_excluded" and e["run_id"] == run_id for e in health["nodes"][0]["events"]), health
    assert wait_until(lambda: not _left_over(run_id), 60, interval=1, what="no process of the run (keepers too)")


def test_a_python_exception_on_every_rank_of_a_detached_run_is_not_retried(sandbox, cli, tmp_path):
    from clusterctl import Cluster

    inventory = _inventory(sandbox, tmp_path / "inv.yaml", "detached-raised", "--raise_at", "3", restarts=1)
    started = Cluster.load(inventory, state_dir=cli.state_dir).run(prompt="a cat")  # the API detaches by default
    assert started.wait(timeout=180) == 1
    run_id = started.id
    run = _status(cli, inventory, run_id)
    assert run["state"] == "failed" and len(run["attempts"]) == 1 and run["attempts"][0]["excluded"] == []
    record = json.loads((cli.state_dir / "runs" / run_id / "run.json").read_text())
    assert "the job's own fault: not retried" in record["heal_refused"]
    assert "injected failure at step 3" in json.dumps(record["first_failure"])
    assert wait_until(lambda: not _left_over(run_id), 60, interval=1, what="no process of the run")


@pytest.mark.heavy  # `stop` between attempts is test_cluster_heal.py's; the detached keeper's own stop is test_cluster_logs_stop
def test_stop_during_a_detached_relaunch_leaves_nothing_running(sandbox, cli, prompt, tmp_path):
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", "detached-stop", "--raise_at", "2", "--every_attempt",
                           restarts=3, heal={"unknown": "transient"})
    run_id = _detach(cli, inventory, prompt)
    # attempt 2 failed too: the second relaunch waits BACKOFF_S[1] (10 s), long enough to be caught in
    wait_until(lambda: [a["exit_code"] for a in _status(cli, inventory, run_id)["attempts"]] == [1, 1], 180,
               interval=1, what="a second relaunch")
    code, doc = cli.json("stop", run_id)
    assert code == 0, doc
    run = _status(cli, inventory, run_id)
    assert run["state"] == "stopped" and len(run["attempts"]) == 2, run  # attempt 3 never launched
    assert wait_until(lambda: not _left_over(run_id), 40, interval=1, what="no process of the run (keepers too)")


@pytest.mark.heavy  # the master giving way is test_cluster_heal.py's (attached); the engine is the same
def test_the_master_rank_killed_in_a_detached_run_gives_way_to_the_first_survivor_the_supervisor_stays(
        sandbox, cli, prompt, tmp_path):
    name = "detached-master-killed"
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", name, "--kill_at", "4", "--kill_rank", "0", restarts=1)
    run_id = _detach(cli, inventory, prompt)
    run = wait_until(lambda: _ended(cli, inventory, run_id), 240, interval=3, what="the run's end")
    assert run["state"] == "succeeded", json.dumps(run)[-3000:]
    assert [a["hosts"] for a in run["attempts"]] == [["node1", "node2"], ["node2", "node3"]]
    assert run["attempts"][0]["excluded"] == [{"host": "node1", "cause": "killed_by_signal"}]
    assert _done(sandbox, name)["total"] == sum(range(1, STEPS + 1))
    assert wait_until(lambda: not _left_over(run_id), 60, interval=1, what="no process of the run")
