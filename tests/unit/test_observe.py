"""Issue 41, the pure parts: the node sampler's parsers on real captured outputs (nvidia-smi's query
mode, /proc), its cap on the file, the run record's summary, `top`'s probe read back and its rows, and
the Prometheus exposition read back by prometheus_client's own parser."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from clusterctl_helpers import examples
from hypothesis import strategies as st

from clusterctl.backends.observing import Look
from clusterctl.node import node_metrics
from clusterctl.observe import summary, top
from clusterctl.observe.metrics_file import parse_sample, read_file
from clusterctl.observe.prometheus import prometheus_text
from clusterctl.plan.metrics_sampler import bundle_path

TOOLS = Path(__file__).resolve().parents[1] / "fixtures" / "tools"
PROBE_FIELDS = ("index", "uuid", "name", "memory.total", "memory.used", "driver_version", "pci.bus_id")


def test_the_probe_query_captured_on_a_real_h200_reads_as_two_gpus_with_their_memory():
    text = (TOOLS / "real-h200" / "nvidia_smi_query_gpu.csv").read_text()
    gpus = node_metrics.parse_gpus(text, PROBE_FIELDS)
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0]["uuid"] == "GPU-b906f697-d3eb-20c1-6ca1-851ef82884e3"
    assert gpus[1]["mem_total_mb"] == 143771.0 and gpus[1]["mem_used_mb"] == 0.0
    assert gpus[0]["util_pct"] is None and gpus[0]["throttle"] == []  # not asked for: unknown, never zero


def test_a_capture_with_a_header_and_units_leaves_out_the_header_line():
    text = (TOOLS / "nvidia_smi" / "query_gpu_h100x1_header_units.csv").read_text()
    gpus = node_metrics.parse_gpus(text, PROBE_FIELDS)
    assert [g["uuid"] for g in gpus] == ["GPU-b3816b77-9242-1d40-869b-614a64f092de"]
    assert gpus[0]["mem_total_mb"] is None  # "81559 MiB": units were not asked away, so no number is made up


def test_the_sampler_shipped_alone_writes_the_file_the_run_layout_names():
    from clusterctl.node import layout

    assert node_metrics.FILE == layout.METRICS


def test_the_sampler_query_reads_every_contract_field_and_the_throttle_bits():
    line = "3, GPU-8731a51e-f4a8-1ed8-dbb3-ea2c72f10b5f, 97, 70321, 143771, 651.23, 61, 1980, 0x0000000000000024, 0"
    gpu = node_metrics.parse_gpus(line)[0]
    assert gpu == {"index": 3, "uuid": "GPU-8731a51e-f4a8-1ed8-dbb3-ea2c72f10b5f", "util_pct": 97.0,
                   "mem_used_mb": 70321.0, "mem_total_mb": 143771.0, "power_w": 651.23, "temp_c": 61.0,
                   "sm_clock_mhz": 1980.0, "throttle": ["sw_power_cap", "sw_thermal_slowdown"],
                   "ecc_volatile_uncorrected": 0}


def test_fields_a_gpu_does_not_support_are_none():
    gpu = node_metrics.parse_gpus("0, GPU-1, [N/A], 10, 100, [Not Supported], 40, 1410, [N/A], [N/A]")[0]
    assert gpu["util_pct"] is None and gpu["power_w"] is None and gpu["ecc_volatile_uncorrected"] is None
    assert gpu["throttle"] == [] and gpu["temp_c"] == 40.0


cell = st.text(alphabet=st.characters(blacklist_characters=",\n\r"), max_size=12)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.lists(cell, min_size=0, max_size=12).map(", ".join), max_size=6).map("\n".join))
def test_the_nvidia_smi_parser_never_fails_and_keeps_only_the_contract_types(text):
    for gpu in node_metrics.parse_gpus(text):
        assert set(gpu) == set(node_metrics.KEYS.values())
        assert isinstance(gpu["index"], int)
        assert all(v is None or isinstance(v, float) for k, v in gpu.items()
                   if k not in ("index", "uuid", "throttle", "ecc_volatile_uncorrected"))
        assert all(r in dict(map(reversed, node_metrics.THROTTLE_BITS)) for r in gpu["throttle"])
        json.dumps(gpu, allow_nan=False)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 64), st.floats(0, 100), st.integers(0, 200000), st.integers(0, 0x1FF)),
                min_size=1, max_size=8))
def test_rows_nvidia_smi_would_print_read_back_as_written(rows):
    text = "\n".join(f"{i}, GPU-x{i}, {u:.0f}, {m}, 200000, 300.5, 50, 1755, {hex(t)}, 0" for i, u, m, t in rows)
    gpus = node_metrics.parse_gpus(text)
    assert [(g["index"], g["util_pct"], g["mem_used_mb"]) for g in gpus] == [(i, float(f"{u:.0f}"), float(m))
                                                                             for i, u, m, _ in rows]
    assert [len(g["throttle"]) for g in gpus] == [bin(t).count("1") for *_, t in rows]


def test_proc_files_captured_on_machines_read_as_cpu_memory_and_the_chosen_interfaces():
    busy, total = node_metrics.cpu_times((TOOLS / "host" / "proc_stat_dev_vm.txt").read_text())
    assert (busy, total) == (919669 + 6244 + 246492 + 4241 + 912, 919669 + 6244 + 246492 + 1187867 + 3867 + 4241 + 912)
    used, mem_total = node_metrics.memory_mb((TOOLS / "host" / "meminfo_h100_vm.txt").read_text())
    assert mem_total == 131981020 // 1024 and 0 < used < mem_total
    net = (TOOLS / "host" / "proc_net_dev_dev_vm.txt").read_text()
    assert node_metrics.net_bytes(net) == (408344984, 2513414)  # every interface but lo
    assert node_metrics.net_bytes(net, "eth") == (408344984, 2513414)
    assert node_metrics.net_bytes(net, "^eth") == (0, 0)  # lo and the ifb ones (all zero): NCCL's exclusion
    assert node_metrics.net_bytes(net, "=lo") == (7213602512, 7213602512)


def test_the_metrics_file_stays_under_its_cap_and_still_covers_the_whole_run(tmp_path):
    run_dir = tmp_path / "node1"
    run_dir.mkdir()
    sampler = node_metrics.Sampler(str(run_dir), max_bytes=4096)
    for t in range(400):
        sampler.write({"t": float(t), "host": "node1", "cpu_pct": 1.0, "gpus": []})
        assert sampler.size == (run_dir / "metrics.jsonl").stat().st_size <= 4096
    samples, skipped = read_file(run_dir / "metrics.jsonl", "node1")
    assert samples[0].t == 0.0 and samples[-1].t > 350 and sampler.stride > 1 and skipped == 0


def _sample(t, cpu, gpus):
    """A line as the sampler writes it, read back."""
    return parse_sample(json.dumps(_line(t, cpu, gpus)), "n1")


def _line(t, cpu, gpus):
    return {"t": t, "host": "n1", "cpu_pct": cpu, "mem_used_mb": 1000, "mem_total_mb": 4000, "net_rx_bytes": 10,
            "net_tx_bytes": 20, "gpus": gpus}


def _gpu(index, util, power, throttle=(), ecc=0):
    return {"index": index, "uuid": f"GPU-{index}", "util_pct": util, "mem_used_mb": 100.0, "mem_total_mb": 80000.0,
            "power_w": power, "temp_c": 50.0, "sm_clock_mhz": 1980.0, "throttle": list(throttle),
            "ecc_volatile_uncorrected": ecc}


def test_the_summary_gives_mean_and_max_per_node_and_leaves_unknown_values_out():
    samples = [_sample(0.0, 10.0, [_gpu(0, 100.0, 700.0), _gpu(1, 50.0, None)]),
               _sample(5.0, 30.0, [_gpu(0, 0.0, 100.0, ["sw_power_cap"]), _gpu(1, 50.0, 300.0, ecc=2)])]
    found = summary.summarise(samples)
    assert found["samples"] == 2 and found["span_s"] == 5.0 and found["gpu_count"] == 2
    assert found["cpu_pct"] == {"mean": 20.0, "max": 30.0}
    assert found["gpu_util_pct"] == {"mean": 50.0, "max": 100.0}
    assert found["gpu_power_w"] == {"mean": 366.67, "max": 700.0}  # the GPU that said [N/A] is not a 0
    assert found["gpu_ecc_volatile_uncorrected_max"] == 2 and found["gpu_throttle_seen"] == ["sw_power_cap"]
    assert summary.summarise([]) == {"samples": 0}
    assert summary.summarise([_sample(0.0, 5.0, [])])["gpu_util_pct"] is None  # a CPU node


def test_collect_logs_summary_reads_the_file_where_the_bundle_keeps_it_and_skips_a_cut_line(tmp_path):
    path = bundle_path(tmp_path, "RUN", "n1")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_line(0.0, 10.0, [])) + "\n" + '{"t": 5.0, "cpu_p')
    assert summary.summarise_bundle(tmp_path, "RUN", ["n1", "n2"]) == {"n1": summary.summarise([_sample(0.0, 10.0, [])])}


PROBE = "\n".join([
    "clusterctl-top-sample",
    json.dumps(_line(100.0, 12.5, [_gpu(0, 99.0, 650.0, ["sw_power_cap"]), _gpu(1, 3.0, 90.0)])),
    "",
    "clusterctl-top-rank 0 stdout step 41 loss 2.31",
    "clusterctl-top-rank 1 stderr 10%|#   | 1/10\r 20%|##  | 2/10",
    "clusterctl-top-rank x stdout not a rank",
])


def test_the_top_probe_reads_back_the_sample_and_each_ranks_latest_line():
    view = top.parse_probe("n1", PROBE, first_rank=8, mask=lambda t: t.replace("2.31", "***"))
    assert view.sample["cpu_pct"] == 12.5 and view.exit_code is None and view.error is None
    assert view.lines == {0: ("stdout", "step 41 loss ***"), 1: ("stderr", " 20%|##  | 2/10")}
    rows = top.rows([view], now=103.0)
    assert rows[0][0] == "n1" and "running" in rows[0][-1] and "3s old" in rows[0][-1]
    assert rows[1][:4] == ("", "0", "8", "99") and rows[1][-2:] == ("sw_power_cap", "step 41 loss ***")
    assert rows[2][2] == "9" and len(rows) == 3
    ended = top.parse_probe("n1", "clusterctl-top-sample\n\nclusterctl-top-exit 1\n")
    assert ended.exit_code == 1 and ended.sample is None and "no sample yet" in top.rows([ended])[0][-1]
    assert top.parse_probe("n2", "clusterctl-top: no run directory\n").error == "no run directory"


def test_the_prometheus_exposition_parses_with_prometheus_clients_parser_and_has_no_secret():
    from prometheus_client.parser import text_string_to_metric_families

    view = top.parse_probe("n1", PROBE)
    record = {"state": "running", "detached": True, "attempt": 2, "stragglers": [{"rank": 3}],
              "commands": {"n1": {"env": {"HF_TOKEN": "hf_secretvalue"}}}}
    text = prometheus_text(Look("20261127-080000-abcdef", record, "c1", (view,), "running"), {"n1": "suspect"})
    families = {f.name: f for f in text_string_to_metric_families(text)}
    value = lambda name, **labels: [s.value for s in families[name].samples  # noqa: E731
                                    if all(s.labels.get(k) == v for k, v in labels.items())]
    assert value("clusterctl_gpu_utilization_percent", host="n1", gpu="0", uuid="GPU-0") == [99.0]
    assert value("clusterctl_gpu_throttle", gpu="0", reason="sw_power_cap") == [1.0]
    assert value("clusterctl_node_cpu_percent", host="n1") == [12.5]
    assert value("clusterctl_run_state", state="running") == [1.0] and value("clusterctl_run_state", state="failed") == [0.0]
    assert value("clusterctl_run_attempt") == [2.0] and value("clusterctl_run_stragglers") == [1.0]
    assert value("clusterctl_node_health_state", host="n1", state="suspect") == [1.0]
    assert value("clusterctl_node_up", host="n1") == [1.0]
    assert "hf_secretvalue" not in text and "HF_TOKEN" not in text


def test_the_sampler_counts_the_interfaces_the_job_gives_nccl_and_its_period_comes_from_the_inventory():
    from clusterctl.models import EnvVar, Host, Inventory, JobSpec
    from clusterctl.plan.metrics_sampler import sampler_args

    job = JobSpec(command=("job",), python="/opt/py/bin/python", metrics_every=2.5,
                  env=(EnvVar("NCCL_SOCKET_IFNAME", "^docker,lo"),))
    assert sampler_args(Inventory(name="t", hosts=(Host("n1", "10.0.0.1"),), job=job)) == ("/opt/py/bin/python", "2.5",
                                                                                            "^docker,lo")
    assert sampler_args(Inventory(name="t", hosts=(Host("n1", "10.0.0.1"),), job=JobSpec(command=("job",)))) == (
        "python3", "5", "")


@pytest.mark.parametrize("value, expected", [("0", 0.0), ("2.5", 2.5)])
def test_job_metrics_every_is_seconds_and_0_turns_the_sampler_off(value, expected):
    from clusterctl.inventory.load import dump_inventory, parse_inventory

    inventory = parse_inventory(f"name: x\nhosts: [{{name: a, address: 10.0.0.1}}]\njob:\n  metrics_every: {value}\n", "i.yaml")
    assert inventory.job.metrics_every == expected
    assert f"metrics_every: {value}" in dump_inventory(inventory)
    assert parse_inventory("name: x\nhosts: [{name: a, address: 10.0.0.1}]\n", "i.yaml").job.metrics_every == 5.0


def test_a_negative_metrics_every_is_refused_with_its_line():
    from clusterctl.errors import InventoryError
    from clusterctl.inventory.load import parse_inventory

    with pytest.raises(InventoryError) as refused:
        parse_inventory("name: x\nhosts: [{name: a, address: 10.0.0.1}]\njob:\n  metrics_every: -1\n", "i.yaml")
    assert "i.yaml:4" in str(refused.value.where) or "i.yaml:4" in str(refused.value)


def test_a_sample_the_sampler_wrote_on_a_real_h100_node_under_load_reads_everywhere_with_its_throttles():
    from prometheus_client.parser import text_string_to_metric_families

    path = TOOLS / "metrics" / "sampler_h100x4_load.jsonl"
    samples, skipped = read_file(path, "node")
    assert skipped == 1  # its `# source:` line
    found = summary.summarise(samples)
    assert found["gpu_count"] == 4 and found["gpu_power_w"]["max"] == 696.34 and found["gpu_temp_c"]["max"] == 79.0
    assert found["gpu_throttle_seen"] == ["sw_power_cap", "sw_thermal_slowdown"]
    first = next(json.loads(line) for line in path.read_text().splitlines() if line.startswith("{"))
    view = top.NodeView("node", first)  # top shows a node's newest line as the node sent it
    assert [row[8] for row in top.rows([view])[1:]] == ["sw_power_cap", "sw_power_cap", "sw_thermal_slowdown", "sw_power_cap"]
    text = prometheus_text(Look("20261127-080000-abcdef", {}, "c1", (view,), "running"), {})
    throttles = [s for f in text_string_to_metric_families(text) if f.name == "clusterctl_gpu_throttle" for s in f.samples]
    assert {(s.labels["gpu"], s.labels["reason"]) for s in throttles} == {("0", "sw_power_cap"), ("1", "sw_power_cap"),
                                                                        ("2", "sw_thermal_slowdown"), ("3", "sw_power_cap")}


def test_the_summary_reads_at_most_the_reports_bound_of_lines_from_a_nodes_file(tmp_path, monkeypatch):
    from clusterctl.observe import metrics_file

    path = bundle_path(tmp_path, "RUN", "n1")
    path.parent.mkdir(parents=True)
    path.write_text("".join(f'{{"t": {i}, "host": "n1", "cpu_pct": 1.0}}\n' for i in range(50)) + "not json\n")
    monkeypatch.setattr(metrics_file, "MAX_LINES", 20)
    assert summary.summarise_bundle(tmp_path, "RUN", ["n1"])["n1"]["samples"] == 20
    assert read_file(tmp_path / "absent.jsonl", "n1") == ([], 0)
