"""Hangs on the rehearsal cluster (issue 19): 3 nodes x 2 gloo ranks in containers, one rank sleeping
in a named function before an all_reduce (tests/fixtures/jobs/stall.py). `run --stall-timeout 10`
ends within 45 s naming that rank, its inventory host and the function, and leaves no process; a job
silent but computing for twice the stall timeout is not stopped; Ctrl-C while the stacks are taken stops everything;
collect-logs brings the stacks back and diagnose names the rank. The stacks are taken from the host
(node2 as the non-root `ccops` through sudo, node3 through the bastion), not in the containers."""
from __future__ import annotations

import select
import signal
import time
from pathlib import Path

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, cluster_with_jobs, processes_with, variant, wait_until

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

JOBS_DIR = "stall-jobs"
NODE_OF_RANK = {0: "node1", 1: "node1", 2: "node2", 3: "node2", 4: "node3", 5: "node3"}


def _stall_job(sb, path: Path, *args: str) -> Path:
    def change(doc):
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/stall.py"], args=list(args), nproc_per_node=2)

    return variant(sb, path, change)


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    yield from cluster_with_jobs(sandbox, tmp_path_factory, JOBS_DIR, "stall.py")


def _left_over(run_id: str) -> list:
    return [(pid, cmd) for pid, cmd in processes_with(run_id) if "pytest" not in cmd]


def test_a_rank_sleeping_in_load_shard_is_named_with_its_host_within_45_s_and_nothing_is_left(sandbox, cluster, tmp_path):
    cli, where = cluster
    inventory = _stall_job(sandbox, tmp_path / "hang.yaml", "--mode", "hang", "--rank", "3", "--seconds", "600")
    started = time.monotonic()
    code, doc = cli.json("run", "-i", str(inventory), "--stall-timeout", "10", str(where / "prompt.txt"))
    took = time.monotonic() - started
    assert code == 1 and doc["ok"] is False, doc
    assert took < 45, f"the hang was stopped {took:.0f}s after the run started"
    first = doc["first_failure"]
    assert (first["host"], first["rank"]) == ("node2", 3), first
    finding = first["diagnosis"][0]
    assert finding["cause"] == "rank_hang" and finding["evidence"].startswith("rank 3 on node2 in load_shard (stall.py:")
    assert "while 5 ranks wait in all_reduce (stall.py:" in finding["evidence"]
    assert wait_until(lambda: not _left_over(doc["run_id"]), 15, what="no process of the run") is True

    dest = tmp_path / "collected"
    code, collected = cli.json("collect-logs", "-i", str(inventory), "--run", doc["run_id"], "--dest", str(dest))
    assert code == 0, collected
    assert {p.parts[-2] for p in dest.glob("*/outputs/logs/*/*/stacks-*.json")} == {"node1", "node2", "node3"}
    assert (collected["findings"][0]["cause"], collected["findings"][0]["rank"]) == ("rank_hang", 3)
    code, diagnosed = cli.json("diagnose", str(dest))
    assert diagnosed["root_cause"] == "rank_hang" and diagnosed["findings"][0]["host"] == "node2"


@pytest.mark.heavy  # tests/local/test_stall_detection.py holds the same negative on a local host; here 33 s
def test_a_job_silent_but_computing_for_twice_the_stall_timeout_is_not_stopped(sandbox, cluster, tmp_path):
    cli, where = cluster
    inventory = _stall_job(sandbox, tmp_path / "compute.yaml", "--mode", "compute", "--seconds", "20")
    code, doc = cli.json("run", "-i", str(inventory), "--stall-timeout", "10", str(where / "prompt.txt"))
    assert code == 0 and doc["ok"] is True and "first_failure" not in doc, doc


@pytest.mark.heavy  # the mechanism: tests/local/test_stall_detection.py's twin runs in `make test`
def test_ctrl_c_while_the_stacks_are_taken_stops_every_rank(sandbox, cluster, tmp_path):
    cli, where = cluster
    inventory = _stall_job(sandbox, tmp_path / "int.yaml", "--mode", "hang", "--rank", "4", "--seconds", "600")
    proc = cli.popen("run", "-i", str(inventory), "--stall-timeout", "10", str(where / "prompt.txt"), json_output=False)
    try:
        seen, deadline = "", time.monotonic() + 120
        while "taking every rank's stack" not in seen and time.monotonic() < deadline:
            if select.select([proc.stderr], [], [], 1.0)[0]:
                seen += proc.stderr.readline()
        assert "taking every rank's stack" in seen, seen[-3000:]
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-3000:]
    assert wait_until(lambda: not [p for p in processes_with(f"{JOBS_DIR}/stall.py") if "pytest" not in p[1]], 20,
                      what="no rank left") is True
    assert wait_until(lambda: not processes_with("clusterctl-stacks"), 15, what="no stack script left") is True
