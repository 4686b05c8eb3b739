"""`clusterctl health` on a recorded fleet: the JSON shape, a host's history, release, and the
Prometheus export (parsed back by prometheus_client's own parser)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from clusterctl.cli import main
from clusterctl.health.events import Event, GpuId
from clusterctl.health.record import HealthRecord


def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text("name: fleet\nhosts:\n  - {name: n1, address: 10.0.0.1}\n  - {name: n2, address: 10.0.0.2}\n"
                    "  - {name: n3, address: 10.0.0.3}\n")
    return path


def health(tmp_path: Path, capsys, *args: str):
    state = tmp_path / "state"
    code = main(["health", "-i", str(inventory(tmp_path)), *args], env={**os.environ, "CLUSTERCTL_STATE": str(state)})
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if "--json" in args else captured.out + captured.err


def recorded(tmp_path: Path) -> None:
    with HealthRecord.open(tmp_path / "state" / "health.db", "fleet") as record:
        record.observe_gpus("n1", [GpuId(0, uuid="GPU-a"), GpuId(1, uuid="GPU-b")])
        record.record(Event("n1", "xid_fatal", "watch", evidence="NVRM: Xid (PCI:0000:3b:00): 79", cause="Xid 79",
                            gpu=GpuId(1, uuid="GPU-b")))
        record.record(Event("n2", "straggler", "straggler", evidence="step time 1.4x the median", run_id="r1"))


def test_the_json_lists_every_node_with_state_since_reason_gpus_and_events(tmp_path, capsys):
    recorded(tmp_path)
    code, doc = health(tmp_path, capsys, "--json")
    assert code == 0 and doc["ok"] is True
    nodes = {node["host"]: node for node in doc["nodes"]}
    assert set(nodes) == {"n1", "n2", "n3"}
    assert all(set(node) == {"host", "state", "since", "reason", "gpus", "events"} for node in nodes.values())
    assert nodes["n1"]["state"] == "quarantined" and "xid_fatal on uuid:GPU-b" in nodes["n1"]["reason"]
    assert [(g["index"], g["state"]) for g in nodes["n1"]["gpus"]] == [(0, "healthy"), (1, "quarantined")]
    assert nodes["n2"]["state"] == "suspect" and nodes["n2"]["events"][0]["run_id"] == "r1"
    assert nodes["n3"] == {"host": "n3", "state": "healthy", "since": None, "reason": "", "gpus": [], "events": []}


def test_a_hosts_history_release_and_forced_release(tmp_path, capsys):
    recorded(tmp_path)
    code, doc = health(tmp_path, capsys, "n1", "--json")
    assert code == 0 and [e["kind"] for e in doc["nodes"][0]["events"]] == ["xid_fatal"]
    code, doc = health(tmp_path, capsys, "release", "n1", "--json")
    assert code == 2 and "no check has passed" in doc["error"] and "--force" in doc["fix"]
    code, doc = health(tmp_path, capsys, "release", "n1", "--force", "--json")
    assert code == 0 and doc["nodes"][0]["state"] == "healthy"
    assert doc["nodes"][0]["events"][-1]["kind"] == "released"


def test_the_table_names_each_state(tmp_path, capsys):
    recorded(tmp_path)
    code, shown = health(tmp_path, capsys)
    assert code == 0 and "quarantined" in shown and "suspect" in shown and "n3" in shown


def test_the_prometheus_export_parses_and_carries_node_and_gpu_states(tmp_path, capsys):
    recorded(tmp_path)
    code, text = health(tmp_path, capsys, "export", "--prometheus")
    assert code == 0
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    node = dict(cluster="fleet", host="n1")
    assert samples[("clusterctl_node_health_state", tuple(sorted({**node, "state": "quarantined"}.items())))] == 1
    assert samples[("clusterctl_node_health_state", tuple(sorted({**node, "state": "healthy"}.items())))] == 0
    gpu = {**node, "gpu": "uuid:GPU-b", "index": "1", "state": "quarantined"}
    assert samples[("clusterctl_gpu_health_state", tuple(sorted(gpu.items())))] == 1
    assert ("clusterctl_node_health_since_seconds", tuple(sorted(node.items()))) in samples


def test_bad_words_are_one_usage_error(tmp_path, capsys):
    code, doc = health(tmp_path, capsys, "release", "--json")
    assert code == 2 and "cannot read" in doc["error"]
    code, doc = health(tmp_path, capsys, "export", "--json")
    assert code == 2 and "--prometheus" in doc["fix"]
