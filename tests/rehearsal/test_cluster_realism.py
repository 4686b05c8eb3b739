"""The rehearsal nodes look like real machines (Issue 16), and clusterctl behaves on them:
hostnames that are not the inventory's names (FQDNs, Debian's 127.0.1.1), a management, a
fabric and a docker0 network with interface names that differ per node, a non-root user with
sudo on port 2222, a node behind a bastion; and what ranks print never reaches the operator's
terminal raw: the live log, the status view and the failure summary of a failed run show a rank's escapes as
text (issue 16's "done when"; tests/rehearsal/test_terminal_safety.py's run of its own until round five)."""
from __future__ import annotations

import re
import textwrap

import pytest

from clusterctl_helpers import Cli, host_entry, load_inventory, variant
from unit.test_terminal_safety import raw_controls

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]


@pytest.fixture(scope="module")
def cli(sandbox, tmp_path_factory):
    cli = Cli(tmp_path_factory.mktemp("realism-state"))
    code, doc = cli.json("up", str(sandbox.inventory_path))
    assert code == 0, doc
    yield cli
    cli.json("down", "-i", str(sandbox.inventory_path))


def _exec(cli, sandbox, *argv: str, inventory=None) -> dict:
    code, doc = cli.json("exec", "-i", str(inventory or sandbox.inventory_path), "--", *argv)
    assert code == 0, doc
    return {name: entry["stdout"].strip() for name, entry in doc["hosts"].items()}


def test_hostnames_are_fqdns_not_inventory_names_and_odd_nodes_map_them_to_127_0_1_1(sandbox, cli):
    names = _exec(cli, sandbox, "hostname")
    assert names == {n.name: n.hostname for n in sandbox.nodes}
    assert all(name != hostname and "." in hostname for name, hostname in names.items())
    resolved = _exec(cli, sandbox, "cat", "/etc/hosts")
    for node in sandbox.nodes:
        own = "127.0.1.1" if node.index % 2 == 1 else node.address
        assert re.search(rf"^{re.escape(own)}\s+{re.escape(node.hostname)}\b", resolved[node.name], re.M), resolved


def test_the_container_keeps_dockers_own_hostname_behaviour(sandbox, cli):
    inside = _exec(cli, sandbox, "docker", "exec", "cc-sandbox", "hostname")
    assert inside == {n.name: n.hostname for n in sandbox.nodes}  # --net=host: the machine's name


def test_nodes_are_reached_as_root_as_a_sudo_user_on_2222_and_through_a_bastion(sandbox, cli):
    doc = load_inventory(sandbox)
    assert host_entry(doc, "node2") == {"name": "node2", "address": "198.18.0.12", "user": "ccops", "port": 2222}
    assert host_entry(doc, "node3")["proxy_jump"] == "root@198.18.0.2"
    who = _exec(cli, sandbox, "sh", "-c", "id -un; sudo -n id -un")
    assert who == {"node1": "root\nroot", "node2": "ccops\nroot", "node3": "root\nroot"}


def test_a_node_behind_the_bastion_is_unreachable_without_it_and_root_is_refused_on_the_sudo_node(
        sandbox, cli, tmp_path):
    def direct(d):
        host_entry(d, "node3").pop("proxy_jump")
        host_entry(d, "node2")["user"] = "root"

    code, doc = cli.json("exec", "-i", str(variant(sandbox, tmp_path / "direct.yaml", direct)), "--", "true")
    assert code == 3, doc
    assert doc["hosts"]["node1"]["status"] == "changed"
    assert {doc["hosts"][n]["status"] for n in ("node2", "node3")} == {"unreachable"}


def test_nic_choice_follows_the_route_to_the_master_over_the_fabric_never_docker0(sandbox, cli, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("plan only\n")
    code, doc = cli.json("run", "--plan", "-i", str(sandbox.inventory_path), str(prompt))
    assert code == 0, doc
    assert doc["master"]["address"] == sandbox.nodes[0].fabric_address
    nics = {n["host"]: (n["nic"], n["local_addr"]) for n in doc["topology"]}
    assert nics == {n.name: (n.fabric_ifname, n.fabric_address) for n in sandbox.nodes}
    assert {n.fabric_ifname for n in sandbox.nodes} == {"eth1", "ens1f0"}
    for name, command in doc["plan"].items():
        assert command["env"]["NCCL_SOCKET_IFNAME"] == command["env"]["GLOO_SOCKET_IFNAME"] != "docker0"
    assert "docker0" in _exec(cli, sandbox, "ip", "-o", "link", "show", "docker0")["node1"]


ESCAPES = textwrap.dedent('''\
    import os, sys
    rank = os.environ["RANK"]
    sys.stdout.write(f"rank {rank} title \\x1b]0;pwned by a node\\x07 clear \\x1b[2J\\x1b[H clip \\x1b]52;c;ZXZpbA==\\x07 "
                     f"c1 \\u009b31m bell \\x07 del \\x7f dcs \\x1bPq#0;2;0;0;0\\x1b\\\\ [bold red]markup[/] end\\n")
    sys.stdout.flush()
    sys.exit(3 if rank == "1" else 0)  # a failed run: its failure summary quotes the rank too
    ''')


def test_a_rank_printing_escape_sequences_leaves_no_raw_control_byte_in_what_run_prints(sandbox, cli, tmp_path):
    jobs = sandbox.shared_outputs / "test-jobs"
    jobs.mkdir(exist_ok=True)
    (jobs / "escapes.py").write_text(ESCAPES)

    def job(d):
        d["job"].update(command=["/workspace/output/test-jobs/escapes.py"], args=[])
        d["job"].pop("world_size_divides", None)

    inventory = variant(sandbox, tmp_path / "escapes.yaml", job)
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("x\n")
    proc = cli.popen("run", "-i", str(inventory), str(prompt), json_output=False)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, err[-3000:]
    shown = out + err
    assert "pwned by a node" in shown and "[bold red]markup[/]" in shown  # the text is shown, escaped
    assert "\\x1b]0;pwned by a node\\x07 clear \\x1b[2J" in shown, shown[-3000:]  # as visible escapes
    assert not raw_controls(shown), sorted(raw_controls(shown))  # the live log, the status view, the summary
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]", shown), repr(
        [line for line in shown.splitlines() if re.search(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]", line)][:3])
    on_disk = b"".join(p.read_bytes() for p in (sandbox.shared_outputs / "logs").glob("*/node1/agent.log")
                       if b"pwned by a node" in p.read_bytes())
    assert b"\x1b]0;pwned by a node\x07" in on_disk  # files keep the bytes as they came
