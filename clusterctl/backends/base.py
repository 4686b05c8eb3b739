"""One interface for every place a run can happen (in the spirit of torchx's scheduler API).

`plan()` is pure: from the inventory, the nodes' facts and the request it returns a `Plan`, frozen
and printable: what `run --plan` shows and what the exports render. Then `launch(plan)` runs it,
`describe(run_id)` says where a run stands, `logs(run_id)` reads its output, `stop(run_id)` ends it,
and `relaunch(plan)` stops what runs of the plan's run and launches the plan again as the next
attempt of the same run id (what a run that heals itself does). Implemented by SSH(+Docker) nodes
(nodes.py) and by a Slurm allocation (slurm.py); `backend_for` is the one place that chooses."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Iterator, Literal, Mapping, Optional, Protocol

from clusterctl.documents import parts
from clusterctl.documents.convert import as_document
from clusterctl.ground.run_record import RunState
from clusterctl.models import Host, Inventory

BackendName = Literal["nodes", "slurm"]


@dataclass(frozen=True)
class RunRequest:
    """What a user asks to run: the prompt and the options of `clusterctl run`."""

    prompt: str
    strict: bool = False
    timeout_s: Optional[float] = None
    stall_timeout_s: Optional[float] = None
    detach: bool = False
    straggler_watch: bool = True  # sample the ranks to name a straggler (watch/straggler_watch.py)
    heal_on_cluster: Optional[object] = None  # heal/detached.DetachedHealing (backends/healing.py sets it)
    wait: bool = False  # `run --wait`: queue for held GPU leases instead of being refused (run/leases.py)


@dataclass(frozen=True)
class PlannedNode:
    host: str
    node_rank: int
    ranks: tuple[int, int]  # the first and the last global rank
    gpus: Optional[tuple[int, ...]]
    nic: Optional[str]
    local_addr: Optional[str]
    command: Optional[str] = None  # the exact torchrun command line (nodes); None where a script holds it
    env: tuple[tuple[str, str], ...] = ()  # secrets masked

    def to_json(self) -> dict:
        return as_document(parts.PlannedNode, self)


@dataclass(frozen=True)
class Plan:
    """A run, decided and not yet started. `script`: the batch script a Slurm plan submits (the
    nodes are the allocation's, known only once granted). `attempt` counts launches of one run id."""

    backend: BackendName
    cluster: str
    run_id: Optional[str]
    world_size: int
    nproc_per_node: int
    nnodes: int
    nodes: tuple[PlannedNode, ...] = ()
    master: Optional[tuple[str, str, int]] = None  # (host, address, port)
    notes: tuple[str, ...] = ()
    script: Optional[str] = None
    attempt: int = 1
    commands_json: str = field(default="{}", repr=False)  # the per-node commands, secrets masked, as JSON text
    topology: object = field(default=None, repr=False, compare=False)  # plan/topology.py Topology (nodes)
    # what the launch carries out as it is (nodes): plan/launch_plan.py NodeLaunch per node, the prompt
    # expanded in them once, for the (run id, attempt) of `launches_for`, and the files shipped;
    # `checkpoint`: the one the attempt resumes from
    launches: tuple = field(default=(), repr=False, compare=False)
    launches_for: tuple = field(default=(), repr=False, compare=False)
    files: Mapping[str, bytes] = field(default_factory=dict, repr=False, compare=False)
    checkpoint: Optional[str] = None
    # an attached relaunch with job.checkpoint.replicas: {"step", "sources"} every host restores first (heal/replicas.py)
    restore: Optional[Mapping] = field(default=None, compare=False)

    def commands(self) -> dict:
        return json.loads(self.commands_json)

    def launches_as_planned(self) -> bool:
        """Whether `launches` are this plan's still (not one of another run id or attempt, made by replace)."""
        return bool(self.launches) and self.launches_for == (self.run_id, self.attempt)

    def next_attempt(self) -> "Plan":
        return replace(self, attempt=self.attempt + 1)

    def render(self) -> str:
        """The plan as plain text: the layout, the notes, then each node's command line (or the script)."""
        master = f", master {self.master[1]}:{self.master[2]}" if self.master else ""
        lines = [f"plan ({self.backend}): {self.nnodes} nodes x {self.nproc_per_node} = world size "
                 f"{self.world_size}{master}"]
        for node in self.nodes:
            gpus = "cpu" if node.gpus is None else ",".join(map(str, node.gpus))
            lines.append(f"  node {node.node_rank} {node.host}: ranks {node.ranks[0]}..{node.ranks[1]} gpus {gpus} "
                         f"nic {node.nic or '-'} addr {node.local_addr or '-'}")
        lines += [f"note: {note}" for note in self.notes]
        for node in self.nodes:
            if node.command:
                env = " ".join(f"{k}={v}" for k, v in node.env)
                lines += [f"{node.host} (env: {env})", f"  {node.command}"]
        if self.script:
            lines.append(self.script.rstrip("\n"))
        return "\n".join(lines)


def plan_of_topology(backend: BackendName, inventory: Inventory, topology, run_id: Optional[str],
                     commands: Mapping[str, dict], **decided) -> Plan:
    """The Plan of a planner's Topology (plan/topology.py) and the per-node commands (`decided`: what the
    launch carries out, Plan's launches, files, attempt and checkpoint)."""
    nodes = tuple(PlannedNode(n.host.name, n.node_rank, (n.ranks.start, n.ranks.stop - 1),
                              tuple(n.gpu_ids) if n.gpu_ids is not None else None, n.nic, n.local_addr,
                              commands.get(n.host.name, {}).get("command"),
                              tuple((commands.get(n.host.name, {}).get("env") or {}).items()))
                  for n in topology.nodes)
    return Plan(backend, inventory.name, run_id, topology.world_size, topology.nproc_per_node, topology.nnodes,
                nodes, (topology.master.host.name, topology.master_addr, topology.port), tuple(topology.notes),
                commands_json=json.dumps(dict(commands), sort_keys=True), topology=topology, **decided)


def recorded_hosts(hosts) -> list[dict]:
    """What a run record keeps of each host it ran on: enough to reach it again without the inventory."""
    return [{"name": h.name, "address": h.address, "user": h.ssh.user, "port": h.ssh.port,
             "connection": h.connection} for h in hosts]


def hosts_of_record(record: dict, inventory: Inventory) -> Optional[tuple[Host, ...]]:
    """The hosts a run record kept (None for a record of an older clusterctl): the inventory's host
    of that name where it has one (its full settings), else one rebuilt from the record."""
    kept = record.get("hosts")
    if not isinstance(kept, list) or not kept:
        return None
    known = {h.name: h for h in inventory.hosts}
    rebuilt = []
    for entry in kept:
        host = known.get(entry.get("name"))
        if host is None:
            ssh = replace(inventory.ssh, user=entry.get("user") or inventory.ssh.user,
                          port=entry.get("port") or inventory.ssh.port)
            host = Host(name=entry["name"], address=entry.get("address") or entry["name"], ssh=ssh,
                        connection=entry.get("connection") or "ssh")
        rebuilt.append(host)
    return tuple(rebuilt)


@dataclass(frozen=True)
class RunDescription:
    """Where a run stands (ground/run_record.py RunState, one of REPORTED), its exit code once ended, and
    the first failure named."""

    run_id: str
    state: RunState
    exit_code: Optional[int]
    first_failure: Optional[dict]
    backend: BackendName


class Backend(Protocol):
    """What every place a run can happen offers (nodes.py, slurm.py)."""

    name: BackendName

    def plan(self, inventory: Inventory, request: RunRequest, run_id: Optional[str],
             facts: Optional[Mapping] = None, attempt: int = 1, checkpoint: Optional[str] = None,
             topology=None) -> Plan: ...

    def launch(self, plan: Plan, request: RunRequest, inventory: Optional[Inventory] = None, live=None): ...

    def reach_soon(self, inventory: Inventory) -> None: ...

    def describe(self, run_id: str) -> RunDescription: ...

    def logs(self, run_id: str, follow: bool = False, **select) -> Iterator: ...

    def stop(self, run_id: str, given_inventory: Optional[str] = None): ...

    def relaunch(self, plan: Plan, request: RunRequest, inventory: Optional[Inventory] = None): ...
