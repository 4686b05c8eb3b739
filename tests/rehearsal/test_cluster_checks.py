"""`clusterctl check` on the rehearsal cluster (Issue 4): each failure planted for real, caught
by its check and cause, and gone once the fault is removed."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, Cli, checks_named, host_entry, stop, variant, wait_until

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

NODES = ("node1", "node2", "node3")
# the rendezvous travels on the fabric (the inventory's rendezvous.address)
DROP_FROM_NODE3 = ["INPUT", "-p", "tcp", "--dport", "29500", "-s", "198.19.0.13", "-j", "DROP"]
HOLD_PORT = (
    "import socket, time\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', 29500)); s.listen(1); time.sleep(300)\n"
)
FAKE_TORCH = b"""\
# An older torch, as a node with a different image or pip install would have.
__version__ = "2.0.0"
class version:
    cuda = None
class cuda:
    @staticmethod
    def is_available():
        return False
"""


@pytest.fixture(scope="module")
def cli(sandbox, tmp_path_factory):
    cli = Cli(tmp_path_factory.mktemp("checks-state"))
    code, doc = cli.json("up", str(sandbox.inventory_path))
    assert code == 0, doc
    yield cli
    cli.json("down", "-i", str(sandbox.inventory_path))  # the next module starts from no container


def _check(cli, inventory) -> tuple[int, dict]:
    return cli.json("check", "-i", str(inventory))


def _failed(doc: dict) -> list[tuple]:
    return sorted((c["host"] or "", c["check"]) for c in doc["checks"] if c["status"] == "fail")


def test_check_on_a_healthy_cluster_exits_0(sandbox, cli):
    code, doc = _check(cli, sandbox.inventory_path)
    assert code == 0 and doc["ok"] is True, _failed(doc)
    assert doc["summary"]["fail"] == 0
    for check in ("ssh", "docker", "container", "shm", "versions", "nic"):
        assert {h: c["status"] for h, c in checks_named(doc, check).items()} == {n: "pass" for n in NODES}, check
    assert checks_named(doc, "rdzv_port_free")["node1"]["status"] == "pass"
    assert {h: c["status"] for h, c in checks_named(doc, "rdzv_reachable").items()} == {"node2": "pass", "node3": "pass"}


def test_a_firewall_rule_on_the_master_fails_rdzv_reachable_for_that_worker_and_quotes_it(sandbox, cli):
    sandbox.ns_exec("node1", ["iptables", "-A", *DROP_FROM_NODE3])
    try:
        code, doc = _check(cli, sandbox.inventory_path)
    finally:
        sandbox.ns_exec("node1", ["iptables", "-D", *DROP_FROM_NODE3])
    assert code == 1 and _failed(doc) == [("node3", "rdzv_reachable")]
    node3 = checks_named(doc, "rdzv_reachable")["node3"]
    assert node3["detail"].startswith("rdzv_unreachable:")
    assert "on node1: '-A INPUT -s 198.19.0.13/32 -p tcp -m tcp --dport 29500 -j DROP'" in node3["detail"]
    assert "iptables -I INPUT -p tcp --dport 29500 -j ACCEPT" in node3["fix"]
    assert checks_named(doc, "rdzv_reachable")["node2"]["status"] == "pass"

    code, doc = _check(cli, sandbox.inventory_path)
    assert code == 0 and checks_named(doc, "rdzv_reachable")["node3"]["status"] == "pass"


def test_a_rejecting_rule_on_a_worker_fails_rdzv_reachable_with_the_reason_its_sshd_gave(sandbox, cli):
    # The worker's own sshd makes the connect (an SSH direct-tcpip channel): its errno comes back.
    reject = ["OUTPUT", "-p", "tcp", "--dport", "29500", "-d", "198.19.0.11", "-j", "REJECT", "--reject-with",
              "tcp-reset"]
    sandbox.ns_exec("node2", ["iptables", "-A", *reject])
    try:
        code, doc = _check(cli, sandbox.inventory_path)
    finally:
        sandbox.ns_exec("node2", ["iptables", "-D", *reject])
    assert code == 1 and _failed(doc) == [("node2", "rdzv_reachable")]
    node2 = checks_named(doc, "rdzv_reachable")["node2"]
    assert "Connection refused" in node2["detail"]
    assert "on node2: '-A OUTPUT -d 198.19.0.11/32 -p tcp -m tcp --dport 29500 -j REJECT --reject-with tcp-reset'" \
        in node2["detail"], node2
    assert "on node2 allow outgoing 29500" in node2["fix"]


def test_a_listener_on_the_rendezvous_port_fails_rdzv_port_free_and_names_its_pid(sandbox, cli):
    holder = subprocess.Popen(sandbox.ns_argv("node1", [sys.executable, "-c", HOLD_PORT]))
    try:
        wait_until(lambda: sandbox.ns_exec("node1", ["ss", "-Hltn", "sport = :29500"]).stdout.strip(), 15,
                   what="the planted listener")
        code, doc = _check(cli, sandbox.inventory_path)
    finally:
        stop(holder)
    assert code == 1 and _failed(doc) == [("node1", "rdzv_port_free")]
    entry = checks_named(doc, "rdzv_port_free")["node1"]
    assert entry["detail"].startswith("port_in_use:") and f"held by pid {holder.pid}" in entry["detail"]
    assert f"stop pid {holder.pid}" in entry["fix"] and "rendezvous.port:" in entry["fix"]

    code, doc = _check(cli, sandbox.inventory_path)
    assert code == 0 and checks_named(doc, "rdzv_port_free")["node1"]["status"] == "pass"


def test_a_container_with_64_mib_of_shm_fails_the_shm_check_with_the_inventory_fix(sandbox, cli, tmp_path):
    small = variant(sandbox, tmp_path / "shm64.yaml", lambda d: d["container"].update(shm_size="64m", name="cc-shm64"))
    try:
        code, doc = cli.json("up", str(small))
        assert code == 1, doc  # its preflight fails
        code, doc = _check(cli, small)
    finally:
        cli.json("down", "-i", str(small))
    assert code == 1 and _failed(doc) == [(n, "shm") for n in NODES]
    for entry in checks_named(doc, "shm").values():
        assert entry["detail"].startswith("shm_too_small:") and "64 MiB" in entry["detail"]
        assert "container.shm_size" in entry["fix"] and "container.ipc: host" in entry["fix"]

    code, doc = _check(cli, sandbox.inventory_path)
    assert code == 0 and {c["status"] for c in checks_named(doc, "shm").values()} == {"pass"}


def test_a_node_whose_container_imports_another_torch_fails_versions_with_version_mismatch(sandbox, cli, tmp_path):
    fake = sandbox.shared_outputs / "cc-fake-torch"
    (fake / "torch").mkdir(parents=True, exist_ok=True)
    (fake / "torch" / "__init__.py").write_bytes(FAKE_TORCH)

    def on_node3(doc):
        host_entry(doc, "node3")["env"] = {"PYTHONPATH": f"{CONTAINER_OUTPUTS}/cc-fake-torch"}

    odd = variant(sandbox, tmp_path / "odd-torch.yaml", on_node3)
    try:
        code, doc = cli.json("up", str(odd))  # recreates node3's container with the env
        assert code == 1, doc
        assert doc["hosts"]["node3"]["status"] == "failed"
        code, doc = _check(cli, odd)
        assert code == 1 and _failed(doc) == [("node3", "versions")]
        entry = checks_named(doc, "versions")["node3"]
        assert entry["detail"].startswith("version_mismatch:")
        assert "torch 2.0.0" in entry["detail"] and "node1, node2 have" in entry["detail"]
        assert entry["fix"]
    finally:
        code, doc = cli.json("up", str(sandbox.inventory_path))
        shutil.rmtree(fake, ignore_errors=True)
    assert code == 0 and doc["hosts"]["node3"]["status"] == "changed", doc  # node3's container is back
    code, doc = _check(cli, sandbox.inventory_path)
    assert code == 0 and {c["status"] for c in checks_named(doc, "versions").values()} == {"pass"}
