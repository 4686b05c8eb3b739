"""A run that heals itself with each launcher beyond torchrun (`mpirun`, `deepspeed`, `none`) on the rehearsal
cluster: 3 nodes, the job on 2 (job.nodes: 2, node3 the spare), one gloo rank a node
(tests/fixtures/jobs/checkpointed.py). Rank 1, on node2 (not the master), SIGKILLs itself in attempt 1: a node
fault (ground/healing.py), so node2 is left out and attempt 2 runs on node1 + node3 with the launcher's own
layout planned anew (mpirun's hostfile and gate, DeepSpeed's world_info, `none`'s WORLD_SIZE). Attached runs;
tests/rehearsal/test_cluster_heal.py covers torchrun and the other failures."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, cluster_with_jobs, processes_with, steady_health, variant, wait_until

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

JOBS_DIR = "heal-launcher-jobs"
STEPS = 8
# `make test` relaunches through `none` (the engine's own ranks); mpirun's and DeepSpeed's launchers go through
# the same relaunch with their own argv (tests/unit cover the argv): `make test-heavy` runs them end to end.
LAUNCHERS = [
    pytest.param("mpirun", marks=[pytest.mark.heavy, pytest.mark.skipif(shutil.which("mpirun") is None,
                                                                        reason="no openmpi-bin here")]),
    pytest.param("deepspeed", marks=[pytest.mark.heavy,
                                     pytest.mark.skipif(not __import__("importlib").util.find_spec("deepspeed"),
                                                        reason="no deepspeed in this venv")]),
    "none",
]


@pytest.fixture(scope="module")
def cli(sandbox, tmp_path_factory):
    for cli, _ in cluster_with_jobs(sandbox, tmp_path_factory, JOBS_DIR, "checkpointed.py"):
        yield cli


def _inventory(sb, path: Path, name: str, launcher: str) -> Path:
    """checkpointed.py into <outputs>/heal-launcher-jobs/<name>/{ckpt,out}, rank 1 killed at step 3 in attempt 1."""
    where = f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/{name}"

    def change(doc):
        doc["job"].pop("world_size_divides", None)
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/checkpointed.py"], nproc_per_node=1,
                          launcher=launcher, nodes=2, restarts=1,
                          args=["--steps", str(STEPS), "--ckpt", f"{where}/ckpt", "--out", f"{where}/out",
                                "--kill_at", "3", "--kill_rank", "1"],
                          checkpoint={"dir": f"{where}/ckpt", "complete": "COMPLETE"})
        # node2 is blamed in every case: remembered in the fleet record, quarantined never (as test_cluster_heal.py)
        doc["health"] = steady_health()

    return variant(sb, path, change)


def _left_over(run_id: str) -> list:
    mine = [cmd for _, cmd in processes_with(run_id) if "pytest" not in cmd]
    return mine + [cmd for _, cmd in processes_with("orted -mca")]  # mpirun's daemons do not name the run


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_rank_killed_on_the_other_node_is_relaunched_on_the_master_and_the_spare_whatever_the_launcher(
        sandbox, cli, tmp_path, launcher):
    name = f"killed-{launcher}"
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("a cat\n")
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", name, launcher)
    code, doc = cli.json("run", "-i", str(inventory), str(prompt))
    assert code == 0 and doc["ok"] is True, json.dumps(doc)[-3000:]
    first, second = doc["attempts"]
    assert first["hosts"] == ["node1", "node2"] and first["exit_code"] != 0
    assert first["excluded"] == [{"host": "node2", "cause": "killed_by_signal"}], first["first_failure"]
    assert (second["attempt"], second["hosts"], second["exit_code"]) == (2, ["node1", "node3"], 0)
    assert doc["world_size"] == 2
    assert [(n["host"], n["ranks"]) for n in doc["topology"]] == [("node1", [0, 0]), ("node3", [1, 1])]
    done = json.loads((sandbox.shared_outputs / JOBS_DIR / name / "out" / "done.json").read_text())
    assert (done["attempt"], done["world"], done["total"]) == (2, 2, sum(range(1, STEPS + 1))), done
    dest = tmp_path / "collected"
    code, collected = cli.json("collect-logs", "-i", str(inventory), "--run", doc["run_id"], "--dest", str(dest))
    assert code == 0, collected
    said = {host: (dest / host / "logs" / f"{host}-r{rank}.log").read_text()
            for host, rank in (("node1", 0), ("node2", 1), ("node3", 1))}
    assert "[ckpt rank 0] attempt 2 world 2 on node1" in said["node1"], said["node1"][-2000:]
    assert "[ckpt rank 1] attempt 2 world 2 on node3" in said["node3"], said["node3"][-2000:]
    assert "[ckpt rank 1] killing myself at step 3" in said["node2"], said["node2"][-2000:]
    earlier = next(dest.rglob(f"{doc['run_id']}/node1.attempt-1/{doc['run_id']}_{launcher}/attempt_0/0/stdout.log"))
    assert "[ckpt rank 0] attempt 1 world 2 on node1" in earlier.read_text()
    assert wait_until(lambda: not _left_over(doc["run_id"]), 40, interval=0.5, what="no process of the run")
