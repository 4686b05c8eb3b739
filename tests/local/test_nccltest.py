"""`clusterctl nccl-test`: the pure report (sizes, busbw, verdicts, pairs), the runner's
shipped files, the rank-side benchmark's helpers, and the command for real on CPU ranks."""
from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
from pathlib import Path

import pytest

from clusterctl.nccltest import plan as nt

from unit.test_nccltest import BENCH, REAL, ROOT, clusterctl, inventory
TOPO = ROOT / "tests" / "fixtures" / "tools" / "nvidia_smi"


def bench_module():
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("allreduce_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_controller_and_ranks_plan_the_same_sweep():
    bench = bench_module()
    for low, high in [(8, 1 << 30), (8, 64 << 20), (3, 1000), (1 << 28, 1 << 32)]:
        assert bench.sweep(low, high) == nt.sweep(low, high)
        assert bench.parse_size("64M") == nt.parse_size("64M")


def test_the_put_command_writes_the_file_where_the_job_reads_it(tmp_path):
    from clusterctl.plan.shipping import put_file_command

    command = put_file_command(inventory(), str(tmp_path / "a" / "b"), "bench.py", b"#!/bin/sh\n\x00binary\n")
    subprocess.run(command.argv, input=command.stdin, check=True)
    assert (tmp_path / "a" / "b" / "bench.py").read_bytes() == b"#!/bin/sh\n\x00binary\n"
    assert [p.name for p in (tmp_path / "a" / "b").iterdir()] == ["bench.py"]


# --------------------------------------------------------------------------- rank-side helpers


def test_the_expected_sums_are_exact_for_any_world_size():
    bench = bench_module()
    for world in (1, 2, 3, 7, 16, 17, 40, 333):
        expected = bench.expected_sums(world)
        for j in range(bench.PATTERN):
            assert expected[j] == sum((j + r) % bench.PATTERN + 1 for r in range(world))
        assert max(expected) < 2 ** 24  # exact in float32


def test_nvlink_is_read_from_real_topology_matrices():
    bench = bench_module()
    seen = {path.name: bench.nvlink_in_topo(path.read_text(errors="replace"))
            for path in [*TOPO.glob("topo_*.txt"), REAL / "nvidia_smi_topo.txt"]}
    assert seen == {"topo_h100x1_vm_ansi.txt": None, "topo_h100x2_nvlink.txt": True, "topo_h100x8_8nic.txt": True,
                    "topo_h200x2_vm_ansi.txt": True, "topo_h20x8_2nic.txt": True,
                    "topo_rtx5090x8_pcie_2nic.txt": False, "nvidia_smi_topo.txt": True}


# --------------------------------------------------------------------------- for real, on CPU ranks


def free_port() -> int:
    from clusterctl_helpers import free_port as below_ephemeral  # no outgoing connection takes it meanwhile

    return below_ephemeral()


def local_inventory(tmp_path: Path, env: str = "") -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(f"""name: nccl-cpu
hosts:
  - {{name: local, connection: local}}
rendezvous: {{port: {free_port()}}}
job:
  command: [not-used.py]
  nproc_per_node: 2
  world_size_divides: 7
  outputs: {tmp_path}/outputs
{env}checks: {{ib: off}}
""")
    return path


def test_nccl_test_sweeps_two_gloo_ranks_through_the_run_path(tmp_path):
    pytest.importorskip("torch")
    code, doc, stderr = clusterctl(tmp_path, "nccl-test", "-i", str(local_inventory(tmp_path)), "--max-size", "2M",
                                   "--iters", "5")
    assert code == 0, stderr
    assert doc["ok"] and doc["world_size"] == 2 and doc["exit_code"] == 0
    assert {k: v["status"] for k, v in doc["stages"].items()} == {"connect": "ok", "small": "ok", "full": "ok"}
    assert [row["size"] for row in doc["sizes"]] == nt.sweep(8, 2 << 20)
    assert all(row["correct"] and row["busbw_gbps"] > 0 and row["time_us"] > 0 for row in doc["sizes"])
    assert doc["link"]["class"] == "gloo" and doc["pairs"] == [] and doc["slowest_node"] is None
    record = json.loads((tmp_path / "state" / "runs" / doc["run_id"] / "run.json").read_text())
    assert record["kind"] == "nccl-test" and record["nccl_test"]["complete"]
    shipped = tmp_path / "outputs" / "logs" / doc["run_id"] / ".files" / "allreduce_bench.py"
    assert shipped.read_bytes() == BENCH.read_bytes()


def test_nccl_test_names_the_cause_when_the_ranks_cannot_connect(tmp_path):
    pytest.importorskip("torch")
    inv = local_inventory(tmp_path, env="  env: {GLOO_SOCKET_IFNAME: nonexistent0}\n")
    code, doc, _ = clusterctl(tmp_path, "nccl-test", "-i", str(inv), "--stage", "small")
    assert code == 1 and not doc["ok"]
    assert doc["stages"]["connect"]["status"] == "failed" and doc["stages"]["small"]["status"] == "not_reached"
    assert doc["first_failure"]["diagnosis"][0]["cause"] == "nic_mismatch"
    assert "nonexistent0" in doc["stages"]["connect"]["detail"]


def test_sizes_are_checked_before_anything_runs(tmp_path):
    code, doc, _ = clusterctl(tmp_path, "nccl-test", "-i", str(local_inventory(tmp_path)), "--max-size", "1K",
                              "--min-size", "1M")
    assert code == 2 and "--max-size" in doc["error"]
