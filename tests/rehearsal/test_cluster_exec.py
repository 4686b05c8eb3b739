"""`clusterctl exec` on the rehearsal cluster: one persistent SSH connection per node, strict
host keys, unreachable nodes as values within the connect timeout (Issue 2)."""
from __future__ import annotations

import time

import pytest

from clusterctl_helpers import Cli, variant

pytestmark = pytest.mark.sandbox

CONNECT_TIMEOUT = 3


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    return Cli(tmp_path_factory.mktemp("exec-state"))


def _known_line(sb, address: str) -> str:
    return next(line for line in sb.known_hosts.read_text().splitlines() if line.split()[0].split(",")[0] == address)


def test_exec_runs_on_every_node_and_reports_stdout_and_exit_code_per_host(sandbox, cli):
    code, doc = cli.json("exec", "-i", str(sandbox.inventory_path), "--", "hostname")
    assert code == 0 and doc["ok"] is True
    assert list(doc["hosts"]) == ["node1", "node2", "node3"]
    for name, entry in doc["hosts"].items():
        assert entry["status"] in ("ok", "changed")
        assert (entry["stdout"], entry["exit_code"]) == (f"{sandbox.node(name).hostname}\n", 0)

    code, doc = cli.json("exec", "-i", str(sandbox.inventory_path), "--", "sh", "-c",
                         f'test "$(hostname)" != {sandbox.node("node2").hostname}')
    assert code == 1 and doc["ok"] is False
    assert doc["hosts"]["node2"]["status"] == "failed" and doc["hosts"]["node2"]["exit_code"] == 1
    assert {doc["hosts"][n]["exit_code"] for n in ("node1", "node3")} == {0}


@pytest.mark.slow
def test_a_node_whose_network_is_cut_is_unreachable_within_the_connect_timeout(sandbox, cli, tmp_path):
    inventory = variant(sandbox, tmp_path / "inventory.yaml", lambda d: d["ssh"].update(connect_timeout=CONNECT_TIMEOUT))
    sandbox.cut_network("node3")  # reached through the bastion, over the fabric
    try:
        started = time.monotonic()
        code, doc = cli.json("exec", "-i", str(inventory), "--", "hostname")
        elapsed = time.monotonic() - started
    finally:
        sandbox.restore_network("node3")
    assert code == 3 and doc["ok"] is False
    node3 = doc["hosts"]["node3"]
    assert node3["status"] == "unreachable" and "198.19.0.13" in node3["detail"]
    assert node3["duration_s"] <= CONNECT_TIMEOUT + 1
    assert elapsed < CONNECT_TIMEOUT + 5
    assert [doc["hosts"][n]["stdout"] for n in ("node1", "node2")] == [_hostname(sandbox, "node1"),
                                                                        _hostname(sandbox, "node2")]


def _hostname(sb, name: str) -> str:
    return sb.node(name).hostname + "\n"


def test_a_changed_host_key_is_refused_under_strict_and_under_accept_new(sandbox, cli, tmp_path):
    accept_new = variant(sandbox, tmp_path / "accept-new.yaml", lambda d: d["ssh"].update(host_key_policy="accept-new"))
    known_before = sandbox.known_hosts.read_text()
    sandbox.regenerate_host_key("node3")
    try:
        for inventory in (sandbox.inventory_path, accept_new):
            code, doc = cli.json("exec", "-i", str(inventory), "--", "hostname")
            assert code == 3, doc
            node3 = doc["hosts"]["node3"]
            assert node3["status"] == "unreachable" and "CHANGED" in node3["detail"]
            assert [doc["hosts"][n]["stdout"] for n in ("node1", "node2")] == [_hostname(sandbox, "node1"),
                                                                                _hostname(sandbox, "node2")]
            assert sandbox.known_hosts.read_text() == known_before  # accept-new never replaces a known key
    finally:
        sandbox.write_known_hosts()
    code, doc = cli.json("exec", "-i", str(sandbox.inventory_path), "--", "hostname")
    assert code == 0 and doc["hosts"]["node3"]["stdout"] == _hostname(sandbox, "node3")


def test_an_unknown_host_key_is_refused_under_strict_and_recorded_under_accept_new(sandbox, cli, tmp_path):
    node2_line = _known_line(sandbox, "[198.18.0.12]:2222")  # OpenSSH's form for a port other than 22
    partial = tmp_path / "known_hosts"
    partial.write_text("".join(line + "\n" for line in sandbox.known_hosts.read_text().splitlines() if line != node2_line))

    def known_hosts(policy):
        return lambda d: d["ssh"].update(known_hosts=str(partial), host_key_policy=policy)

    strict = variant(sandbox, tmp_path / "strict.yaml", known_hosts("strict"))
    accept_new = variant(sandbox, tmp_path / "accept-new.yaml", known_hosts("accept-new"))

    code, doc = cli.json("exec", "-i", str(strict), "--", "hostname")
    assert code == 3
    node2 = doc["hosts"]["node2"]
    assert node2["status"] == "unreachable" and "unknown host key" in node2["detail"]
    assert "[198.18.0.12]:2222" not in partial.read_text()

    code, doc = cli.json("exec", "-i", str(accept_new), "--", "hostname")
    assert code == 0 and doc["hosts"]["node2"]["stdout"] == _hostname(sandbox, "node2")
    recorded = [line.split() for line in partial.read_text().splitlines() if line.startswith("[198.18.0.12]:2222 ")]
    assert recorded == [["[198.18.0.12]:2222", *node2_line.split()[1:]]]  # the node's real key, recorded once

    code, doc = cli.json("exec", "-i", str(strict), "--", "hostname")  # now known: strict accepts it
    assert code == 0 and doc["hosts"]["node2"]["stdout"] == _hostname(sandbox, "node2")


@pytest.mark.slow
@pytest.mark.sandbox_teardown
def test_eight_nodes_answer_and_one_with_sshd_stopped_is_unreachable_while_seven_succeed(sandbox, cli, tmp_path):
    from clusterctl.sandbox import up

    try:
        eight = up(8, docker=False, state_dir=sandbox.state_dir)
        code, doc = cli.json("exec", "-i", str(eight.inventory_path), "--", "hostname")
        assert code == 0 and doc["ok"] is True
        names = [f"node{i}" for i in range(1, 9)]
        assert sorted(doc["hosts"]) == names
        assert [doc["hosts"][n.name]["stdout"].strip() for n in eight.nodes] == [n.hostname for n in eight.nodes]

        inventory = variant(eight, tmp_path / "inventory.yaml", lambda d: d["ssh"].update(connect_timeout=CONNECT_TIMEOUT))
        eight.stop_sshd("node5")
        try:
            started = time.monotonic()
            code, doc = cli.json("exec", "-i", str(inventory), "--", "hostname")
            elapsed = time.monotonic() - started
        finally:
            eight.start_sshd("node5")
        assert code == 3 and doc["ok"] is False
        assert doc["hosts"]["node5"]["status"] == "unreachable"
        assert doc["hosts"]["node5"]["duration_s"] <= CONNECT_TIMEOUT + 1
        assert elapsed < CONNECT_TIMEOUT + 5
        others = {n: e for n, e in doc["hosts"].items() if n != "node5"}
        assert len(others) == 7 and all(e["exit_code"] == 0 and e["stdout"] == _hostname(eight, n) for n, e in others.items())
    finally:
        up(3, docker=True, state_dir=sandbox.state_dir)  # the session's cluster again, for what follows
