"""Issue 17 on the rehearsal cluster: nodes that impersonate hardware we do not have (the stand-ins of
tests/fixtures/hardware/, which print captured real outputs), judged by `clusterctl check` over SSH:
probe -> parse -> verdict end to end, one test per variant.

Needs the `hardware_sandbox` fixture (built in clusterctl/sandbox/ and tests/rehearsal/conftest.py by the
sandbox's owner): a running sandbox whose attribute `node_of` maps each variant name to the node
that impersonates it. On that node, and only there:
  - every sshd session has tests/fixtures/hardware/<variant>/bin first on PATH;
  - tests/fixtures/hardware/<variant>/sys/class/infiniband, where the variant has one, is
    bind-mounted over /sys/class/infiniband in the node's mount namespace; a variant without one
    sees no /sys/class/infiniband ports;
  - the NAME=value lines of tests/fixtures/hardware/<variant>/env are the sessions' environment.
The inventories below run the ranks on the host (no container): the sandbox's containers mount
the host's /usr, so reads made inside a container see the real tools, not the stand-ins.
"""
from __future__ import annotations

import pytest

from clusterctl_helpers import Cli, checks_named, host_entry, variant

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]


@pytest.fixture(scope="module")
def cli(hardware_sandbox, tmp_path_factory):
    return Cli(tmp_path_factory.mktemp("hardware-state"))


def _check_alone(sandbox, cli, tmp_path, name: str) -> tuple[int, dict]:
    """`clusterctl check` on the variant's node alone, ranks on the host, outputs not created yet."""
    node = sandbox.node_of[name]

    def host_runtime(doc):
        doc["hosts"] = [host_entry(doc, node)]
        doc.pop("container", None)
        doc.setdefault("job", {})["outputs"] = f"/tmp/cc-hardware-{name}/outputs"
        doc["job"]["nproc_per_node"] = "auto"  # one rank per GPU the variant shows
        doc["job"].pop("world_size_divides", None)
        doc.setdefault("rendezvous", {}).pop("master", None)

    inventory = variant(sandbox, tmp_path / f"{name}.yaml", host_runtime)
    code, doc = cli.json("check", "-i", str(inventory))
    assert "checks" in doc, doc
    return code, {c["check"]: c for c in doc["checks"] if c["host"] == node}


def test_an_8x_h100_node_with_nvswitch_and_8_ib_rails_passes_its_gpu_and_fabric_checks(hardware_sandbox, cli,
                                                                                        tmp_path):
    code, checks = _check_alone(hardware_sandbox, cli, tmp_path, "h100x8_nvlink_8ib")
    assert checks["gpus"]["status"] == "pass" and "8 x NVIDIA H100 80GB HBM3" in checks["gpus"]["detail"]
    assert checks["nvlink"]["status"] == "pass" and "NV18 (NVSwitch fabric)" in checks["nvlink"]["detail"]
    assert checks["fabric"]["status"] == "pass"
    assert checks["gpu_nics"]["status"] == "pass" and "GPU0: mlx5_0 (PIX)" in checks["gpu_nics"]["detail"]
    ib = checks["ib"]
    assert ib["status"] == "pass" and "from sysfs" in ib["detail"]  # the bind-mounted tree, not ibstat
    assert "NCCL_IB_HCA=mlx5_0:1,mlx5_1:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1" in ib["detail"]


def test_a_node_whose_ib_ports_are_all_down_fails_check_with_ib_config(hardware_sandbox, cli, tmp_path):
    code, checks = _check_alone(hardware_sandbox, cli, tmp_path, "ib_all_down")
    ib = checks["ib"]
    assert code == 1 and ib["status"] == "fail" and ib["detail"].startswith("ib_config:"), ib  # said, if it ever flakes
    assert "mlx5_7:1 Down/LinkUp" in ib["detail"] and "subnet manager" in ib["fix"]
    assert "checks.ib: off" in ib["fix"]


def test_a_node_whose_ib_ports_are_all_down_passes_ib_with_checks_ib_off(hardware_sandbox, cli, tmp_path):
    node = hardware_sandbox.node_of["ib_all_down"]

    def off(doc):
        doc["hosts"] = [host_entry(doc, node)]
        doc.pop("container", None)
        doc["checks"] = {**doc.get("checks", {}), "ib": "off"}

    code, doc = cli.json("check", "-i", str(variant(hardware_sandbox, tmp_path / "off.yaml", off)))
    ib = checks_named(doc, "ib")[node]
    assert ib["status"] == "pass" and "NCCL_IB_DISABLE=1" in ib["detail"]


def test_an_ibstat_that_panics_warns_and_is_never_read_as_no_infiniband(hardware_sandbox, cli, tmp_path):
    code, checks = _check_alone(hardware_sandbox, cli, tmp_path, "ibpanic")
    ib = checks["ib"]
    assert ib["status"] == "warn" and "ibpanic" in ib["detail"] and "mlx5_an0" in ib["detail"]
    assert "no InfiniBand" not in ib["detail"]


def test_a_zh_cn_node_with_64_mib_of_shm_fails_shm_too_small(hardware_sandbox, cli, tmp_path):
    code, checks = _check_alone(hardware_sandbox, cli, tmp_path, "zh_cn_shm64")
    shm = checks["shm"]
    assert code == 1 and shm["status"] == "fail" and shm["detail"].startswith("shm_too_small:")
    assert "64 MiB" in shm["detail"]
    disk = checks["disk"]  # job.outputs does not exist yet: read at its parent, and said so
    assert disk["status"] == "pass" and "does not exist yet" in disk["detail"]
