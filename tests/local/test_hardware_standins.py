"""The hardware stand-ins (tests/fixtures/hardware/) print captured real outputs only, and the real
probe script, run by this machine's sh with a variant's bin/ first on PATH, reads them into the
verdicts issue 17 asks for. The same runs over SSH on rehearsal nodes: tests/rehearsal/test_cluster_hardware.py."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clusterctl.models import CheckStatus, Host, Inventory, JobSpec
from clusterctl.preflight import facts, probe
from clusterctl.transport import remote_argv

PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HARDWARE = FIXTURES / "hardware"


def standin(variant: str, *argv: str, env: dict = None) -> subprocess.CompletedProcess:
    path = f"{HARDWARE / variant / 'bin'}:{os.environ['PATH']}"
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, PATH=path, **(env or {})))


def capture(name: str) -> str:
    return facts.strip_provenance((FIXTURES / "tools" / name).read_text())


def variant_env(variant: str) -> dict:
    env_file = HARDWARE / variant / "env"
    if not env_file.exists():
        return {}
    return dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)


def probe_here(variant: str, tmp_path: Path):
    """The real probe batch for a one-node, no-container inventory, run locally under the variant."""
    inventory = Inventory(name="t", hosts=(Host(name="n1", address="127.0.0.1"),),
                          job=JobSpec(outputs=str(tmp_path / "outputs")))
    command = probe.probe_command(inventory, inventory.hosts[0])
    env = dict(os.environ, PATH=f"{HARDWARE / variant / 'bin'}:{os.environ['PATH']}", **variant_env(variant))
    done = subprocess.run(remote_argv(command), capture_output=True, text=True, env=env, timeout=120)
    parsed = probe.parse_probe(done.stdout)
    return parsed, {c.check: c for c in probe._per_node(inventory, {"n1": parsed})}


@pytest.mark.parametrize("variant, argv, name", [
    ("h100x8_nvlink_8ib", ("nvidia-smi",), "nvidia_smi/table_h100x8_sxm_idle.txt"),
    ("h100x8_nvlink_8ib", ("nvidia-smi", "topo", "-m"), "nvidia_smi/topo_h100x8_8nic.txt"),
    ("h100x8_nvlink_8ib", ("nvidia-smi", "-q"), "nvidia_smi/q_h100x8_sxm_fabric_completed.txt"),
    ("h100x8_nvlink_8ib", facts.NVIDIA_SMI_APPS.argv, "nvidia_smi/compute_apps_h100x1_idle.csv"),
    ("h100x8_nvlink_8ib", ("ibstat",), "ibstat/h100_8ib_1roce_bond_all_active.txt"),
    ("ib_all_down", ("ibstat",), "ibstat/single_hca_down_linkup_sriov_pod.txt"),
])
def test_a_stand_in_prints_the_capture_byte_for_byte(variant, argv, name):
    done = standin(variant, *argv)  # awk ends the last line with a newline where a capture has none
    assert done.returncode == 0 and done.stdout.rstrip("\n") == capture(name).rstrip("\n")


def test_the_ibpanic_stand_in_fails_as_ibstat_does():
    done = standin("ibpanic", "ibstat")
    assert done.returncode == 255 and done.stdout == ""
    assert done.stderr.rstrip("\n") == capture("ibstat/ibpanic_only_azure_an0.txt").rstrip("\n")


def test_the_derived_gpu_query_holds_the_values_of_the_same_machines_query_output():
    done = standin("h100x8_nvlink_8ib", *facts.NVIDIA_SMI_GPUS.argv)
    gpus = facts.parse_gpu_csv(done.stdout)
    table = facts.parse_smi_table(capture("nvidia_smi/table_h100x8_sxm_idle.txt"))
    assert [(g.index, g.name, g.memory_total_mib, g.pci_bus_id) for g in gpus.gpus] == \
        [(g.index, g.name, g.memory_total_mib, g.pci_bus_id) for g in table.gpus]
    assert gpus.driver_version == table.driver_version == "565.57.01"


def test_the_zh_cn_df_stand_in_translates_unless_the_c_locale_is_asked_for(tmp_path):
    translated = standin("zh_cn_shm64", "df", "-P", "-B1", "/dev/shm", env={"LANG": "zh_CN.UTF-8", "LC_ALL": ""})
    assert translated.stdout.startswith("文件系统") and "67108864" in translated.stdout
    plain = standin("zh_cn_shm64", "df", "-P", "-B1", "/dev/shm", env={"LANG": "zh_CN.UTF-8", "LC_ALL": "C"})
    assert plain.stdout.rstrip("\n") == capture("host/df_shm_docker_default_64m.txt").rstrip("\n")
    for text in (translated.stdout, plain.stdout):
        assert facts.parse_df(text).size_bytes == 64 << 20
    other = standin("zh_cn_shm64", "df", "-P", "-B1", str(tmp_path))
    assert other.returncode == 0 and facts.parse_df(other.stdout).size_bytes > 64 << 20  # the real df


def test_a_stand_in_refuses_arguments_it_has_no_capture_for():
    done = standin("h100x8_nvlink_8ib", "nvidia-smi", "nvlink", "-s")
    assert done.returncode == 2 and "no capture for arguments: nvlink -s" in done.stderr


def test_stand_ins_are_posix_sh_and_executable():
    for path in HARDWARE.glob("*/bin/*"):
        assert os.access(path, os.X_OK), path
        assert path.read_text().startswith("#!/bin/sh\n"), path
        assert subprocess.run(["sh", "-n", str(path)], timeout=10).returncode == 0, path


# --------------------------------------------------------------------------- probe -> parse -> verdict, locally


def test_an_8x_h100_nvswitch_node_with_8_ib_rails_passes_gpu_nvlink_fabric_and_ib(tmp_path):
    parsed, checks = probe_here("h100x8_nvlink_8ib", tmp_path)
    assert checks["gpus"].status == PASS and "8 x NVIDIA H100 80GB HBM3" in checks["gpus"].detail
    assert checks["nvlink"].status == PASS and "NV18 (NVSwitch fabric)" in checks["nvlink"].detail
    assert checks["fabric"].status == PASS and "8 GPU(s)" in checks["fabric"].detail
    assert checks["gpu_busy"].status == PASS
    assert checks["gpu_nics"].status == PASS and "GPU0: mlx5_0 (PIX)" in checks["gpu_nics"].detail
    assert parsed.ib.nccl_ib_hca == "mlx5_0:1,mlx5_1:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1"


def test_a_node_whose_ib_ports_are_all_down_fails_ib_config(tmp_path):
    from clusterctl.preflight import verdicts

    parsed, _ = probe_here("ib_all_down", tmp_path)
    (result,) = verdicts.check_ib({"n1": parsed.ib})
    assert result.status == FAIL and verdicts.cause_of(result) == "ib_config"
    assert "mlx5_7:1 Down/LinkUp" in result.detail and "subnet manager" in result.fix


def test_an_ibpanic_node_warns_instead_of_saying_no_infiniband(tmp_path):
    from clusterctl.preflight import verdicts

    parsed, _ = probe_here("ibpanic", tmp_path)
    (result,) = verdicts.check_ib({"n1": parsed.ib})
    assert result.status == WARN and "ibpanic" in result.detail


def test_a_zh_cn_node_with_64_mib_of_shm_fails_shm_too_small(tmp_path):
    parsed, checks = probe_here("zh_cn_shm64", tmp_path)
    assert checks["shm"].status == FAIL and checks["shm"].detail.startswith("shm_too_small:")
    assert "64 MiB" in checks["shm"].detail
    assert checks["disk"].status == PASS and "does not exist yet" in checks["disk"].detail
