"""The virtual network: two bridges on the host, one network namespace per node.

Node i is the namespace `cc-node{i}` with
- `eth0` at 198.18.0.(10+i)/24, whose veth peer `cc-v{i}` is enslaved to the management
  bridge `cc-br` (198.18.0.1/24: this machine, the registry);
- a fabric interface (`eth1` or `ens1f0`, layout.Node.fabric_ifname) at 198.19.0.(10+i)/24,
  peer `cc-f{i}` on the bridge `cc-fab`, which has no address here: only nodes talk on it;
- `docker0`, a bridge with no ports at 198.19.255.1/24 on every node, like Docker's default
  bridge on a real machine: an interface a careless NIC choice picks, that leads nowhere.
The bastion (node 0, `cc-bastion`) has eth0 and eth1 only. No route, NAT or forwarding to
anything else is set up: nodes reach each other and this machine, nothing more.
"""
from __future__ import annotations

import os
from pathlib import Path

from clusterctl.sandbox.layout import (BRIDGE, BRIDGE_ADDRESS, BRIDGE_MAC, DOCKER0_ADDRESS, FABRIC_BRIDGE, NETNS_DIR,
                                       NETNS_PREFIX, PREFIX_LEN, Node, node_index)
from clusterctl.sandbox.system import processes_in_netns, run, terminate, which

# Once a Docker Engine with iptables enabled has run on the machine, FORWARD drops
# bridged frames (br_netfilter): node-to-node TCP would time out while host-to-node works.
FORWARD_RULES = [["FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"] for bridge in (BRIDGE, FABRIC_BRIDGE)]


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def bridge_owner() -> str | None:
    """The state directory of the sandbox that made the bridge (kept in its alias)."""
    try:
        return Path("/sys/class/net", BRIDGE, "ifalias").read_text().strip() or None
    except OSError:
        return None


def ensure_bridge(owner: Path) -> None:
    if not link_exists(BRIDGE):
        run(["ip", "link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge"])
    if bridge_owner() != str(owner):
        run(["ip", "link", "set", BRIDGE, "alias", str(owner)])
    addresses = run(["ip", "-o", "-4", "addr", "show", "dev", BRIDGE]).stdout
    if f" {BRIDGE_ADDRESS}/{PREFIX_LEN} " not in addresses:
        run(["ip", "addr", "add", f"{BRIDGE_ADDRESS}/{PREFIX_LEN}", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])
    if not link_exists(FABRIC_BRIDGE):
        run(["ip", "link", "add", FABRIC_BRIDGE, "type", "bridge"])
    run(["ip", "link", "set", FABRIC_BRIDGE, "up"])


def _iptables_backends() -> list[str]:
    """`iptables`, plus `iptables-legacy` when the legacy filter table is in use: a DROP
    there (from an engine using the other backend) drops the frames whatever nft accepts."""
    backends = ["iptables"]
    try:
        legacy = "filter" in Path("/proc/net/ip_tables_names").read_text().split()
    except OSError:
        legacy = False
    if legacy and which("iptables-legacy") and os.path.realpath(which("iptables") or "") != os.path.realpath(
            which("iptables-legacy") or ""):
        backends.append("iptables-legacy")
    return backends


def ensure_forward_rule() -> None:
    for iptables in _iptables_backends():
        for rule in FORWARD_RULES:
            if run([iptables, "-C", *rule], check=False).returncode != 0:
                run([iptables, "-I", *rule])


def remove_forward_rule() -> None:
    for iptables in _iptables_backends():
        for rule in FORWARD_RULES:
            for _ in range(100):  # every copy, in case an interrupted up inserted it twice
                if run([iptables, "-D", *rule], check=False).returncode != 0:
                    break


def ensure_node(node: Node) -> None:
    """Create (or complete) the node's namespace, veth pair and addresses."""
    if not node.netns_path.exists():
        run(["ip", "netns", "add", node.netns])
    ns = ["ip", "-n", node.netns]
    if not link_exists(node.host_veth):
        run(["ip", "-n", node.netns, "link", "del", "eth0"], check=False)  # a stale half
        run(["ip", "link", "add", node.host_veth, "address", node.host_veth_mac, "type", "veth",
             "peer", "name", "eth0", "address", node.mac, "netns", node.netns])
    run(["ip", "link", "set", node.host_veth, "master", BRIDGE, "up"])
    addresses = run([*ns, "-o", "-4", "addr", "show", "dev", "eth0"]).stdout
    if f" {node.address}/{PREFIX_LEN} " not in addresses:
        run([*ns, "addr", "add", f"{node.address}/{PREFIX_LEN}", "dev", "eth0"])
    run([*ns, "link", "set", "eth0", "up"])
    run([*ns, "link", "set", "lo", "up"])
    _ensure_link(node, node.fabric_host_veth, node.fabric_ifname, node.fabric_mac, FABRIC_BRIDGE, node.fabric_address)
    if not node.is_bastion:
        _ensure_docker0(node)


def _ensure_link(node: Node, host_side: str, name: str, mac: str, bridge: str, address: str) -> None:
    ns = ["ip", "-n", node.netns]
    if not link_exists(host_side):
        run([*ns, "link", "del", name], check=False)  # a stale half
        run(["ip", "link", "add", host_side, "type", "veth", "peer", "name", name, "address", mac,
             "netns", node.netns])
    run(["ip", "link", "set", host_side, "master", bridge, "up"])
    if f" {address}/{PREFIX_LEN} " not in run([*ns, "-o", "-4", "addr", "show", "dev", name]).stdout:
        run([*ns, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", name])
    run([*ns, "link", "set", name, "up"])


def _ensure_docker0(node: Node) -> None:
    """An empty bridge, down like Docker's docker0 with no container on it (NO-CARRIER)."""
    ns = ["ip", "-n", node.netns]
    if run([*ns, "link", "show", "docker0"], check=False).returncode != 0:
        run([*ns, "link", "add", "docker0", "type", "bridge"])
    if f" {DOCKER0_ADDRESS}/{PREFIX_LEN} " not in run([*ns, "-o", "-4", "addr", "show", "dev", "docker0"]).stdout:
        run([*ns, "addr", "add", f"{DOCKER0_ADDRESS}/{PREFIX_LEN}", "dev", "docker0"])
    run([*ns, "link", "set", "docker0", "up"])


def netns_inode(node: Node) -> int | None:
    try:
        return os.stat(node.netns_path).st_ino
    except OSError:
        return None


def kill_node_processes(node: Node, timeout: float = 10.0) -> int:
    """Terminate every process left in the node's namespace (sessions, ranks, shims)."""
    inode = netns_inode(node)
    if inode is None:
        return 0
    return terminate(processes_in_netns(inode), timeout=timeout)


def remove_node(node: Node) -> None:
    """Delete the veth pair first: another daemon's mount namespace may still pin the netns."""
    for veth in (node.host_veth, node.fabric_host_veth):
        if link_exists(veth):
            run(["ip", "link", "del", veth], check=False)
    if node.netns_path.exists():
        run(["ip", "netns", "del", node.netns], check=False)


def remove_bridge() -> None:
    for bridge in (BRIDGE, FABRIC_BRIDGE):
        if link_exists(bridge):
            run(["ip", "link", "del", bridge], check=False)


def sandbox_netns_indexes() -> list[int]:
    """Indexes of the `cc-node*` namespaces that exist on this machine."""
    if not NETNS_DIR.is_dir():
        return []
    found = []
    for entry in os.listdir(NETNS_DIR):
        if entry == "cc-bastion":
            found.append(0)
        elif entry.startswith(NETNS_PREFIX):
            try:
                found.append(node_index("node" + entry[len(NETNS_PREFIX):]))
            except ValueError:
                continue
    return sorted(found)


def sandbox_veth_indexes() -> list[int]:
    found = []
    for entry in os.listdir("/sys/class/net"):
        if entry.startswith(("cc-v", "cc-f")) and entry[4:].isdigit():
            found.append(int(entry[4:]))
    return sorted(set(found))
