"""The facts the planner needs from every node, gathered in one round trip per node.

GPUs are counted where the ranks will run (inside the container when there is one), the
NIC and source address are those of the route to the master (`ip route get`), and the
hostname's resolution tells whether it sits on loopback. A node that is unreachable, or
whose container is not running, is a problem to report, not a fact.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from clusterctl.executor import Connections, for_each_host, run_commands
from clusterctl.models import Command, HostResult, HostStatus, Inventory
from clusterctl.job.container import in_container
from clusterctl.job.topology import NodeFacts
from clusterctl.transport import batch_command, split_batch


@dataclass(frozen=True)
class NodeProbe:
    """Parsed facts of one node, beyond what the planner needs (checks read them too)."""

    container_state: Optional[str]  # running | exited | absent | None (no container)
    gpus: object  # facts.GpuInventory
    route: object  # facts.RouteInfo
    interfaces: tuple  # facts.Interface
    hostname: object  # facts.HostnameResolution
    ib: object  # facts.IbStatus

    def node_facts(self, master_address: str) -> NodeFacts:
        return node_facts_from(self.gpus, self.route, self.interfaces, self.hostname, self.ib, master_address)


def node_facts_from(gpus, route, interfaces, hostname, ib, master_address: str) -> NodeFacts:
    """The planner's view of a node. On the master itself the route is local (dev lo):
    its NIC is then the interface that holds the master's address."""
    from clusterctl.preflight import facts

    nic, address = route.dev, route.src
    if route.local:
        interface = facts.interface_with_address(interfaces, master_address)
        nic, address = (interface.name, master_address) if interface else (None, None)
    hcas = tuple(ib.nccl_ib_hca.split(",")) if ib.nccl_ib_hca else ()
    return NodeFacts(gpu_ids=gpus.indices if gpus.count else None, nic=nic, address=address,
                     hostname_on_loopback=hostname.loopback_only, ib_hcas=hcas)


def probe_command(inventory: Inventory) -> Command:
    from clusterctl.preflight import facts

    sections = [
        ("gpus", Command(in_container(inventory, facts.NVIDIA_SMI_GPUS.argv))),
        ("route", facts.route_get_command(inventory.rendezvous_address)),
        ("addr", facts.IP_ADDR_PROBE),
        ("hostname", facts.HOSTNAME_RESOLUTION),
        ("ib_sysfs", facts.IB_SYSFS),
        ("ibstat", facts.IBSTAT),
    ]
    if inventory.uses_container:
        name = inventory.container.name
        sections.insert(0, ("container", Command(("docker", "inspect", "-f", "{{.State.Status}}", name))))
    return facts.in_c_locale(batch_command(sections, timeout=60))


def parse_probe(stdout: str, inventory: Inventory) -> NodeProbe:
    from clusterctl.preflight import facts

    sections = split_batch(stdout)
    state = None
    if inventory.uses_container:
        text = sections.get("container", "").strip()
        state = text if text in ("running", "exited", "created", "paused", "restarting", "dead") else "absent"
    return NodeProbe(
        container_state=state,
        gpus=facts.parse_gpu_csv(sections.get("gpus", "")),
        route=facts.parse_route_get(sections.get("route", "")),
        interfaces=facts.parse_ip_addr(sections.get("addr", "")),
        hostname=facts.parse_hostname_resolution(sections.get("hostname", "")),
        ib=facts.ib_status(sections.get("ib_sysfs", ""), sections.get("ibstat", "")),
    )


def probe_nodes(inventory: Inventory, connections: Connections) -> tuple[dict[str, NodeProbe], dict[str, HostResult]]:
    """(probes of the nodes that answered, results of those that did not)."""
    command = probe_command(inventory)
    results = for_each_host(list(inventory.hosts), lambda t, h: run_commands(t, h, [command]), connections)
    probes, problems = {}, {}
    for name, result in results.items():
        if result.succeeded:
            probes[name] = parse_probe(result.stdout, inventory)
        else:
            problems[name] = result
    return probes, problems


def gather_node_facts(inventory: Inventory, connections: Connections) -> tuple[dict[str, NodeFacts], dict[str, HostResult]]:
    """NodeFacts for the planner, and the nodes not ready to run (unreachable, no container)."""
    probes, problems = probe_nodes(inventory, connections)
    for name, probe in probes.items():
        if probe.container_state not in (None, "running"):
            problems[name] = HostResult(
                name, HostStatus.FAILED,
                f"container {inventory.container.name} is {probe.container_state} on {name} "
                "(was the node rebooted?). fix: run `clusterctl up` first",
            )
    master = inventory.rendezvous_address
    facts = {name: probe.node_facts(master) for name, probe in probes.items() if name not in problems}
    return facts, problems
