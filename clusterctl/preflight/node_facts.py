"""The facts the planner needs from every node, gathered in one round trip per node.

GPUs are counted where the ranks will run (inside the container when there is one), the
NIC and source address are those of the route to the master (`ip route get`), and the
hostname's resolution tells whether it sits on loopback. A node that is unreachable, or
whose container is not running, is a problem to report, not a fact.

`up` probes every node anyway (its preflight); what the planner needs of that is remembered
(`remember`), and `run` reuses it for a node as long as it is still valid (`recall`, `still_valid`):
the same inventory, the same boot of the node, the same start of the same container, and at most
FACTS_TTL_S old. A node that fails any of these is probed again.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

from clusterctl.executor import Connections, for_each_host, run_commands
from clusterctl.models import Command, Host, HostResult, HostStatus, Inventory
from clusterctl.plan.container import in_container
from clusterctl.plan.topology import NodeFacts
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
    torch: Optional[str] = None  # torch's version where the ranks run

    def node_facts(self, master_address: str) -> NodeFacts:
        return node_facts_from(self.gpus, self.route, self.interfaces, self.hostname, self.ib, master_address, self.torch)


def node_facts_from(gpus, route, interfaces, hostname, ib, master_address: str, torch: Optional[str] = None) -> NodeFacts:
    """The planner's view of a node. On the master itself the route is local (dev lo):
    its NIC is then the interface that holds the master's address."""
    from clusterctl.preflight import facts

    nic, address = route.dev, route.src
    if route.local:
        interface = facts.interface_with_address(interfaces, master_address)
        nic, address = (interface.name, master_address) if interface else (None, None)
    hcas = tuple(ib.nccl_ib_hca.split(",")) if ib.nccl_ib_hca else ()
    return NodeFacts(gpu_ids=gpus.indices if gpus.count else None, nic=nic, address=address,
                     hostname_on_loopback=hostname.loopback_only, ib_hcas=hcas, torch=torch)


def probe_command(inventory: Inventory) -> Command:
    from clusterctl.preflight import facts

    sections = [
        ("gpus", Command(in_container(inventory, facts.NVIDIA_SMI_GPUS.argv))),
        ("route", facts.route_get_command(inventory.rendezvous_address)),
        ("addr", facts.IP_ADDR_PROBE),
        ("hostname", facts.HOSTNAME_RESOLUTION),
        ("ib_sysfs", facts.IB_SYSFS),
        ("ibstat", facts.IBSTAT),
        ("versions", Command(in_container(inventory, facts.versions_command(inventory.job.python).argv))),
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
        torch=facts.parse_versions(sections.get("versions", "")).torch,
    )


def gather_node_facts(inventory: Inventory, connections: Connections, hosts: Optional[Sequence[Host]] = None
                      ) -> tuple[dict[str, NodeFacts], dict[str, HostResult]]:
    """NodeFacts for the planner, and the nodes not ready to run (unreachable, no container);
    of every node, or of `hosts`."""
    command = probe_command(inventory)
    results = for_each_host(list(inventory.hosts if hosts is None else hosts),
                            lambda t, h: run_commands(t, h, [command]), connections)
    return facts_of(inventory, results)


def facts_of(inventory: Inventory, results: dict[str, HostResult]) -> tuple[dict[str, NodeFacts], dict[str, HostResult]]:
    """`gather_node_facts` from each node's result of probe_command (alone, or a section of a larger batch)."""
    probes, problems = {}, {}
    for name, result in results.items():
        if not result.succeeded:
            problems[name] = result
            continue
        probe = probes[name] = parse_probe(result.stdout, inventory)
        if probe.container_state not in (None, "running"):
            problems[name] = HostResult(
                name, HostStatus.FAILED,
                f"container {inventory.container.name} is {probe.container_state} on {name} "
                "(was the node rebooted?). fix: run `clusterctl up` first",
            )
    master = inventory.rendezvous_address
    facts = {name: probe.node_facts(master) for name, probe in probes.items() if name not in problems}
    return facts, problems


# --------------------------------------------------------------------------- remembered from `up`

FACTS_TTL_S = 24 * 3600  # as Ansible's fact cache (fact_caching_timeout: 86400)


@dataclass(frozen=True)
class RememberedFacts:
    """A node's planner facts as `up` learned them, and the instance they hold for."""

    key: str  # instance_key: the node's boot and its container's start
    facts: NodeFacts
    learned: float  # time.time()


def instance_key(boot_id: str, container_instance: Optional[str]) -> str:
    """`container_instance`: "<Id> <StartedAt>" of the running container ("" without a container)."""
    return f"{boot_id.strip()}|{(container_instance or '').strip()}"


def instance_command(inventory: Inventory) -> Command:
    """What `instance_key` is made of, read in one light round trip (no nvidia-smi, no docker exec)."""
    from clusterctl.preflight import facts

    sections = [("boot_id", facts.BOOT_ID)]
    if inventory.uses_container:
        sections.append(("container", Command(("docker", "inspect", "--type", "container", "-f",
                                               "{{.Id}} {{.State.StartedAt}} {{.State.Running}}",
                                               inventory.container.name), ok_exit_codes=(0, 1))))
    return facts.in_c_locale(batch_command(sections, timeout=30))


def parse_instance(stdout: str, inventory: Inventory) -> Optional[str]:
    """The node's instance_key, or None when its container does not run (or nothing was read)."""
    sections = split_batch(stdout)
    boot_id = sections.get("boot_id", "").strip()
    if not boot_id:
        return None
    if not inventory.uses_container:
        return instance_key(boot_id, "")
    fields = sections.get("container", "").split()
    if len(fields) != 3 or fields[2] != "true":
        return None
    return instance_key(boot_id, f"{fields[0]} {fields[1]}")


def node_fingerprint(inventory: Inventory, host: Host) -> str:
    """What a node's facts depend on: the host as written (address, GPUs, NIC...), the container,
    the rendezvous address (the route to it). Editing the job alone keeps the facts."""
    text = repr((host, inventory.container, inventory.rendezvous_address))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def facts_path(state, inventory: Inventory):
    return state.root / "facts" / f"{inventory.name}.json"


def _read(state, inventory: Inventory) -> dict:
    try:
        document = state.read_json(facts_path(state, inventory))
    except (OSError, ValueError):  # none yet, or unreadable: probe
        return {}
    nodes = document.get("nodes") if isinstance(document, dict) else None
    return nodes if isinstance(nodes, dict) else {}


def remember(state, inventory: Inventory, remembered: dict[str, RememberedFacts]) -> None:
    """Keep what `up` learned of these nodes (the others' records stay: `up --limit`)."""
    hosts = {h.name: h for h in inventory.hosts}
    nodes = _read(state, inventory)
    nodes.update({name: {"key": r.key, "learned": r.learned, "inventory": node_fingerprint(inventory, hosts[name]),
                         "facts": asdict(r.facts)} for name, r in remembered.items() if name in hosts})
    state.write_json(facts_path(state, inventory), {"nodes": nodes})


def recall(state, inventory: Inventory, now: Optional[float] = None) -> dict[str, RememberedFacts]:
    """What `up` remembered of this inventory's nodes, written as they are now and younger than
    FACTS_TTL_S ({} when nothing holds)."""
    now = time.time() if now is None else now
    nodes = _read(state, inventory)
    out = {}
    for host in inventory.hosts:
        node = nodes.get(host.name)
        try:
            f = node["facts"]
            facts = NodeFacts(gpu_ids=tuple(f["gpu_ids"]) if f.get("gpu_ids") is not None else None, nic=f.get("nic"),
                              address=f.get("address"), hostname_on_loopback=bool(f.get("hostname_on_loopback")),
                              ib_hcas=tuple(f.get("ib_hcas") or ()), torch=f.get("torch"))
            remembered = RememberedFacts(str(node["key"]), facts, float(node["learned"]))
            fingerprint = node["inventory"]
        except (KeyError, TypeError, ValueError):  # none, or written by another version: probe instead
            continue
        if fingerprint == node_fingerprint(inventory, host) and 0 <= now - remembered.learned <= FACTS_TTL_S:
            out[host.name] = remembered
    return out


def still_valid(remembered: dict[str, RememberedFacts], instances: dict[str, Optional[str]]) -> dict[str, NodeFacts]:
    """The remembered facts of the nodes whose boot and container are the ones `up` saw."""
    return {name: r.facts for name, r in remembered.items() if instances.get(name) == r.key}
