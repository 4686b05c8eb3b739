"""`clusterctl nccl-test`: the pure report (sizes, busbw, verdicts, pairs), the runner's
shipped files, the rank-side benchmark's helpers, and the command for real on CPU ranks."""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from clusterctl.nccltest import plan as nt
from clusterctl.models import ContainerSpec, Host, Inventory, JobSpec, RendezvousSpec

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "clusterctl" / "node" / "allreduce_bench.py"
REAL = ROOT / "tests" / "fixtures" / "tools" / "real-h200"
H200 = nt.LinkClass("nvlink-hopper", 325.0, "test")


# --------------------------------------------------------------------------- sizes and math


@pytest.mark.parametrize("text,size", [("8", 8), ("64K", 65536), ("1M", 1 << 20), ("1G", 1 << 30),
                                       ("1GiB", 1 << 30), ("256mb", 256 << 20), (" 4 ", 4)])
def test_sizes_are_read_in_binary_units(text, size):
    assert nt.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "1T", "-8", "1.5G", "2", "G"])
def test_a_size_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError):
        nt.parse_size(text)


def test_sizes_print_in_the_largest_exact_unit():
    assert [nt.human_size(s) for s in (8, 1024, 1536, 32768, 1 << 20, 3 << 30)] == [
        "8 B", "1 KiB", "1536 B", "32 KiB", "1 MiB", "3 GiB"]


def test_busbw_is_algbw_times_2_n_minus_1_over_n_as_nccl_tests_define_it():
    algbw = nt.algbw_gbps(1 << 30, 0.0033)
    assert algbw == pytest.approx(325.37, abs=0.01)
    assert nt.busbw_gbps(algbw, 2) == pytest.approx(algbw)
    assert nt.busbw_gbps(100.0, 8) == pytest.approx(175.0)
    assert nt.busbw_gbps(100.0, 1) == 0.0


def test_the_sweep_doubles_from_8_bytes_to_1_gib():
    sizes = nt.sweep(8, 1 << 30)
    assert sizes[0] == 8 and sizes[-1] == 1 << 30 and len(sizes) == 28
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:]))
    assert len([s for s in sizes if s <= nt.SMALL_MAX]) == 18


def test_the_sweep_ends_at_a_max_size_off_the_doubling_and_rounds_to_whole_floats():
    assert nt.sweep(8, 100) == [8, 16, 32, 64, 100]
    assert nt.sweep(10, 10) == [8]
    assert nt.sweep(6, 7) == [4]


# --------------------------------------------------------------------------- records


def test_records_are_read_from_streamed_lines_with_or_without_torchrun_prefix():
    record = {"stage": "small", "size": 8, "busbw_gbps": 0.1, "correct": True}
    line = "NCCLTEST " + json.dumps(record)
    assert nt.parse_record(line) == record
    assert nt.parse_record("[node-1 rank0]: " + line) == record
    assert nt.parse_record("NCCLTEST {not json") is None
    assert nt.parse_record('NCCLTEST {"no": "stage"}') is None
    assert nt.parse_record("[nccltest rank 0] connected: 2 ranks") is None


def test_result_file_lines_are_plain_json_records():
    lines = [json.dumps({"stage": "plan", "sizes": [8]}), "", json.dumps({"stage": "done", "ok": True})]
    assert [r["stage"] for r in nt.parse_records(lines)] == ["plan", "done"]


def records(sizes, done=None, correct=lambda s: True, world=2, busbw=lambda s: 100.0):
    """A run's records: plan, connect, the sizes in `done` (all by default), done."""
    done = sizes if done is None else done
    out = [{"stage": "plan", "sizes": sizes, "world_size": world, "backend": "nccl"},
           {"stage": "connect", "ok": True, "world_size": world, "backend": "nccl", "init_s": 0.3,
            "gpu": "NVIDIA H200", "nvlink": True}]
    for size in done:
        out.append({"stage": "small" if size <= nt.SMALL_MAX else "full", "size": size, "time_us": 10.0,
                    "algbw_gbps": busbw(size), "busbw_gbps": busbw(size), "correct": correct(size)})
    if done == sizes:
        out.append({"stage": "done", "ok": all(correct(s) for s in sizes)})
    return out


# --------------------------------------------------------------------------- link class and verdicts


def test_two_nvlinked_h200s_expect_325_gbps_and_four_345():
    two = nt.link_class("nccl", 2, machines=1, nproc_per_node=2, gpu_name="NVIDIA H200", nvlink=True)
    four = nt.link_class("nccl", 4, machines=1, nproc_per_node=4, gpu_name="NVIDIA H100 80GB HBM3", nvlink=True)
    eight = nt.link_class("nccl", 8, machines=1, nproc_per_node=8, gpu_name="NVIDIA H20", nvlink=True)
    assert (two.name, two.target_gbps, four.target_gbps, eight.target_gbps) == ("nvlink-hopper", 325.0, 345.0, 350.0)


def test_links_without_a_known_figure_are_reported_without_a_target():
    assert nt.link_class("gloo", 2, 1, 2).target_gbps is None
    assert nt.link_class("nccl", 1, 1, 1, "NVIDIA H200", True).name == "single-rank"
    assert nt.link_class("nccl", 8, 1, 8, "NVIDIA GeForce RTX 5090", False).name == "pcie"
    assert nt.link_class("nccl", 8, 1, 8, "NVIDIA A100-SXM4-80GB", True).name == "nvlink"
    assert nt.link_class("nccl", 16, 2, 8, "NVIDIA H200", True, ib_nics=0).name == "tcp"


def test_between_machines_each_ndr_nic_is_worth_46_gbps_up_to_one_per_gpu():
    eight = nt.link_class("nccl", 16, 2, 8, "NVIDIA H20", True, ib_nics=8)
    two_nics = nt.link_class("nccl", 16, 2, 8, "NVIDIA H20", True, ib_nics=2)
    one_gpu = nt.link_class("nccl", 2, 2, 1, "NVIDIA H20", True, ib_nics=8)
    assert (eight.name, eight.target_gbps, two_nics.target_gbps, one_gpu.target_gbps) == ("infiniband", 368.0, 92.0, 46.0)


def test_verdicts_judge_only_large_messages():
    assert nt.verdict(1 << 20, 10.0, H200) == "-"
    assert nt.verdict(1 << 30, 328.3, H200) == "pass"
    assert nt.verdict(1 << 30, 300.0, H200) == "warn"
    assert nt.verdict(1 << 30, 100.0, H200) == "fail"
    assert nt.verdict(1 << 30, 1.0, nt.link_class("gloo", 2, 1, 2)) == "-"


# --------------------------------------------------------------------------- one test's report


def test_a_complete_correct_sweep_reports_every_stage_ok():
    sizes = nt.sweep(8, 1 << 30)
    report = nt.summarize(records(sizes, busbw=lambda s: 330.0), H200)
    assert {k: v["status"] for k, v in report["stages"].items()} == {"connect": "ok", "small": "ok", "full": "ok"}
    assert report["complete"] and report["correct"] and report["verdict"] == "pass" and not report["missing_sizes"]
    assert report["stages"]["small"]["sizes_done"] == 18 and report["stages"]["full"]["sizes_done"] == 10
    assert nt.report_ok(report, 0) and nt.stop_note(report) is None
    assert not nt.report_ok(report, 1)


def test_a_sweep_that_hangs_after_32k_says_where_it_stopped():
    sizes = nt.sweep(8, 1 << 30)
    report = nt.summarize(records(sizes, done=[s for s in sizes if s <= 32768]), H200)
    assert report["stopped_after"] == 32768 and report["missing_sizes"][0] == 65536
    assert report["stages"]["small"]["status"] == "failed"
    assert report["stages"]["full"]["status"] == "not_reached" and report["stages"]["full"]["sizes_done"] == 0
    assert "stopped after 32 KiB: 64 KiB never completed" in nt.stop_note(report)
    assert not nt.report_ok(report, 1)


def test_a_wrong_sum_fails_the_test_and_names_the_size():
    sizes = nt.sweep(8, 4 << 20)
    report = nt.summarize(records(sizes, correct=lambda s: s != 2 << 20), nt.link_class("gloo", 2, 1, 2))
    assert report["correct"] is False and report["stages"]["full"]["wrong_sums_at"] == [2 << 20]
    assert not nt.report_ok(report, 0)


def test_no_connect_record_fails_the_connect_stage_and_the_others_are_not_reached():
    plan = [{"stage": "plan", "sizes": [8, 16]}]
    report = nt.summarize(plan, H200)
    assert report["stages"]["connect"]["status"] == "failed"
    assert report["stages"]["small"]["status"] == "not_reached"
    assert report["correct"] is None and nt.stop_note(report).startswith("stopped at the connectivity stage")
    error = [{"stage": "error", "ok": False, "rank": 1, "error": "DistBackendError: NCCL error"}]
    assert nt.summarize(plan + error, H200)["stages"]["connect"]["detail"] == "DistBackendError: NCCL error"


def test_stage_connect_skips_the_size_stages():
    report = nt.summarize(records([]), H200, last_stage="connect")
    assert [v["status"] for v in report["stages"].values()] == ["ok", "skipped", "skipped"]
    assert nt.report_ok(report, 0)


def test_bandwidth_far_below_target_fails_and_slightly_below_warns():
    sizes = nt.sweep(1 << 30, 1 << 30)
    assert not nt.report_ok(nt.summarize(records(sizes, busbw=lambda s: 150.0), H200), 0)
    warned = nt.summarize(records(sizes, busbw=lambda s: 300.0), H200)
    assert warned["verdict"] == "warn" and nt.report_ok(warned, 0)


def test_the_table_has_a_row_per_size_and_names_the_link():
    report = nt.summarize(records(nt.sweep(1 << 30, 1 << 30), busbw=lambda s: 328.29), H200)
    lines = nt.table_lines(report)
    assert "busbw" in lines[0] and "1 GiB" in lines[1] and "328.29" in lines[1] and "pass" in lines[1]
    assert lines[-1].startswith("link: nvlink-hopper; target busbw >= 325 GB/s")


# --------------------------------------------------------------------------- pairs


@pytest.mark.parametrize("n", range(2, 10))
def test_pair_rounds_cover_every_pair_once_with_no_node_twice_in_a_round(n):
    names = [f"node{i}" for i in range(n)]
    rounds = nt.pair_rounds(names)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == sorted(itertools.combinations(names, 2))
    for r in rounds:
        in_round = [h for p in r for h in p]
        assert len(in_round) == len(set(in_round))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)


def pair(a, b, busbw, ok=True):
    return {"hosts": [a, b], "ok": ok, "busbw_gbps": busbw, "size": 1 << 30}


def test_the_node_common_to_the_slowest_pairs_is_named():
    results = [pair(a, b, 40.0 if "c" in (a, b) else 180.0) for a, b in itertools.combinations("abcd", 2)]
    ranked = nt.rank_pairs(results)
    assert [p["rank"] for p in ranked] == [1, 2, 3, 4, 5, 6]
    assert all("c" in p["hosts"] for p in ranked[:3])
    slow = nt.slowest_node(results)
    assert slow["host"] == "c" and slow["outlier"] and slow["score_gbps"] == 40.0 and slow["others_median_gbps"] == 180.0


def test_a_failed_pair_counts_as_zero_and_points_at_its_common_node():
    results = [pair("a", "b", 180.0), pair("a", "c", 0.0, ok=False), pair("b", "c", None, ok=False)]
    assert nt.rank_pairs(results)[-1]["hosts"] == ["a", "b"]
    assert nt.slowest_node(results)["host"] == "c"


def test_a_uniform_cluster_has_a_slowest_node_but_no_outlier():
    results = [pair(a, b, 180.0 + i) for i, (a, b) in enumerate(itertools.combinations("abcd", 2))]
    assert not nt.slowest_node(results)["outlier"]


def test_two_nodes_cannot_tell_which_end_is_slow():
    slow = nt.slowest_node([pair("a", "b", 10.0)])
    assert slow["host"] is None and "three nodes" in slow["reason"]


# --------------------------------------------------------------------------- the runner ships files


def inventory(container: bool = False, outputs: str = "/out") -> Inventory:
    spec = ContainerSpec(image="img", name="ctr") if container else None
    hosts = (Host("n1", "10.0.0.1"), Host("n2", "10.0.0.2"))
    return Inventory(name="t", hosts=hosts, container=spec, rendezvous=RendezvousSpec(port=29500),
                     job=JobSpec(command=("generate.py",), args=("--prompt", "{prompt}"), nproc_per_node=2,
                                 world_size_divides=40, outputs=outputs, env=()))


def test_files_are_put_through_a_rename_in_the_container_when_there_is_one():
    from clusterctl.run.runner import files_dir
    from clusterctl.plan.shipping import put_file_command

    assert files_dir("/out/", "r1") == "/out/logs/r1/.files"
    on_host = put_file_command(inventory(), "/out/logs/r1/.files", "bench.py", b"print(1)")
    # node/run_files.py `put` (an exclusive temp file renamed over the name), the run's .files as root
    assert on_host.argv[:4] == ("python3", "-I", "-S", "-c") and on_host.privileged
    assert on_host.argv[-4:] == ("put", "/out", "logs/r1/.files", "bench.py") and on_host.stdin == b"print(1)"
    in_container = put_file_command(inventory(container=True), "/d", "bench.py", b"x")
    assert in_container.argv[:5] == ("docker", "exec", "-i", "ctr", "python3")
    with pytest.raises(ValueError):
        put_file_command(inventory(), "/d", "../evil", b"x")


def test_the_benchmark_inventory_runs_the_shipped_script_with_the_options():
    from clusterctl.backends.nccl_test import bench_inventory
    from clusterctl.run.runner import JobRunner
    from clusterctl.plan.topology import NodeFacts, plan

    args = Namespace(stage="small", iters=7, warmup=2, connect_timeout=30.0)
    bench, result = bench_inventory(inventory(), args, (8, 1 << 20), "r1")
    assert bench.job.command == ("/out/logs/r1/.files/allreduce_bench.py",)
    assert bench.job.world_size_divides is None and bench.hosts == inventory().hosts
    assert result == "/out/logs/r1/n1/nccltest.jsonl"
    assert bench.job.args == ("--stage", "small", "--min-size", "8", "--iters", "7", "--warmup", "2",
                              "--connect-timeout", "30", "--result-file", result, "--max-size", "1048576")
    topology = plan(bench, {"n1": NodeFacts(gpu_ids=(0, 1)), "n2": NodeFacts(gpu_ids=(0, 1))})
    runner = JobRunner(bench, topology, "r1", "", connections=None, on_event=lambda e: None,
                       files={"allreduce_bench.py": b"x"})
    command = runner.commands()["n2"]
    # the node metrics sampler (issue 41) ships with every run, the benchmark's too
    assert command["files"] == ["/out/logs/r1/.files/node_metrics.py", "/out/logs/r1/.files/allreduce_bench.py"]
    assert command["argv"][-15:] == ["/out/logs/r1/.files/allreduce_bench.py", *bench.job.args]
    with pytest.raises(ValueError):
        JobRunner(bench, topology, "r1", "", None, lambda e: None, files={"a/b": b"x"})
    quiet = dataclasses.replace(bench, job=dataclasses.replace(bench.job, metrics_every=0))  # no sampler shipped
    assert "files" not in JobRunner(quiet, topology, "r1", "", None, lambda e: None).commands()["n1"]


def test_the_workload_shipped_is_the_file_in_the_package():
    from clusterctl.nccltest import ALLREDUCE_BENCH, source

    assert source(ALLREDUCE_BENCH) == BENCH.read_bytes()
    assert b"import clusterctl" not in source(ALLREDUCE_BENCH) and b"from clusterctl" not in source(ALLREDUCE_BENCH)


def test_the_real_h200_captures_parse_with_the_fact_parsers():
    from clusterctl.preflight import facts

    gpus = facts.parse_gpu_csv((REAL / "nvidia_smi_query_gpu.csv").read_text())
    assert gpus.count == 2 and {g.name for g in gpus.gpus} == {"NVIDIA H200"}
    assert {g.driver_version for g in gpus.gpus} == {"580.159.04"}
    assert facts.parse_topology((REAL / "nvidia_smi_topo.txt").read_text()).all_gpus_nvlinked
    query = facts.parse_smi_query((REAL / "nvidia_smi_q.txt").read_text())
    assert query.driver_version == "580.159.04" and query.cuda_version == "13.0"
    assert facts.parse_smi_table((REAL / "nvidia_smi_table_idle.txt").read_text()).count == 2


def clusterctl(tmp_path: Path, *argv: str) -> tuple[int, dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "MASTER_", "RANK", "WORLD_SIZE"))}
    env["CLUSTERCTL_STATE"] = str(tmp_path / "state")
    code = "import sys; from clusterctl.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, *argv, "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_a_pair_without_the_inventory_master_meets_at_its_own_address_on_the_job_network():
    from clusterctl.backends.nccl_test import _pair_rendezvous
    from clusterctl.plan.topology import NodeFacts

    hosts = tuple(Host(name=f"node{i}", address=f"198.18.0.{10 + i}") for i in (1, 2, 3))
    inventory = Inventory(name="t", hosts=hosts, container=None, job=JobSpec(command=("x",)),
                          rendezvous=RendezvousSpec(address="198.19.0.11"))
    facts = {f"node{i}": NodeFacts(address=f"198.19.0.{10 + i}") for i in (1, 2, 3)}
    assert _pair_rendezvous(inventory, facts, "node1").address == "198.19.0.11"
    assert _pair_rendezvous(inventory, facts, "node2").address == "198.19.0.12"
    assert _pair_rendezvous(inventory, {}, "node2").address is None  # then the master's own address
    limited = inventory.limited(["node2", "node3"])  # --limit without the master
    assert limited.master.name == "node2" and limited.rendezvous_address == "198.18.0.12"
