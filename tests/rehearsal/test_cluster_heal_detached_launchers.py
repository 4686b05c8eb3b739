"""A detached run that heals itself with each launcher beyond torchrun (`mpirun`, `deepspeed`, `none`) on the
rehearsal cluster (issue 46): `run --detach` returns, and from then on only `status` is asked. The engine on
the master node (node/engine.py) decides; the keepers relaunch each node's own launcher command
(plan/launch_plan.py) with the next attempt's values. 3 nodes, the job on 2 (node3 the spare), one gloo rank a
node (tests/fixtures/jobs/checkpointed.py): rank 1, on node2, SIGKILLs itself in attempt 1; attempt 2 runs
on node1 + node3 (tests/test_cluster_heal_launchers.py runs the same attached)."""
from __future__ import annotations

import json

import pytest

from clusterctl_helpers import cluster_with_jobs, wait_until
from rehearsal.test_cluster_heal_detached import _detach, _ended
from rehearsal.test_cluster_heal_launchers import JOBS_DIR, LAUNCHERS, STEPS, _inventory, _left_over

# heavy: test_cluster_heal_launchers.py relaunches each launcher attached, test_cluster_heal_detached.py a detached run
pytestmark = [pytest.mark.sandbox, pytest.mark.slow, pytest.mark.heavy]


@pytest.fixture(scope="module")
def cli(sandbox, tmp_path_factory):
    for cli, _ in cluster_with_jobs(sandbox, tmp_path_factory, JOBS_DIR, "checkpointed.py"):
        yield cli


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_rank_killed_on_the_other_node_of_a_detached_run_is_relaunched_on_the_master_and_the_spare(
        sandbox, cli, tmp_path, launcher):
    name = f"detached-killed-{launcher}"
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("a cat\n")
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", name, launcher)
    run_id = _detach(cli, inventory, prompt)
    run = wait_until(lambda: _ended(cli, inventory, run_id), 300, interval=3, what="the run's end")
    assert run["state"] == "succeeded" and run["exit_code"] == 0, json.dumps(run)[-3000:]
    first, second = run["attempts"]
    assert first["hosts"] == ["node1", "node2"] and first["exit_code"] == 1
    assert first["excluded"] == [{"host": "node2", "cause": "killed_by_signal"}], first["first_failure"]
    assert (second["attempt"], second["hosts"], second["exit_code"]) == (2, ["node1", "node3"], 0)
    done = json.loads((sandbox.shared_outputs / JOBS_DIR / name / "out" / "done.json").read_text())
    assert (done["attempt"], done["world"], done["total"]) == (2, 2, sum(range(1, STEPS + 1))), done
    assert wait_until(lambda: not _left_over(run_id), 60, interval=1, what="no process of the run (keepers too)")
