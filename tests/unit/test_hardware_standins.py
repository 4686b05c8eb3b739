"""The hardware stand-ins (tests/fixtures/hardware/) print captured real outputs only, and the real
probe script, run by this machine's sh with a variant's bin/ first on PATH, reads them into the
verdicts issue 17 asks for. The same runs over SSH on rehearsal nodes: tests/rehearsal/test_cluster_hardware.py."""
from __future__ import annotations
from clusterctl.preflight import probe

from local.test_hardware_standins import HARDWARE
VARIANTS = ("h100x8_nvlink_8ib", "ib_all_down", "ibpanic", "zh_cn_shm64", "h100x4_metrics")


def test_every_hardware_fixture_is_described_in_the_readme():
    readme = (HARDWARE / "README.md").read_text()
    for variant in VARIANTS:
        assert f"`{variant}`" in readme
        for path in (HARDWARE / variant / "bin").iterdir():
            assert f"`{variant}/bin/{path.name}`" in readme, path
    assert "sys/class/infiniband/<hca>/ports/<n>/state" in readme
