"""`job.launcher: mpirun` on the rehearsal cluster: mpirun (Open MPI 4.1, the host's openmpi-bin, seen by the
containers through the read-only /usr) on node1, the other nodes' orted started through clusterctl's gate, a
torch gloo job joining through env:// unchanged; the same live log, `logs`, collect-logs, fail-fast and first
failure as torchrun's ranks. The job: tests/fixtures/jobs/mpi_gloo.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, Cli, cluster_with_jobs, processes_with, variant, wait_until

pytestmark = [pytest.mark.sandbox, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("mpirun") is None, reason="openmpi-bin is not installed on this machine")]

JOBS_DIR = "mpirun-jobs"
NODES = ("node1", "node2", "node3")
NPROC = 2


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    yield from cluster_with_jobs(sandbox, tmp_path_factory, JOBS_DIR, "mpi_gloo.py")


def _mpirun(sb, path: Path, *args: str) -> Path:
    def change(doc):
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/mpi_gloo.py"], launcher="mpirun",
                          args=["--out", "{outputs}/mpi/{run_id}", *args])
    return variant(sb, path, change)


def _left_running(run_id: str) -> list[str]:
    """mpirun, its agents, the gates, orted and the ranks (the controller's own stack sampler, which ends by
    itself, is not the launcher's)."""
    launched = [cmd for _, cmd in processes_with(run_id) if "node_mpi_gate.py" in cmd or "mpirun" in cmd]
    return launched + [cmd for _, cmd in processes_with("orted -mca")]


def test_an_mpirun_job_joins_gloo_through_env_with_each_ranks_variables_and_its_logs_where_collect_finds_them(
        sandbox, cluster, tmp_path):
    cli, where = cluster
    inventory = str(_mpirun(sandbox, tmp_path / "mpi.yaml"))
    code, doc = cli.json("run", "-i", inventory, str(where / "prompt.txt"))
    assert code == 0 and doc["ok"] is True, doc
    world = NPROC * len(NODES)
    assert doc["world_size"] == world
    run_id = doc["run_id"]
    records = {p.name: json.loads(p.read_text()) for p in (sandbox.shared_outputs / "mpi" / run_id).glob("rank*.json")}
    assert sorted(records) == sorted(f"rank{r}.json" for r in range(world))
    for rank in range(world):
        assert records[f"rank{rank}.json"] == {
            "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank % NPROC),
            "LOCAL_WORLD_SIZE": str(NPROC), "NODE_RANK": str(rank // NPROC), "MASTER_ADDR": doc["master"]["address"],
            "MASTER_PORT": str(doc["master"]["port"]), "CLUSTERCTL_HOST": NODES[rank // NPROC],
            "sum": sum(range(world)), "torch_rank": rank, "torch_world": world}
    code, logs = cli.json("logs", "-i", inventory, run_id)
    assert code == 0, logs
    printed = {(line["host"], line["rank"]) for line in logs["lines"] if line["text"].startswith('{"CLUSTERCTL_HOST"')}
    assert printed == {(NODES[r // NPROC], r) for r in range(world)}  # each rank's line, on its own node
    dest = tmp_path / "collected"
    code, collected = cli.json("collect-logs", "-i", inventory, "--run", run_id, "--dest", str(dest))
    assert code == 0 and collected["ok"] is True, collected
    for rank in range(world):
        host = NODES[rank // NPROC]
        assert f'"RANK": "{rank}"' in (dest / host / "logs" / f"{host}-r{rank}.log").read_text()
    assert not list(dest.rglob("mpi.key")) and (sandbox.shared_outputs / "logs" / run_id / "node1" / "mpi.key").exists()
    assert not _left_running(run_id), _left_running(run_id)


def test_a_failed_rank_fails_the_mpirun_job_fast_names_its_host_and_rank_and_leaves_nothing_running(
        sandbox, cluster, tmp_path):
    cli, where = cluster
    inventory = str(_mpirun(sandbox, tmp_path / "fail.yaml", "--fail-rank", "3"))
    code, doc = cli.json("run", "-i", inventory, str(where / "prompt.txt"))
    assert code == 1 and doc["ok"] is False, doc
    first = doc["first_failure"]
    assert (first["host"], first["rank"]) == ("node2", 3), first
    assert "gives up" in json.dumps(first["diagnosis"]), first
    assert not _left_running(doc["run_id"]), _left_running(doc["run_id"])  # mpirun, its agents, the gates, orted and the ranks


def test_stop_ends_a_running_mpirun_job_on_every_node_with_nothing_left(sandbox, cluster, tmp_path):
    cli, where = cluster
    inventory = str(_mpirun(sandbox, tmp_path / "stop.yaml", "--fail-rank", "99"))  # no rank fails: all wait
    outputs = sandbox.shared_outputs / "mpi"
    before = set(p.name for p in outputs.iterdir()) if outputs.is_dir() else set()
    run = cli.popen("run", "-i", inventory, "--stall-timeout", "0", str(where / "prompt.txt"))
    run_id = None
    try:
        def all_up():
            for rid in (set(p.name for p in outputs.iterdir()) if outputs.is_dir() else set()) - before:
                if len(list((outputs / rid).glob("rank*.json"))) == NPROC * len(NODES):
                    return rid
            return None
        run_id = wait_until(all_up, 120, interval=0.5, what="every rank joined")
        code, doc = cli.json("stop", run_id)
        assert code == 0 and doc["ok"] and doc["state"] == "stopped", doc
        code, document, stderr = Cli.finish(run, timeout=60)
        assert code == 1 and document["stopped"] is True, (document, stderr[-2000:])
        assert wait_until(lambda: not _left_running(run_id), 15, what="no process of the run") is True
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if run_id:
            cli.json("stop", run_id)
