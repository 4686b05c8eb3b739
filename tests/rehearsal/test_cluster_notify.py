"""Notifications and the run report on the rehearsal cluster (issue 41): a run whose rank 1 fails with
its own error (tests/fixtures/jobs/faults.py --mode own, 3 nodes x 1 rank) tells a webhook receiver on
loopback exactly one failure, with the diagnosis, and its end; its collected bundle gives a report
that a real headless browser opens showing the failure (tests/browser.py). A run that heals itself (rank 1
killed on node2, the spare node3 takes its place) sends its relaunch and its end; a detached one (3 nodes x 2
ranks, global rank 3 failing) its failure and end once, from the `status` that learns of its end.

The node-side sampler of metrics.jsonl is another branch's (issue 41 parts 1-3); until it is here, a
stand-in in this test writes each node's run dir a sample every half second in the same format, with
this machine's real CPU and memory (the rehearsal nodes are namespaces of this machine) and no GPU."""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, cluster_with_jobs, steady_health, variant, wait_until
from loopback_receiver import Receiver

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

JOBS_DIR = "notify-jobs"


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    yield from cluster_with_jobs(sandbox, tmp_path_factory, JOBS_DIR, "faults.py", "checkpointed.py")


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def _failing_job(sb, path: Path, url: str, rank: int = 1, after: float = 2, nproc: int = 1) -> Path:
    """faults.py --mode own: global rank `rank` exits with its own error `after` s in, the others at a barrier."""
    def change(doc):
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/faults.py"], nproc_per_node=nproc,
                          args=["--mode", "own", "--rank", str(rank), "--after", str(after), "--out",
                                "{outputs}/{run_id}"])
        doc["notify"] = {"webhook": url, "format": "json"}

    return variant(sb, path, change)


class StandInSampler:
    """metrics.jsonl in every run dir of the shared outputs that appears while it runs (see the docstring)."""

    def __init__(self, outputs: Path):
        self.outputs, self.done = outputs, threading.Event()
        self.before = set(outputs.glob("logs/*/node*"))
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        last = _cpu_times()
        while not self.done.wait(0.5):
            now = _cpu_times()
            busy = 100.0 * (1 - (now[1] - last[1]) / max(now[0] - last[0], 1))
            last = now
            total, free = _memory_mb()
            for run_dir in set(self.outputs.glob("logs/*/node*")) - self.before:
                if "." in run_dir.name:  # an earlier attempt's run dir, set aside (node1.attempt-1)
                    continue
                line = {"t": time.time(), "host": run_dir.name, "cpu_pct": round(busy, 1), "mem_used_mb": total - free,
                        "mem_total_mb": total, "net_rx_bytes": 0, "net_tx_bytes": 0, "gpus": []}
                with open(run_dir / "metrics.jsonl", "a") as out:
                    out.write(json.dumps(line) + "\n")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(5)


def _cpu_times() -> tuple:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]  # all, idle + iowait


def _memory_mb() -> tuple:
    info = {line.split(":")[0]: int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()}
    return info["MemTotal"] // 1024, info["MemAvailable"] // 1024


@pytest.fixture(scope="module")
def failed_run(sandbox, cluster, tmp_path_factory):
    """(cli, run document, the documents the receiver got, the collected bundle)."""
    cli, where = cluster
    with Receiver() as receiver, StandInSampler(sandbox.shared_outputs):
        inventory = _failing_job(sandbox, where / "notify.yaml", receiver.url)
        code, doc = cli.json("run", "-i", str(inventory), str(where / "prompt.txt"))
        got = receiver.documents()  # the run's command waited for its deliveries before it returned
    assert code == 1, doc
    bundle = where / "bundle"
    code, collected = cli.json("collect-logs", "-i", str(inventory), "--run", doc["run_id"], "--dest", str(bundle))
    assert code in (0, 1), collected
    return cli, doc, got, bundle


def test_a_failing_run_sends_one_failure_with_its_diagnosis_and_one_end(failed_run):
    cli, doc, got, _ = failed_run
    assert sorted(d["event"] for d in got) == ["end", "failure"], got
    failure = next(d for d in got if d["event"] == "failure")
    first = doc["first_failure"]
    assert failure["run_id"] == doc["run_id"] and failure["state"] == "failed"
    assert (failure["diagnosis"]["host"], failure["diagnosis"]["rank"]) == (first["host"], first["rank"]) == ("node2", 1)
    assert failure["diagnosis"]["cause"] == first["diagnosis"][0]["cause"]
    assert failure["diagnosis"]["fix"], failure
    assert sorted(failure["hosts"]) == ["node1", "node2", "node3"] and failure["duration_s"] > 0
    log = (cli.state_dir / "runs" / doc["run_id"] / "notify.log").read_text()
    assert log.count("delivered (try 1)") == 2, log


def test_the_report_of_the_collected_run_opens_in_a_browser_showing_the_failure(failed_run, tmp_path):
    from browser import open_report

    cli, doc, _, bundle = failed_run
    out = bundle / "report.html"
    code, made = cli.json("report", str(bundle), "-o", str(out))
    assert code == 0, made
    seen = open_report(out, screenshot=os.environ.get("CLUSTERCTL_REPORT_SCREENSHOT"))
    assert seen.severe == [], seen.severe
    assert "own error of rank 1" in seen.text and "node2" in seen.text, seen.text[:3000]
    assert seen.svg_count >= 1 + 2 * len(made["metrics_of"])  # the timeline, utilisation and memory per node
    assert made["metrics_of"] and "node1: utilisation (%)" in seen.text, made
    assert any(link.endswith("node2/logs/node2-r1.log") for link in seen.links), seen.links
    if os.environ.get("CLUSTERCTL_KEEP_BUNDLE"):  # to refresh tests/fixtures/report/ from a real run
        shutil.copytree(bundle, os.environ["CLUSTERCTL_KEEP_BUNDLE"], dirs_exist_ok=True)


HEALING_STEPS = 12


def _healing_job(sb, path: Path, url: str) -> Path:
    """tests/fixtures/jobs/checkpointed.py on 2 nodes (node3 the spare), rank 1 killed at step 4 of 12."""
    where = f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/healing"

    def change(doc):
        doc["job"].pop("world_size_divides", None)
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/checkpointed.py"], nproc_per_node=1, nodes=2,
                          restarts=2, checkpoint={"dir": f"{where}/ckpt", "complete": "COMPLETE"},
                          args=["--steps", str(HEALING_STEPS), "--ckpt", f"{where}/ckpt", "--out", f"{where}/out",
                                "--kill_at", "4", "--kill_rank", "1"])
        doc["health"] = steady_health()
        doc["notify"] = {"webhook": url, "format": "slack", "on": ["relaunch", "failure", "end"]}

    return variant(sb, path, change)


def test_a_run_that_heals_itself_sends_one_relaunch_with_the_killed_ranks_diagnosis_then_its_end(
        sandbox, cluster, tmp_path):
    """Also test_cluster_heal.py's rank killed on one node (merged here: one healing run serves both): that
    node's fault, the spare takes its place, the result is exact, collect-logs brings both attempts."""
    cli, where = cluster
    with Receiver() as receiver, StandInSampler(sandbox.shared_outputs):
        inventory = _healing_job(sandbox, tmp_path / "heal.yaml", receiver.url)
        code, doc = cli.json("run", "-i", str(inventory), str(where / "prompt.txt"))
        got = receiver.documents()
    assert code == 0 and len(doc["attempts"]) == 2, doc
    first = doc["attempts"][0]
    assert first["excluded"] == [{"host": "node2", "cause": "killed_by_signal"}], first["first_failure"]
    assert doc["attempts"][1]["hosts"] == ["node1", "node3"]
    done = json.loads((sandbox.shared_outputs / JOBS_DIR / "healing" / "out" / "done.json").read_text())
    assert done["total"] == sum(range(1, HEALING_STEPS + 1)), done
    assert [d["text"].split(":")[0] for d in got] == [f"run {doc['run_id']} attempt 1 failed", f"run {doc['run_id']} on "
                                                      f"sandbox ended"], got
    relaunch = json.dumps(got[0]["blocks"])
    assert "*cause* killed_by_signal on node2, rank 1" in relaunch and "relaunching" in got[0]["text"], relaunch
    assert "succeeded" in got[1]["text"]
    bundle = tmp_path / "bundle"
    code, collected = cli.json("collect-logs", "-i", str(inventory), "--run", doc["run_id"], "--dest", str(bundle))
    files = [str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file()]
    assert any(f"{doc['run_id']}/node1.attempt-1/" in f for f in files), (collected, files[:40])
    assert any(f"{doc['run_id']}/node1/" in f for f in files), files[:40]
    code, made = cli.json("report", str(bundle))
    assert code == 0, made
    text = (bundle / "report.html").read_text()
    assert "attempt 1" in text and "attempt 2" in text and "killed_by_signal" in text
    if os.environ.get("CLUSTERCTL_KEEP_BUNDLE"):
        shutil.copytree(bundle, os.environ["CLUSTERCTL_KEEP_BUNDLE"] + "-healed", dirs_exist_ok=True)


def test_a_detached_runs_failure_and_end_are_sent_once_by_the_status_that_learns_of_its_end(sandbox, cluster, tmp_path):
    """3 nodes x 2 ranks, global rank 3 (node2's second) failing with its own error: also test_cluster_culprit.py's
    detached run (merged here: one detached run serves both), whose status names the same host and global rank."""
    cli, where = cluster
    with Receiver() as receiver:
        inventory = _failing_job(sandbox, tmp_path / "detached.yaml", receiver.url, rank=3, after=4, nproc=2)
        code, doc = cli.json("run", "-i", str(inventory), "--detach", str(where / "prompt.txt"))
        assert code == 0, doc
        assert receiver.documents() == []  # nothing ended yet, and the nodes never call out

        def ended():
            code, status = cli.json("status", "-i", str(inventory))
            run = next((r for r in status.get("runs", []) if r["run_id"] == doc["run_id"]), {})
            return run if run.get("state") in ("failed", "succeeded", "stopped") else None

        run = wait_until(ended, 90, interval=1, what="the detached run's end")
        cli.json("status", "-i", str(inventory))  # asked again: already told
        got = receiver.documents()
    assert run["state"] == "failed" and (run["first_failure"]["host"], run["first_failure"]["rank"]) == ("node2", 3), run
    assert sorted(d["event"] for d in got) == ["end", "failure"], got
    failure = next(d for d in got if d["event"] == "failure")
    assert (failure["diagnosis"]["host"], failure["diagnosis"]["rank"]) == ("node2", 3), failure
