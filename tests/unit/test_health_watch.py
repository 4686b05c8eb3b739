"""The passive watch's parsers on real captured outputs (tests/fixtures/health/SOURCES.md), and
on any text at all: never an exception, unreadable text is a value."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings, strategies as st
from clusterctl_helpers import examples

from clusterctl.health.events import GpuId
from clusterctl.health.watch import (GpuSample, dcgm_events, normalize_bus_id, parse_dcgm_health, parse_smi_csv,
                                     parse_xid_lines, sample_events, xid_events)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "health"
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=400)
LINES = st.lists(st.sampled_from(["NVRM: Xid (PCI:0000:3b:00): ", "79", ", pid=", "'<unknown>'", "|", ",", " ",
                                  "GPU ID: 0", "Overall Health", "Warning", "Failure", "[N/A]", "0x40", "\n",
                                  "index, uuid", "fallen off the bus", "NVRM: The NVIDIA GPU 0000:b3:00.0"]),
                 max_size=40).map("".join)


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_a_real_h100_query_parses_with_the_580_drivers_renamed_throttle_column():
    reading = parse_smi_csv(read("smi_h100_580.csv"))
    assert reading.unreadable is None and len(reading.gpus) == 1
    gpu = reading.gpus[0]
    assert gpu.gpu == GpuId(0, "GPU-5265385e-0415-61d5-ef87-fb14ec87c22e", "1752924016518")
    assert gpu.bus_id == "0000:00:06" and gpu.ecc_volatile == 0 and gpu.ecc_aggregate == 0
    assert gpu.retired_pending is None and gpu.remap_pending is False and gpu.remap_failure is False
    assert gpu.throttle == 1 and gpu.temperature == 35.0  # 0x1: GPU idle, not a slowdown
    assert sample_events("n1", reading.gpus) == []  # a healthy GPU says nothing


def test_what_got_worse_since_the_last_sample_is_said_once():
    healthy = parse_smi_csv(read("smi_h100_580.csv")).gpus[0]
    worse = GpuSample(healthy.gpu, healthy.bus_id, ecc_volatile=2, ecc_aggregate=2, remap_pending=True,
                      remap_failure=True, throttle=0x41, temperature=91.0)
    kinds = [e.kind for e in sample_events("n1", [worse], [healthy])]
    assert kinds == ["ecc_uncorrectable", "row_remap_failure", "row_remap_pending", "thermal"]
    assert sample_events("n1", [worse], [worse]) == []
    assert all(e.gpu == healthy.gpu and e.source == "watch" for e in sample_events("n1", [worse], [healthy]))


def test_a_healthy_h100s_kernel_log_has_no_xid():
    assert parse_xid_lines(read("dmesg_h100_580_no_xid.log")) == []


def test_application_xids_are_not_the_nodes_fault_but_a_ctx_switch_timeout_is_suspect():
    xids = parse_xid_lines(read("xid_gpud_pr46.log"))
    assert [x.xid for x in xids] == [13, 13, 13, 109]
    assert xids[3].bus_id == "0000:cb:00" and xids[3].pid == "1797828" and xids[0].pid == "<unknown>"
    events = xid_events("n1", xids)
    assert [(e.kind, e.cause) for e in events] == [("xid", "Xid 109")]


def test_nvlink_and_contained_ecc_xids_land_on_the_gpu_at_their_bus():
    xids = parse_xid_lines(read("xid_gpud_pr1174.log"))
    assert [(x.xid, x.bus_id) for x in xids] == [(149, "0019:01:00"), (145, "0018:01:00"), (94, "0000:9b:00")]
    gpu = GpuId(5, uuid="GPU-x")
    events = xid_events("n1", xids, [GpuSample(gpu, normalize_bus_id("00000000:9B:00.0"))])
    assert [e.kind for e in events] == ["xid", "xid", "xid_fatal"]
    assert events[2].gpu == gpu and events[0].gpu is None


def test_a_gpu_fallen_off_the_bus_without_an_xid_counts_as_xid_79():
    xids = parse_xid_lines(read("fallen_off_nvsentinel_155.log"))
    assert [(x.xid, x.bus_id) for x in xids] == [(79, "0000:b3:00"), (79, "0000:44:00")]
    assert {e.kind for e in xid_events("n1", xids)} == {"xid_fatal"}


def test_dcgm_healthy_json_says_nothing():
    health = parse_dcgm_health(read("dcgm_health_healthy.json"))
    assert health.overall == "Healthy" and health.gpus == () and health.unreadable is None
    assert dcgm_events("n1", health) == []


def test_unreadable_outputs_are_values():
    assert parse_smi_csv("").unreadable
    assert parse_smi_csv("index, uuid\n0, a, b\n").unreadable
    assert parse_dcgm_health("dcgmi: command not found").unreadable
    assert parse_dcgm_health("{not json").unreadable


@settings(max_examples=examples(300), deadline=None)
@given(st.one_of(TEXT, LINES))
def test_no_text_makes_a_parser_raise(text):
    reading = parse_smi_csv(text)
    assert reading.unreadable is not None or all(isinstance(g, GpuSample) for g in reading.gpus)
    sample_events("n", reading.gpus, reading.gpus[:1])
    xids = parse_xid_lines(text)
    assert all(isinstance(x.xid, int) for x in xids)
    xid_events("n", xids, reading.gpus)
    health = parse_dcgm_health(text)
    assert health.unreadable is not None or health.overall in ("Healthy", "Warning", "Failure")
    dcgm_events("n", health, reading.gpus)
    normalize_bus_id(text)


@settings(max_examples=examples(100), deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | TEXT,
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=12))
def test_any_json_document_from_dcgmi_is_parsed_or_called_unreadable(document):
    import json

    health = parse_dcgm_health(json.dumps({"body": document}))
    assert health.unreadable is not None or health.overall is not None
