"""Issue 41 on the rehearsal cluster: a run's nodes are sampled while it runs (CPU, memory and
network there; GPU numbers on node3 from the captured 4x H100 query, served by the h100x4_metrics
stand-in, tests/fixtures/hardware/), `top --once` shows every node and GPU with the ranks' last lines,
`metrics --prometheus` parses with prometheus_client's own parser, and collect-logs brings every node's
metrics.jsonl back with the run record's per-node summary. The ranks run on the hosts (no container):
the stand-ins are on the SSH sessions' PATH, which the container would not see; node1 and node3 (root),
as node2's sudo user may not run this machine's venv python that the job runs with there."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from clusterctl.plan.metrics_sampler import bundle_path
from clusterctl.observe.metrics_file import read_file
from clusterctl_helpers import REPO, Cli, variant, wait_until

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]
POWER = [686.02, 670.39, 695.29, 683.13]  # tests/fixtures/tools/nvidia_smi/metrics_query_h100x4_load.csv


@pytest.fixture(scope="module")
def cli(hardware_sandbox, tmp_path_factory):
    return Cli(tmp_path_factory.mktemp("metrics-state"))


def _on_hosts(sb, path):
    def change(doc):
        doc.pop("container", None)
        # node2 is reached as a sudo user, who may not run this machine's venv python (the job's, on the hosts)
        doc["hosts"] = [h for h in doc["hosts"] if h["name"] != "node2"]
        doc["job"].update(workdir=str(REPO), outputs=str(sb.shared_outputs), metrics_every=1, python=sys.executable)
        doc["job"]["args"] = doc["job"]["args"] + ["--stall_rank", "0", "--stall_s", "60"]

    return variant(sb, path, change)


def _cli_text(cli, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clusterctl", *args], env={**cli.env, "COLUMNS": "250"},
                          capture_output=True, text=True, timeout=120)  # wide: rich folds cells at 80 columns


def test_a_runs_nodes_are_sampled_shown_by_top_scraped_and_collected(hardware_sandbox, cli, tmp_path):
    sb = hardware_sandbox
    gpu_node = sb.node_of["h100x4_metrics"]
    inventory = _on_hosts(sb, tmp_path / "hosts.yaml")
    (tmp_path / "prompt.txt").write_text("a cat\n")
    logs = sb.shared_outputs / "logs"
    before = set(p.name for p in logs.iterdir()) if logs.is_dir() else set()
    proc = cli.popen("run", "-i", str(inventory), str(tmp_path / "prompt.txt"))
    try:
        run_id = wait_until(lambda: next(iter(set(p.name for p in logs.iterdir()) - before), None) if logs.is_dir() else None,
                            90, interval=0.5, what="the run's directory")

        last: list = []

        def every_node_sampled():
            code, seen = cli.json("top", run_id, "--once")
            last[:] = [seen]
            nodes = {n["host"]: n for n in seen.get("nodes", [])}
            ready = len(nodes) == 2 and all(n["sample"] and n["sample"].get("gpus") is not None for n in nodes.values())
            return nodes if ready and nodes[gpu_node]["sample"]["gpus"] and any(n["ranks"] for n in nodes.values()) else None

        try:
            nodes = wait_until(every_node_sampled, 90, interval=1, what="a sample from every node")
        except AssertionError:
            files = {p.name: sorted(c.name for c in p.iterdir()) for p in (logs / run_id).iterdir() if p.is_dir()}
            logs_text = {p.parent.name: p.read_text()[-500:] for p in (logs / run_id).glob("*/metrics.log")}
            raise AssertionError(f"{json.dumps(last)[-3000:]}\n{files}\n{logs_text}") from None
        assert last[0]["state"] == "running"  # the attached run holds the cluster's run lock
        for host, node in nodes.items():
            sample = node["sample"]
            assert sample["host"] == host and sample["mem_total_mb"] > 0 and 0 <= sample["cpu_pct"] <= 100
            assert sample["net_rx_bytes"] >= 0 and node["exit_code"] is None
            assert [g["power_w"] for g in sample["gpus"]] == (POWER if host == gpu_node else [])

        frame = _cli_text(cli, "top", run_id, "--once")
        assert frame.returncode == 0, frame.stderr
        assert all(host in frame.stderr for host in nodes) and "695" in frame.stderr and "stalling" in frame.stderr

        scrape = _cli_text(cli, "metrics", run_id, "--prometheus")
        assert scrape.returncode == 0, scrape.stderr
        from prometheus_client.parser import text_string_to_metric_families

        families = {f.name: f for f in text_string_to_metric_families(scrape.stdout)}
        power = {s.labels["gpu"]: s.value for s in families["clusterctl_gpu_power_watts"].samples}
        assert power == {"0": POWER[0], "1": POWER[1], "2": POWER[2], "3": POWER[3]}
        assert {s.labels["host"] for s in families["clusterctl_node_cpu_percent"].samples} == set(nodes)
        running = [s for s in families["clusterctl_run_state"].samples if s.labels["state"] == "running"]
        assert running[0].value == 1.0 and running[0].labels["run_id"] == run_id
        code, stopped = cli.json("stop", run_id)
        assert code == 0, stopped
        Cli.finish(proc, timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    dest = tmp_path / "bundle"
    code, collected = cli.json("collect-logs", "--run", run_id, "--dest", str(dest))
    assert collected["ok"], collected
    record = json.loads((dest / "run.json").read_text())
    for host in nodes:
        samples, _ = read_file(bundle_path(dest, run_id, host), "?")
        assert samples and all(s.host == host for s in samples)
        assert record["metrics"][host]["samples"] == len(samples)
    assert record["metrics"][gpu_node]["gpu_power_w"]["max"] == 695.29
    assert record["metrics"][gpu_node]["gpu_count"] == 4
    assert all(record["metrics"][h]["gpu_count"] == 0 for h in nodes if h != gpu_node)


def test_a_detached_run_in_containers_is_sampled_on_every_node_and_top_shows_it(hardware_sandbox, cli, tmp_path):
    sb = hardware_sandbox
    code, doc = cli.json("up", str(sb.inventory_path))
    assert code == 0, json.dumps(doc)[-2000:]
    inventory = variant(sb, tmp_path / "containers.yaml", lambda doc: (
        doc["job"].update(metrics_every=1), doc["job"].update(args=doc["job"]["args"] + ["--stall_rank", "0", "--stall_s", "60"])))
    (tmp_path / "prompt.txt").write_text("a cat\n")
    try:
        code, doc = cli.json("run", "-i", str(inventory), "--detach", str(tmp_path / "prompt.txt"))
        assert code == 0, json.dumps(doc)[-3000:]
        run_id = doc["run_id"]

        def every_node_sampled():
            code, seen = cli.json("top", run_id, "--once")
            nodes = seen.get("nodes", [])
            return seen if len(nodes) == 3 and all(n["sample"] for n in nodes) else None

        seen = wait_until(every_node_sampled, 90, interval=1, what="a sample from every node of the detached run")
        assert seen["state"] == "running"
        assert all(n["sample"]["gpus"] == [] and n["sample"]["mem_total_mb"] > 0 for n in seen["nodes"])
        code, stopped = cli.json("stop", run_id)
        assert code == 0, stopped
        samples = {h: read_file(sb.shared_outputs / "logs" / run_id / h / "metrics.jsonl", h)[0] for h in ("node1", "node2", "node3")}
        assert all(samples.values()), samples
    finally:
        cli.json("down", "-i", str(sb.inventory_path))
