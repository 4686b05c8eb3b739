"""`clusterctl logs` and `clusterctl stop` on the rehearsal cluster (issue 27, long runs): a run of
2 nodes x 2 gloo ranks that sleeps (tests/fixtures/jobs/stall.py, stall detection off) started by an
attached `clusterctl run`; `logs RUN --rank 3` shows that rank's lines (node2, reached as the sudo
user `ccops`, its files read from the host through sudo); a second run is refused naming the run and
`clusterctl stop RUN`; `stop RUN` from another process ends it on every node within 15 s with no
process left, the attached run exits 1 saying it was stopped, and `status --json` lists it stopped."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, FIXTURE_JOBS, Cli, processes_with, variant, wait_until

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

JOBS_DIR = "logs-stop-jobs"


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    jobs = sandbox.shared_outputs / JOBS_DIR
    jobs.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURE_JOBS / "stall.py", jobs / "stall.py")
    where = tmp_path_factory.mktemp("logs-stop")
    cli = Cli(where / "state")
    (where / "prompt.txt").write_text("a cat\n")
    code, doc = cli.json("up", str(sandbox.inventory_path))
    assert code == 0, doc
    yield cli, where
    cli.json("down", "-i", str(sandbox.inventory_path))
    shutil.rmtree(jobs, ignore_errors=True)


def _sleeping_job(sb, path: Path) -> Path:
    def change(doc):
        doc["hosts"] = [h for h in doc["hosts"] if h["name"] in ("node1", "node2")]
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/stall.py"], nproc_per_node=2,
                          args=["--mode", "hang", "--rank", "1", "--seconds", "600"])
        doc["job"].pop("world_size_divides", None)

    return variant(sb, path, change)


def _run_dirs(sb) -> set:
    logs = sb.shared_outputs / "logs"
    return set(p.name for p in logs.iterdir()) if logs.is_dir() else set()


def _left_over(run_id: str) -> list:
    return [(pid, cmd) for pid, cmd in processes_with(run_id) + processes_with(f"{JOBS_DIR}/stall.py")
            if "pytest" not in cmd]


def test_logs_of_a_rank_then_stop_ends_the_run_everywhere_and_the_attached_run_says_so(sandbox, cluster, tmp_path):
    cli, where = cluster
    inventory = _sleeping_job(sandbox, tmp_path / "sleep.yaml")
    before = _run_dirs(sandbox)
    run = cli.popen("run", "-i", str(inventory), "--stall-timeout", "0", str(where / "prompt.txt"))
    run_id = None
    try:
        def rank3_up():
            for rid in _run_dirs(sandbox) - before:
                for log in (sandbox.shared_outputs / "logs" / rid / "node2").glob("*/attempt_0/1/stdout.log"):
                    if "up, world 4" in log.read_text(errors="replace"):
                        return rid
            return None

        run_id = wait_until(rank3_up, 120, interval=0.5, what="rank 3 up on node2")

        code, doc = cli.json("logs", run_id, "--rank", "3")
        assert code == 0 and doc["ok"] and doc["run_id"] == run_id, doc
        assert [(x["host"], x["rank"], x["text"]) for x in doc["lines"] if x["stream"] == "stdout"] == [
            ("node2", 3, "[stall rank 3] up, world 4")]
        assert {x["rank"] for x in doc["lines"]} == {3}
        shown = cli.popen("logs", run_id, "--rank", "3", "--tail", "5", json_output=False)
        out, err = shown.communicate(timeout=60)
        assert shown.returncode == 0 and "[node2 r3] [stall rank 3] up, world 4\n" in out, (out, err)

        code, doc = cli.json("logs", run_id, "--node", "node1")  # every rank of node1, torchrun's own lines
        assert code == 0 and {x["rank"] for x in doc["lines"]} <= {0, 1, None}
        assert ("node1", 0, "[stall rank 0] up, world 4") in [(x["host"], x["rank"], x["text"]) for x in doc["lines"]]

        code, doc = cli.json("run", "-i", str(inventory), str(where / "prompt.txt"))  # one run at a time
        assert code == 2 and f"run {run_id}" in doc["error"] and f"`clusterctl stop {run_id}`" in doc["fix"], doc

        code, doc = cli.json("status", "-i", str(inventory))
        assert doc["runs"][0]["run_id"] == run_id and doc["runs"][0]["state"] == "running", doc["runs"][:1]

        started = time.monotonic()
        code, doc = cli.json("stop", run_id)
        assert code == 0 and doc["ok"] and doc["state"] == "stopped", doc
        assert set(doc["hosts"]) == {"node1", "node2"}
        assert all(h["status"] in ("ok", "changed") for h in doc["hosts"].values()), doc["hosts"]
        code, document, stderr = Cli.finish(run, timeout=30)
        assert time.monotonic() - started < 15, f"the run ended {time.monotonic() - started:.1f}s after the stop"
        assert code == 1 and document["stopped"] is True and document["run_id"] == run_id, (document, stderr[-2000:])
        assert "first_failure" not in document
        assert wait_until(lambda: not _left_over(run_id), 15, what="no process of the run") is True
        for node in ("node1", "node2"):
            assert (sandbox.shared_outputs / "logs" / run_id / node / "agent.exit").exists()

        code, doc = cli.json("status", "-i", str(inventory))
        assert doc["runs"][0]["run_id"] == run_id and doc["runs"][0]["state"] == "stopped", doc["runs"][:1]
        code, doc = cli.json("stop", run_id)  # again: said, exit 0
        assert code == 0 and doc["already_ended"] is True

        code, doc = cli.json("logs", run_id, "--rank", "3")  # a run that ended: its files are still read
        assert code == 0 and ("node2", 3, "[stall rank 3] up, world 4") in [
            (x["host"], x["rank"], x["text"]) for x in doc["lines"]]
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if run_id:
            cli.json("stop", run_id)
