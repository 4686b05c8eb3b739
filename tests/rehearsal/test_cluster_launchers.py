"""`job.launcher: none` on the rehearsal cluster: job.command once per node, with the distributed
variables set, the same live log, `logs`, fail-fast and first failure as torchrun's ranks.
The job: tests/fixtures/jobs/once.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, cluster_with_jobs, processes_with, variant

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

JOBS_DIR = "launchers-jobs"
NODES = ("node1", "node2", "node3")


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    yield from cluster_with_jobs(sandbox, tmp_path_factory, JOBS_DIR, "once.py")


def _once(sb, path: Path, *args: str) -> Path:
    def change(doc):
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/once.py"], launcher="none",
                          args=["--out", "{outputs}/once/{run_id}", *args])
    return variant(sb, path, change)


def test_launcher_none_runs_the_command_once_per_node_with_world_size_rank_and_master_set(sandbox, cluster, tmp_path):
    cli, where = cluster
    inventory = str(_once(sandbox, tmp_path / "once.yaml"))
    code, doc = cli.json("run", "-i", inventory, str(where / "prompt.txt"))
    assert code == 0 and doc["ok"] is True, doc
    assert (doc["world_size"], doc["nproc_per_node"]) == (3, 1)
    run_id = doc["run_id"]
    records = {p.name: json.loads(p.read_text()) for p in (sandbox.shared_outputs / "once" / run_id).glob("node*.json")}
    assert sorted(records) == ["node0.json", "node1.json", "node2.json"]
    for rank, host in enumerate(NODES):
        assert records[f"node{rank}.json"] == {
            "WORLD_SIZE": "3", "RANK": str(rank), "NODE_RANK": str(rank), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": doc["master"]["address"], "MASTER_PORT": str(doc["master"]["port"]), "CLUSTERCTL_HOST": host}
    code, logs = cli.json("logs", "-i", inventory, run_id)
    assert code == 0, logs
    printed = {(line["host"], line["rank"]) for line in logs["lines"] if line["text"].startswith('{"WORLD_SIZE"')}
    assert printed == {(host, rank) for rank, host in enumerate(NODES)}  # each node's line, as its rank's


def test_launcher_none_fails_fast_names_the_node_that_failed_first_and_leaves_nothing_running(sandbox, cluster,
                                                                                               tmp_path):
    cli, where = cluster
    inventory = str(_once(sandbox, tmp_path / "fail.yaml", "--fail-node", "1"))
    code, doc = cli.json("run", "-i", inventory, str(where / "prompt.txt"))
    assert code == 1 and doc["ok"] is False, doc
    first = doc["first_failure"]
    assert (first["host"], first["rank"]) == ("node2", 1), first
    assert "gives up" in json.dumps(first["diagnosis"]), first
    assert not [cmd for _, cmd in processes_with(doc["run_id"]) if "pytest" not in cmd]  # the others were stopped
