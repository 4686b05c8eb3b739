"""First-run truths (issue 16, part 3): the shipped one-machine inventory runs on any machine,
and nccl-test with one rank reports no bandwidth it did not measure."""
from __future__ import annotations

from pathlib import Path

import pytest

from clusterctl.inventory.load import load_inventory
from clusterctl.plan.topology import NodeFacts, plan
from clusterctl.nccltest import plan as nccl

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("gpus, ranks", [(0, 2), (1, 1), (2, 2), (3, 2), (8, 8)])
def test_the_shipped_local_inventory_plans_a_rank_per_gpu_or_two_cpu_ranks(gpus, ranks):
    inventory = load_inventory(REPO / "inventory" / "local.yaml")
    facts = NodeFacts(gpu_ids=tuple(range(gpus)) or None)
    topology = plan(inventory, {"local": facts})
    assert (topology.nproc_per_node, topology.world_size) == (ranks, ranks)
    assert topology.uses_gpus == bool(gpus)
    assert 8 % topology.world_size == 0  # world_size_divides: 8 (the tiny model's heads)


def _one_rank_report():
    link = nccl.link_class("nccl", 1, 1, 1, "NVIDIA H100 80GB HBM3", True)
    # the shape allreduce_bench.py prints on one rank: algbw = size / time of a copy in GPU memory
    record = {"stage": "full", "size": 1 << 30, "iters": 20, "time_us": 40.0, "algbw_gbps": 26843.5,
              "busbw_gbps": 0.0, "correct": True, "world_size": 1}
    return nccl.summarize([{"stage": "plan", "sizes": [1 << 30], "world_size": 1}, {"stage": "connect", "ok": True},
                           record], link)


def test_one_rank_reports_no_bandwidth_only_whether_the_sums_are_right():
    report = _one_rank_report()
    (row,) = report["sizes"]
    assert (row["algbw_gbps"], row["busbw_gbps"], row["correct"], row["verdict"]) == (None, None, True, "-")
    assert report["largest"]["busbw_gbps"] is None and report["correct"] is True
    assert nccl.report_ok(report, 0)


def test_the_one_rank_table_shows_dashes_for_bandwidth_and_says_why():
    lines = nccl.table_lines(_one_rank_report())
    assert lines[1].split() == ["1", "GiB", "40.0", "us", "-", "-", "yes", "-"]  # size, time, algbw, busbw, ...
    assert "single-rank" in lines[-1] and "no bandwidth is reported" in lines[-1]


def test_two_ranks_still_report_their_bandwidth():
    link = nccl.link_class("gloo", 2, 1, 2)
    record = {"stage": "small", "size": 1024, "time_us": 50.0, "algbw_gbps": 0.02, "busbw_gbps": 0.02, "correct": True}
    (row,) = nccl.summarize([{"stage": "connect", "ok": True}, record], link)["sizes"]
    assert (row["algbw_gbps"], row["busbw_gbps"]) == (0.02, 0.02)
