"""Inventory + per-node facts -> Topology: who is master, which ranks run where.

Pure: no I/O, no clocks. Every decision that is not forced by the inventory is written
into `Topology.notes`, so `clusterctl run` can say *why* the job has the shape it has.

Rules (the seeds' failures are the reasons for them):
- The master is `rendezvous.master` or the first host. It is node_rank 0 and holds
  global ranks 0..k-1; the other hosts follow in inventory order.
- torchrun needs the same nproc on every node. `nproc_per_node: auto` takes the GPUs
  each node exposes, and the minimum of them when they differ (noted). An explicit
  count larger than a node's GPUs is refused: it is `CUDA error: invalid device
  ordinal` waiting to happen.
- `world_size_divides: D` (e.g. 40 attention heads with Ulysses sequence parallelism,
  where ulysses_size = world size): with `auto`, the largest uniform per-node count
  whose world size divides D is taken (noted); `strict=True` or an explicit count
  raises instead, listing the counts that would work.
- GPU selection (`gpus:` on the host, else on the container) is read two ways. On the
  bare host (no Docker container) the ids are device ordinals of the machine and the
  ranks are pinned with CUDA_VISIBLE_DEVICES. Inside a container Docker applies the
  selection and renumbers what it exposes from 0, so only the count matters there.
  Either way `NodePlan.gpu_ids` are ordinals as the ranks see them, before
  CUDA_VISIBLE_DEVICES, and CUDA_VISIBLE_DEVICES is set only when the ranks must not
  see everything that is visible to them.
- Nodes that are one machine (local hosts, or hosts with the same address) must not
  share a GPU: that is `Duplicate GPU detected` in NCCL.
- Environment: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME name the node's interface
  (host `nic:` wins over the detected one), NCCL_IB_HCA lists the HCAs when there
  are any. Explicit settings win over derived ones: container env (already in the
  container, so not exported again), then job env, then host env.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Mapping, Optional, Union

from clusterctl.errors import TopologyError
from clusterctl.models import Host, Inventory

# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class NodeFacts:
    """What was learned on one node before planning. None means unknown."""

    gpu_ids: Optional[tuple[int, ...]] = None  # ordinals visible where ranks run; None/() = CPU-only
    nic: Optional[str] = None  # interface that routes to the master
    address: Optional[str] = None  # source address on that interface
    hostname_on_loopback: bool = False  # `hostname` resolves to 127.x (Debian /etc/hosts style)
    ib_hcas: tuple[str, ...] = ()  # InfiniBand HCAs with an active port
    torch: Optional[str] = None  # torch's version where the ranks run (it names some of torch's settings)


@dataclass(frozen=True)
class NodePlan:
    host: Host
    node_rank: int
    nproc: int
    first_rank: int
    gpu_ids: Optional[tuple[int, ...]]  # ordinals the ranks use (pre CUDA_VISIBLE_DEVICES); None on CPU
    nic: Optional[str]
    local_addr: str
    is_master: bool
    env: tuple[tuple[str, str], ...]
    torch: Optional[str] = None  # NodeFacts.torch

    @property
    def ranks(self) -> range:
        return range(self.first_rank, self.first_rank + self.nproc)

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


@dataclass(frozen=True)
class Topology:
    nodes: tuple[NodePlan, ...]
    world_size: int
    nproc_per_node: int
    master_addr: str
    port: int
    notes: tuple[str, ...] = ()
    join_timeout: int = 120

    @property
    def nnodes(self) -> int:
        return len(self.nodes)

    @property
    def master(self) -> NodePlan:
        return self.nodes[0]

    @property
    def uses_gpus(self) -> bool:
        return self.nodes[0].gpu_ids is not None

    def node(self, host_name: str) -> NodePlan:
        for plan_ in self.nodes:
            if plan_.host.name == host_name:
                return plan_
        raise KeyError(host_name)

    def rank_of(self, host_name: str) -> range:
        return self.node(host_name).ranks

    def host_of_rank(self, rank: int) -> NodePlan:
        for plan_ in self.nodes:
            if rank in plan_.ranks:
                return plan_
        raise KeyError(rank)


# --------------------------------------------------------------------------- GPUs


@dataclass(frozen=True)
class _GpuView:
    """One node's GPUs: what its ranks would see, what the job may use, physical ids."""

    seen: tuple[int, ...]  # ordinals visible to the ranks without CUDA_VISIBLE_DEVICES
    usable: tuple[int, ...]  # the selection, as ordinals the ranks see
    physical: Mapping[int, int]  # ordinal -> device id on the machine (for overlap checks)


def _selection(inv: Inventory, host: Host) -> Union[str, int, tuple]:
    if host.gpus is not None:
        return host.gpus
    if inv.container is not None:
        return inv.container.gpus
    return "all"


def _normalise_selection(sel: Union[str, int, tuple, list], host: Host) -> Union[str, int, tuple]:
    if isinstance(sel, (list, tuple)):
        return tuple(int(i) for i in sel)
    if isinstance(sel, bool):  # YAML `gpus: yes` is not a count
        raise TopologyError(f"gpus: {sel!r} is not a GPU selection", f"hosts.{host.name}.gpus", "use all, none, a count or a list of ids")
    if isinstance(sel, int):
        return sel
    text = str(sel).strip().lower()
    if text in ("all", "none"):
        return text
    if text.isdigit():
        return int(text)
    if text.startswith("device="):
        return tuple(int(i) for i in text[len("device="):].split(",") if i.strip())
    raise TopologyError(f"gpus: {sel!r} is not a GPU selection", f"hosts.{host.name}.gpus", "use all, none, a count or a list of ids")


def _gpu_view(inv: Inventory, host: Host, facts: NodeFacts) -> Optional[_GpuView]:
    """None when the node runs CPU ranks."""
    sel = _normalise_selection(_selection(inv, host), host)
    if sel == "none" or sel == 0 or sel == () or not facts.gpu_ids:
        return None
    visible = tuple(facts.gpu_ids)
    where = f"hosts.{host.name}.gpus"
    if isinstance(sel, int):
        if sel > len(visible):
            raise TopologyError(
                f"host {host.name} asks for {sel} GPUs but exposes {len(visible)} ({_ids(visible)})",
                where, f"set gpus: {len(visible)} (or fewer) for {host.name}")
        chosen = tuple(sorted(visible))[:sel]
        if inv.uses_container:  # docker --gpus N exposes the first N, numbered 0..N-1
            seen = tuple(range(sel))
            return _GpuView(seen, seen, {i: i for i in seen})
        return _GpuView(visible, chosen, {i: i for i in chosen})
    if isinstance(sel, tuple):
        if inv.uses_container:  # Docker renumbers the selected devices from 0
            if len(visible) < len(sel):
                raise TopologyError(
                    f"host {host.name} selects GPUs {_ids(sel)} but only {len(visible)} are visible ({_ids(visible)})",
                    where, f"select at most {len(visible)} GPUs on {host.name}")
            seen = tuple(range(len(sel)))
            return _GpuView(seen, seen, dict(zip(seen, sel)))
        missing = [i for i in sel if i not in visible]
        if missing:
            raise TopologyError(
                f"host {host.name} selects GPUs {_ids(sel)} but GPU {_ids(missing)} is not visible there (visible: {_ids(visible)})",
                where, f"select among {_ids(visible)} on {host.name}")
        return _GpuView(visible, sel, {i: i for i in sel})
    return _GpuView(visible, visible, {i: i for i in visible})


def _ids(ids) -> str:
    return ",".join(str(i) for i in ids) if ids else "none"


# --------------------------------------------------------------------------- nproc


def _uniform_nproc(inv: Inventory, order: tuple[Host, ...], views: Mapping[str, Optional[_GpuView]], notes: list[str]) -> int:
    job = inv.job
    requested = job.nproc_per_node
    if isinstance(requested, str) and requested.strip().isdigit():
        requested = int(requested.strip())
    if isinstance(requested, str) and requested.strip().lower() != "auto":
        raise TopologyError(f"nproc_per_node: {requested!r} is neither a count nor auto", "job.nproc_per_node", "use auto or a positive integer")
    if isinstance(requested, int) and requested < 1:
        raise TopologyError(f"nproc_per_node: {requested} must be at least 1", "job.nproc_per_node", "use auto or a positive integer")

    gpu_hosts = [h for h in order if views[h.name] is not None]
    cpu_hosts = [h for h in order if views[h.name] is None]
    if gpu_hosts and cpu_hosts:
        raise TopologyError(
            f"hosts {', '.join(h.name for h in cpu_hosts)} expose no GPUs while {', '.join(h.name for h in gpu_hosts)} do",
            "hosts", "check nvidia-smi and the container's gpus: setting on the GPU-less hosts, or leave them out with --limit")

    if not gpu_hosts:
        if isinstance(requested, int):
            over = [h.name for h in order if h.slots is not None and requested > h.slots]
            if over:
                notes.append(f"nproc_per_node {requested} exceeds the slots of {', '.join(over)}")
            notes.append(f"CPU-only nodes: {requested} rank(s) per node as job.nproc_per_node says")
            return requested
        caps = {h.name: (h.slots or 1) for h in order}
        nproc = min(caps.values())
        if len(set(caps.values())) > 1:
            notes.append(f"CPU-only nodes with unequal slots ({_caps(caps)}): {nproc} per node, torchrun needs the same count on every node")
        else:
            notes.append(f"CPU-only nodes: nproc_per_node auto = {nproc} ({'slots' if order[0].slots else 'one rank per node'})")
        return nproc

    caps = {h.name: len(views[h.name].usable) for h in gpu_hosts}
    if isinstance(requested, int):
        for host in gpu_hosts:
            if requested > caps[host.name]:
                raise TopologyError(
                    f"nproc_per_node {requested} but host {host.name} exposes only {caps[host.name]} GPU(s) "
                    f"(GPU ids: {_ids(views[host.name].usable)}): ranks beyond them die with 'CUDA error: invalid "
                    "device ordinal'",
                    f"job.nproc_per_node / hosts.{host.name}",
                    f"set job.nproc_per_node to {min(caps.values())} (or auto), or give {host.name} more GPUs")
        return requested
    nproc = min(caps.values())
    if len(set(caps.values())) > 1:
        idle = sum(caps.values()) - nproc * len(caps)
        notes.append(f"unequal GPUs per node ({_caps(caps)}): {nproc} per node, torchrun needs the same count on every node; {idle} GPU(s) idle")
    else:
        notes.append(f"nproc_per_node auto = {nproc} (GPUs per node)")
    return nproc


def _caps(caps: Mapping[str, int]) -> str:
    return ", ".join(f"{name}: {n}" for name, n in caps.items())


def _fit_divisor(inv: Inventory, nnodes: int, nproc: int, strict: bool, notes: list[str]) -> int:
    divides = inv.job.world_size_divides
    if not divides:
        return nproc
    if divides < 1:
        raise TopologyError(f"world_size_divides: {divides} must be positive", "job.world_size_divides", "give the count the world size must divide, e.g. the number of attention heads")
    world = nnodes * nproc
    if divides % world == 0:
        notes.append(f"world size {world} divides {divides}")
        return nproc
    options = [k for k in range(nproc, 0, -1) if divides % (nnodes * k) == 0]
    what = f"world size {world} ({nnodes} node(s) x {nproc}) does not divide world_size_divides={divides}"
    explicit = not (isinstance(inv.job.nproc_per_node, str) and inv.job.nproc_per_node.strip().lower() == "auto")
    if not options:
        raise TopologyError(what + "; no per-node count on these hosts fixes it", "job.world_size_divides", _fewer_nodes_fix(divides, nnodes, nproc))
    if strict or explicit:
        listed = _or_list([f"{k} (world {nnodes * k})" for k in options])
        raise TopologyError(what, "job.nproc_per_node", f"set nproc_per_node {listed}")
    chosen = options[0]
    notes.append(f"{what}: using {chosen} per node (world {nnodes * chosen}), the largest count whose world size divides {divides}")
    return chosen


def _fewer_nodes_fix(divides: int, nnodes: int, nproc: int) -> str:
    for m in range(nnodes - 1, 0, -1):
        for k in range(nproc, 0, -1):
            if divides % (m * k) == 0:
                return f"use {m} host(s) x {k} (world {m * k}), e.g. with --limit, or change world_size_divides"
    return "change world_size_divides"


def _or_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


# --------------------------------------------------------------------------- addresses


def _is_loopback(addr: str) -> bool:
    if addr.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def _local_addr(host: Host, facts: NodeFacts) -> str:
    addr = facts.address or host.address
    if host.is_local and (not addr or addr.lower() == "localhost"):
        return "127.0.0.1"
    return addr


def _master_addr(order: tuple[Host, ...], address: Optional[str] = None) -> str:
    """Where the ranks reach the master: `rendezvous.address` when set, else the master's address."""
    master = order[0]
    if address is not None:
        return address
    if all(h.is_local for h in order):
        return master.address if _is_loopback(master.address) and master.address != "localhost" else "127.0.0.1"
    if _is_loopback(master.address):
        remote = [h.name for h in order if not h.is_local]
        raise TopologyError(
            f"master {master.name} has the loopback address {master.address}, which {', '.join(remote)} cannot reach",
            f"hosts.{master.name}.address", f"give {master.name} the address the other hosts reach it on")
    return master.address


# --------------------------------------------------------------------------- plan


def _order(inv: Inventory) -> tuple[Host, ...]:
    if not inv.hosts:
        raise TopologyError("the inventory has no hosts", "hosts", "list at least one host")
    try:
        master = inv.master
    except KeyError:
        raise TopologyError(
            f"rendezvous master {inv.rendezvous.master!r} is not a host of the inventory", "rendezvous.master",
            f"name one of {', '.join(h.name for h in inv.hosts)}") from None
    return (master,) + tuple(h for h in inv.hosts if h.name != master.name)


def _check_port(inv: Inventory) -> None:
    port = inv.rendezvous.port
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise TopologyError(f"rendezvous port {port!r} is not a usable TCP port", "rendezvous.port", "use a fixed free port such as 29500")


def _machine_key(host: Host) -> str:
    return "local" if host.is_local else host.address.lower()


def _check_gpu_overlap(nodes: list[tuple[Host, tuple[int, ...]]]) -> None:
    """Nodes on one machine must use disjoint physical GPUs."""
    owner: dict[tuple[str, int], str] = {}
    for host, physical in nodes:
        for gpu in physical:
            key = (_machine_key(host), gpu)
            if key in owner:
                raise TopologyError(
                    f"hosts {owner[key]} and {host.name} are the same machine and both would use GPU {gpu} (NCCL: Duplicate GPU detected)",
                    f"hosts.{host.name}.gpus", f"give {owner[key]} and {host.name} disjoint gpus: lists, e.g. [0, 1] and [2, 3]")
            owner[key] = host.name


def _node_env(inv: Inventory, host: Host, nic: Optional[str], facts: NodeFacts, cvd: Optional[str], notes: list[str]) -> tuple[tuple[str, str], ...]:
    derived: dict[str, str] = {}
    if nic:
        derived["NCCL_SOCKET_IFNAME"] = nic
        derived["GLOO_SOCKET_IFNAME"] = nic
    if inv.checks.ib == "off":  # the user chose TCP: NCCL must not try HCAs (even half-working ones)
        derived["NCCL_IB_DISABLE"] = "1"
    elif facts.ib_hcas:
        derived["NCCL_IB_HCA"] = ",".join(facts.ib_hcas)
    if cvd is not None:
        derived["CUDA_VISIBLE_DEVICES"] = cvd
    if inv.uses_container:
        for var in inv.container.env:
            if var.name in derived:
                notes.append(f"{host.name}: container env sets {var.name}, keeping it instead of {derived[var.name]!r}")
                del derived[var.name]
    env = dict(derived)
    for var in tuple(inv.job.env) + tuple(host.env):
        if var.name in derived and derived[var.name] != var.value:
            notes.append(f"{host.name}: {var.name} from the inventory overrides the derived {derived[var.name]!r}")
        env[var.name] = var.value
    return tuple(env.items())


def plan(inv: Inventory, facts: Mapping[str, NodeFacts], strict: bool = False) -> Topology:
    """Lay the job out on the inventory's hosts; raise TopologyError when it cannot run."""
    _check_port(inv)
    order = _order(inv)
    notes: list[str] = []
    node_facts = {h.name: facts.get(h.name) or NodeFacts() for h in order}
    views = {h.name: _gpu_view(inv, h, node_facts[h.name]) for h in order}
    for host in order:
        sel = host.gpus if host.gpus is not None else None
        if views[host.name] is None and sel not in (None, "none", 0) and not node_facts[host.name].gpu_ids:
            notes.append(f"{host.name} selects GPUs {sel!r} but none were detected: planning CPU ranks")
    nproc = _uniform_nproc(inv, order, views, notes)
    nproc = _fit_divisor(inv, len(order), nproc, strict, notes)
    master_addr = _master_addr(order, inv.rendezvous.address)

    plans: list[NodePlan] = []
    physical: list[tuple[Host, tuple[int, ...]]] = []
    for node_rank, host in enumerate(order):
        f = node_facts[host.name]
        nic = host.nic or f.nic
        if not all(h.is_local for h in order):  # all on this machine: loopback is the right network
            _check_interface(host, f, nic, len(order), notes)
        view = views[host.name]
        gpu_ids, cvd = None, None
        if view is not None:
            gpu_ids = view.usable[:nproc]
            if gpu_ids != view.seen:
                cvd = _ids(gpu_ids)
                notes.append(f"{host.name}: CUDA_VISIBLE_DEVICES={cvd} (of visible {_ids(view.seen)})")
            physical.append((host, tuple(view.physical[i] for i in gpu_ids)))
        plans.append(NodePlan(
            host=host, node_rank=node_rank, nproc=nproc, first_rank=node_rank * nproc, gpu_ids=gpu_ids,
            nic=nic, local_addr=_local_addr(host, f), is_master=node_rank == 0,
            env=_node_env(inv, host, nic, f, cvd, notes), torch=f.torch))
    _check_gpu_overlap(physical)
    world = nproc * len(order)
    notes.insert(0, f"master {order[0].name} ({master_addr}:{inv.rendezvous.port}) holds ranks 0..{nproc - 1}; "
                    f"{len(order)} node(s) x {nproc} = world size {world}")
    return Topology(nodes=tuple(plans), world_size=world, nproc_per_node=nproc, master_addr=master_addr,
                    port=inv.rendezvous.port, notes=tuple(notes), join_timeout=inv.rendezvous.join_timeout)


def _check_interface(host: Host, facts: NodeFacts, nic: Optional[str], nnodes: int, notes: list[str]) -> None:
    if nnodes < 2:
        return
    if facts.hostname_on_loopback and not nic:
        raise TopologyError(
            f"the hostname of {host.name} resolves to loopback and no network interface is known for it: "
            "Gloo would bind 127.0.x and ranks on other nodes would hang",
            f"hosts.{host.name}", f"set nic: <interface that reaches the master> for {host.name}, or map its hostname to its real address in /etc/hosts")
    if facts.hostname_on_loopback:
        notes.append(f"{host.name}: hostname resolves to loopback; GLOO/NCCL_SOCKET_IFNAME={nic} and explicit addresses avoid that trap")
    elif not nic:
        notes.append(f"{host.name}: no network interface known; NCCL and Gloo will pick one themselves (they may pick docker0)")
