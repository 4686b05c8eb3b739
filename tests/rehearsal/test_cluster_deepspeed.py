"""`job.launcher: deepspeed` on the rehearsal cluster: DeepSpeed's per-node launcher on two nodes (deepspeed
0.19.8 from the venv the nodes share), gloo ranks with their global ranks, the ranks' logs where `logs` and
collect-logs read them, and fail-fast with the failed rank named. The job: tests/fixtures/jobs/ds_ranks.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, cluster_with_jobs, processes_with, variant, wait_until

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

JOBS_DIR = "deepspeed-jobs"
HOST_OF = {0: "node1", 1: "node1", 2: "node2", 3: "node2"}  # 2 ranks a node, in node order


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    yield from cluster_with_jobs(sandbox, tmp_path_factory, JOBS_DIR, "ds_ranks.py")


def _deepspeed(sb, path: Path, *args: str, **job) -> Path:
    def change(doc):
        doc["hosts"] = doc["hosts"][:2]
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/ds_ranks.py"], launcher="deepspeed",
                          nproc_per_node=2, args=["--out", "{outputs}/ds/{run_id}", *args], **job)
    return variant(sb, path, change)


def test_deepspeeds_launcher_runs_each_nodes_ranks_with_their_global_ranks_and_logs_where_collect_reads_them(
        sandbox, cluster, tmp_path):
    cli, where = cluster
    inventory = str(_deepspeed(sandbox, tmp_path / "ds.yaml"))
    code, doc = cli.json("run", "-i", inventory, str(where / "prompt.txt"))
    assert code == 0 and doc["ok"] is True, doc
    assert (doc["world_size"], doc["nproc_per_node"]) == (4, 2)
    run_id = doc["run_id"]
    records = {p.name: json.loads(p.read_text()) for p in (sandbox.shared_outputs / "ds" / run_id).glob("rank*.json")}
    assert sorted(records) == [f"rank{r}.json" for r in range(4)]
    for rank, host in HOST_OF.items():
        assert records[f"rank{rank}.json"] == {
            "WORLD_SIZE": "4", "RANK": str(rank), "LOCAL_RANK": str(rank % 2), "local_rank_arg": rank % 2,
            "MASTER_ADDR": doc["master"]["address"], "MASTER_PORT": str(doc["master"]["port"]),
            "CROSS_RANK": str(rank // 2), "CLUSTERCTL_HOST": host, "sum": 10}
    code, logs = cli.json("logs", "-i", inventory, run_id)
    assert code == 0, logs
    printed = {(line["host"], line["rank"]) for line in logs["lines"] if line["text"].startswith('{"WORLD_SIZE"')}
    assert printed == {(host, rank) for rank, host in HOST_OF.items()}
    dest = tmp_path / "collected"
    code, collected = cli.json("collect-logs", "-i", inventory, "--run", run_id, "--dest", str(dest))
    assert code == 0 and collected["ok"] is True, collected
    for rank, host in HOST_OF.items():
        assert f'"RANK": "{rank}"' in (dest / host / "logs" / f"{host}-r{rank}.log").read_text()


def test_a_failing_rank_stops_every_node_and_is_named_with_its_host_and_a_diagnosis(sandbox, cluster, tmp_path):
    cli, where = cluster
    inventory = str(_deepspeed(sandbox, tmp_path / "fail.yaml", "--fail-rank", "2"))
    code, doc = cli.json("run", "-i", inventory, str(where / "prompt.txt"))
    assert code == 1 and doc["ok"] is False, doc
    first = doc["first_failure"]
    assert (first["host"], first["rank"]) == ("node2", 2), first
    assert "rank 2 gives up" in json.dumps(first["diagnosis"]), first
    left = lambda: [cmd for _, cmd in processes_with(doc["run_id"]) if "pytest" not in cmd]  # noqa: E731
    assert wait_until(lambda: not left(), 10, what="no process of the run") is True, left()


def test_a_python_without_deepspeed_fails_the_run_with_the_host_and_the_fix_named(sandbox, cluster, tmp_path):
    cli, where = cluster
    inventory = str(_deepspeed(sandbox, tmp_path / "bare.yaml", python="/usr/bin/python3"))  # Debian's: no deepspeed
    code, doc = cli.json("run", "-i", inventory, str(where / "prompt.txt"))
    assert code == 1 and doc["ok"] is False, doc
    first = doc["first_failure"]
    assert first["diagnosis"][0]["cause"] == "import_error", first
    assert (f"No module named 'deepspeed' for /usr/bin/python3 on {first['host']}; fix: pip install deepspeed in the "
            "image") in first["diagnosis"][0]["evidence"], first
