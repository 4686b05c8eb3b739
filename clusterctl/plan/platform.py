"""Platform variables -> this node's place in the job. Pure: a mapping in, values out.

Platforms that start one copy of a command on every node (Kubeflow's PyTorchJob, the
seeds' commercial container platform, anything that imitates torchrun) tell each copy
who it is through environment variables, and they do not agree on what the two
central ones mean:

| platform (`--platform`) | WORLD_SIZE | RANK | also read |
|---|---|---|---|
| `pytorchjob` (Kubeflow training operator v1) | pods x int(nprocPerNode), or pods when nprocPerNode is auto/gpu/cpu (operators before v1.7: pods) | pod index: Master 0, Worker i -> i+1 | PET_NNODES (pods), PET_NODE_RANK (= RANK), PET_NPROC_PER_NODE (nprocPerNode as written), MASTER_ADDR = `<job>-master-0`, MASTER_PORT = the `pytorchjob-port` |
| `nodes` (the seeds' platform, `clusterctl export job`) | number of nodes | node index | MASTER_ADDR, MASTER_PORT |
| `torchrun` (torchrun's own convention) | total ranks | global rank | LOCAL_WORLD_SIZE (ranks per node), LOCAL_RANK (must be 0), GROUP_RANK (node index) |

`auto` picks `pytorchjob` when any PET_NNODES / PET_NODE_RANK / PET_NPROC_PER_NODE is
set (the operator v1.7+ always sets them), else `torchrun` when LOCAL_WORLD_SIZE or
GROUP_RANK is set, else `nodes` (which is also what operators before v1.7 mean).

The PyTorchJob meanings were read from kubeflow/training-operator
`pkg/controller.v1/pytorch/envvar.go` (release 1.9: `WORLD_SIZE = totalReplicas *
getNprocPerNodeInt(job)`, the latter 1 unless nprocPerNode is an integer;
`RANK = PET_NODE_RANK = index (+1 for workers)`; `PET_NNODES = totalReplicas` without
elasticPolicy) and `master.go` (`MASTER_ADDR = <job>-master-0`).
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, replace
from typing import Mapping, Optional

from clusterctl.errors import TopologyError, UsageError
from clusterctl.models import Host, Inventory, RendezvousSpec
from clusterctl.plan.topology import NodeFacts, Topology, plan

PLATFORMS = ("pytorchjob", "nodes", "torchrun")
_PET_MARKERS = ("PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE")
_TORCHRUN_MARKERS = ("LOCAL_WORLD_SIZE", "GROUP_RANK")
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class NodeIdentity:
    """Who this node is, in the platform's words turned into ours."""

    platform: str
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    nproc_per_node: Optional[int]  # fixed by the platform (PET_NPROC_PER_NODE, LOCAL_WORLD_SIZE), else None
    variables: tuple[tuple[str, str], ...]  # the variables read, as found
    notes: tuple[str, ...] = ()

    @property
    def is_master(self) -> bool:
        return self.node_rank == 0

    @property
    def node_name(self) -> str:
        return node_name(self.node_rank)

    def describe(self) -> str:
        return (f"platform {self.platform}: node {self.node_rank} of {self.nnodes}, master "
                f"{self.master_addr}:{self.master_port} (" + ", ".join(f"{k}={v}" for k, v in self.variables) + ")")


def node_name(rank: int) -> str:
    return f"node-{rank}"


# --------------------------------------------------------------------------- reading


def detect_platform(env: Mapping[str, str]) -> tuple[str, str]:
    """(platform, why) for `--platform auto`."""
    pet = [name for name in _PET_MARKERS if env.get(name)]
    if pet:
        return "pytorchjob", f"{', '.join(pet)} set (Kubeflow PyTorchJob)"
    local = [name for name in _TORCHRUN_MARKERS if env.get(name)]
    if local:
        return "torchrun", f"{', '.join(local)} set: WORLD_SIZE counts ranks (torchrun convention)"
    return "nodes", ("no PET_* or LOCAL_WORLD_SIZE: WORLD_SIZE read as the number of nodes and RANK as the node "
                     "index (pass --platform torchrun if WORLD_SIZE counts ranks)")


def node_identity(env: Mapping[str, str], platform: str = "auto") -> NodeIdentity:
    """This node's identity from the platform's variables; UsageError says what is missing or odd."""
    notes: list[str] = []
    if platform == "auto":
        platform, why = detect_platform(env)
        notes.append(f"--platform auto chose {platform}: {why}")
    if platform not in PLATFORMS:
        raise UsageError(f"unknown platform {platform!r}", "--platform", f"use one of {', '.join(PLATFORMS)} or auto")
    reader = {"pytorchjob": _pytorchjob, "nodes": _nodes, "torchrun": _torchrun}[platform]
    seen: dict[str, str] = {}
    addr = _text(env, "MASTER_ADDR", platform, seen)
    port = _int(env, "MASTER_PORT", platform, seen, low=1, high=65535)
    nnodes, node_rank, nproc = reader(env, seen, notes)
    if not 0 <= node_rank < nnodes:
        raise UsageError(
            f"this node's rank {node_rank} is outside 0..{nnodes - 1} ({_shown(seen)})", platform,
            f"the platform started more nodes than WORLD_SIZE says, or --platform {platform} misreads its variables: "
            "see docs/platforms.md for what each platform means by WORLD_SIZE and RANK")
    return NodeIdentity(platform, nnodes, node_rank, addr, port, nproc, tuple(seen.items()), tuple(notes))


def _nodes(env, seen, notes) -> tuple[int, int, Optional[int]]:
    nnodes = _int(env, "WORLD_SIZE", "nodes", seen, low=1)
    return nnodes, _int(env, "RANK", "nodes", seen), None


def _pytorchjob(env, seen, notes) -> tuple[int, int, Optional[int]]:
    nproc_text = _optional(env, "PET_NPROC_PER_NODE", seen)
    nproc = _nproc_value(nproc_text, notes)
    world = _optional_int(env, "WORLD_SIZE", "pytorchjob", seen)
    nnodes_text = _optional(env, "PET_NNODES", seen)
    if nnodes_text is not None:
        nnodes = _fixed_nnodes(nnodes_text)
        if world is not None and world not in {nnodes, nnodes * (nproc or 1)}:
            raise UsageError(
                f"WORLD_SIZE={world} is neither PET_NNODES={nnodes} nor PET_NNODES x PET_NPROC_PER_NODE "
                f"({nnodes} x {nproc_text})", "pytorchjob", "these variables come from the training operator; "
                "a WORLD_SIZE set by hand in the pod spec overrides them: remove it")
    elif world is not None:
        nnodes = world
        notes.append(f"no PET_NNODES (training operator before v1.7): WORLD_SIZE={world} read as the number of pods")
    else:
        raise UsageError("neither PET_NNODES nor WORLD_SIZE is set", "pytorchjob",
                         "run under a PyTorchJob with a Master replica (the operator sets them), or pick --platform")
    rank = _optional_int(env, "PET_NODE_RANK", "pytorchjob", seen)
    if rank is None:
        rank = _int(env, "RANK", "pytorchjob", seen)
    elif env.get("RANK") not in (None, "") and _optional_int(env, "RANK", "pytorchjob", seen) != rank:
        notes.append(f"RANK={env['RANK']} differs from PET_NODE_RANK={rank}: using PET_NODE_RANK")
    return nnodes, rank, nproc


def _torchrun(env, seen, notes) -> tuple[int, int, Optional[int]]:
    world = _int(env, "WORLD_SIZE", "torchrun", seen, low=1)
    local_world = _int(env, "LOCAL_WORLD_SIZE", "torchrun", seen, low=1)
    rank = _int(env, "RANK", "torchrun", seen)
    if world % local_world:
        raise UsageError(f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local_world}", "torchrun",
                         "every node must run the same number of ranks; check the platform's job spec")
    local_rank = _optional_int(env, "LOCAL_RANK", "torchrun", seen)
    if (local_rank or 0) != 0 or rank % local_world:
        raise UsageError(
            f"this process is rank {rank} (LOCAL_RANK={local_rank}), not the first rank of its node", "torchrun",
            "the platform starts one process per GPU; `clusterctl launch --from-env` must run once per node "
            "(it starts the node's ranks itself): start it only where LOCAL_RANK is 0, or use --platform nodes")
    group = _optional_int(env, "GROUP_RANK", "torchrun", seen)
    node_rank = rank // local_world if group is None else group
    return world // local_world, node_rank, local_world


# --------------------------------------------------------------------------- values


def _shown(seen: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in seen.items()) or "no platform variables"


def _text(env, name: str, platform: str, seen: dict) -> str:
    value = (env.get(name) or "").strip()
    if not value:
        raise UsageError(f"{name} is not set: this does not look like a node started by the platform", platform,
                         f"run `clusterctl launch --from-env` as the command the platform starts on every node "
                         f"(it sets {name}); by hand, export MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK first")
    seen[name] = value
    return value


def _optional(env, name: str, seen: dict) -> Optional[str]:
    value = (env.get(name) or "").strip()
    if not value:
        return None
    seen[name] = value
    return value


def _int(env, name: str, platform: str, seen: dict, low: int = 0, high: Optional[int] = None) -> int:
    value = _optional_int(env, name, platform, seen, low, high)
    if value is None:
        _text(env, name, platform, seen)
    return value


def _optional_int(env, name: str, platform: str, seen: dict, low: int = 0, high: Optional[int] = None) -> Optional[int]:
    text = _optional(env, name, seen)
    if text is None:
        return None
    if not re.fullmatch(r"\d+", text) or int(text) < low or (high is not None and int(text) > high):
        span = f"{low}..{high}" if high is not None else f"{low} or more"
        raise UsageError(f"{name}={text!r} is not a whole number in {span}", platform,
                         f"the platform sets {name}; a value set by hand in the job spec overrides it: fix or remove it")
    return int(text)


def _nproc_value(text: Optional[str], notes: list[str]) -> Optional[int]:
    if text is None:
        return None
    if re.fullmatch(r"\d+", text) and int(text) > 0:
        return int(text)
    if text.lower() in ("auto", "gpu", "cpu"):
        notes.append(f"PET_NPROC_PER_NODE={text}: ranks per node from this node's GPUs and the inventory")
        return None
    raise UsageError(f"PET_NPROC_PER_NODE={text!r} is neither a count nor auto/gpu/cpu", "pytorchjob",
                     "set spec.nprocPerNode of the PyTorchJob to the GPUs per pod, e.g. \"4\"")


def _fixed_nnodes(text: str) -> int:
    low, _, high = text.partition(":")
    if re.fullmatch(r"\d+", low) and (not high or high == low) and int(low) > 0:
        return int(low)
    raise UsageError(f"PET_NNODES={text!r} is an elastic range", "pytorchjob",
                     "clusterctl runs a fixed number of nodes (static rendezvous): remove elasticPolicy from the "
                     "PyTorchJob (clusterctl export pytorchjob writes none)")


def run_id_from(identity: NodeIdentity, env: Mapping[str, str]) -> str:
    """One id every node derives alike: CLUSTERCTL_RUN_ID, a PyTorchJob's name, or the endpoint."""
    given = (env.get("CLUSTERCTL_RUN_ID") or "").strip()
    if given:
        return check_run_id(given, "CLUSTERCTL_RUN_ID")
    match = re.fullmatch(r"(?P<job>[a-z0-9][a-z0-9.-]*)-master-0(?:\..*)?", identity.master_addr)
    if identity.platform == "pytorchjob" and match:
        return match.group("job")
    slug = re.sub(r"[^A-Za-z0-9.-]+", "-", identity.master_addr).strip("-.") or "master"
    return f"env-{slug}-{identity.master_port}"[:100]


def check_run_id(value: str, where: str) -> str:
    if not _RUN_ID_RE.fullmatch(value):
        raise UsageError(f"run id {value!r} is not a safe name", where,
                         "use letters, digits, . _ - (it names log directories and the rendezvous)")
    return value


# --------------------------------------------------------------------------- planning


def node_inventory(inv: Inventory, identity: NodeIdentity, join_timeout: int) -> Inventory:
    """The inventory as this job sees it: N placeholder hosts, node i = node rank i.

    The file's own hosts describe machines reached over SSH and are not these nodes;
    container settings are already applied by the platform (we run inside the
    container), so only job, checks and the rendezvous port/timeout carry over.
    """
    nproc = inv.job.nproc_per_node
    if identity.nproc_per_node is not None:
        if isinstance(nproc, int) and nproc != identity.nproc_per_node:
            raise UsageError(
                f"the platform runs {identity.nproc_per_node} rank(s) per node but job.nproc_per_node is {nproc}",
                "job.nproc_per_node", f"set job.nproc_per_node: {identity.nproc_per_node} (or auto), or change the "
                "platform's ranks per node (PyTorchJob spec.nprocPerNode, LOCAL_WORLD_SIZE)")
        nproc = identity.nproc_per_node
    hosts = tuple(Host(name=node_name(i), address=node_name(i)) for i in range(identity.nnodes))
    return replace(inv, hosts=hosts, container=None, job=replace(inv.job, nproc_per_node=nproc),
                   rendezvous=RendezvousSpec(port=identity.master_port, join_timeout=join_timeout))


def plan_node(inv: Inventory, identity: NodeIdentity, facts: NodeFacts, strict: bool = False) -> Topology:
    """topology.plan over the placeholder hosts, every node assumed shaped like this one.

    Platforms give every replica the same resources, and torchrun needs the same nproc
    on every node, so this node's GPUs stand for all. The master address is the
    platform's, put in after planning (placeholder names are no addresses).
    """
    others = NodeFacts(gpu_ids=facts.gpu_ids, nic=facts.nic)
    all_facts = {h.name: (facts if h.name == identity.node_name else others) for h in inv.hosts}
    try:
        topo = plan(inv, all_facts, strict=strict)
    except TopologyError as exc:
        fix = (exc.fix or "").replace("e.g. with --limit", "i.e. have the platform start that many nodes")
        raise TopologyError(f"{exc.what} ({identity.describe()})", exc.where, fix) from None
    placeholder = f"({node_name(0)}:{topo.port})"
    notes = tuple(n.replace(placeholder, f"({identity.master_addr}:{topo.port})") for n in topo.notes
                  if not any(f"{h.name}:" in n for h in inv.hosts if h.name != identity.node_name))
    return replace(topo, master_addr=identity.master_addr, notes=notes)


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address.lower() == "localhost"


# --------------------------------------------------------------------------- failures

_MASTER_WAITED = re.compile(r"Timed out after (\d+) seconds waiting for clients\. (\d+)/(\d+) clients joined")
_WORKER_WAITED = re.compile(r"wait timeout after (\d+)ms, keys: \S*assigned_ranks")
_NO_MASTER = re.compile(r"client socket has timed out after (\d+)ms while trying to connect to \(?([^,\s)]+)(?:, |:)(\d+)")


def explain_rendezvous_failure(text: str, identity: NodeIdentity, join_timeout: int) -> Optional[str]:
    """What torchrun's static rendezvous errors mean here, in terms of the platform's variables."""
    told = f"{_meaning(identity)}"
    match = _MASTER_WAITED.search(text)
    if match:
        joined, expected = int(match.group(2)), int(match.group(3))
        return (f"only {joined} of {expected} nodes joined the rendezvous within {join_timeout}s. {told}, so the "
                f"master waited for {expected} launchers and {expected - joined} never came: the platform started "
                f"fewer nodes than that, WORLD_SIZE means something else on this platform (docs/platforms.md; "
                f"--platform), or the missing nodes cannot reach {identity.master_addr}:{identity.master_port}")
    match = _WORKER_WAITED.search(text)
    if match:
        return (f"this node reached the master at {identity.master_addr}:{identity.master_port}, but the "
                f"rendezvous did not complete within {join_timeout}s: the master was still waiting for other nodes. "
                f"{told}; check that the platform started that many nodes, or fix --platform / WORLD_SIZE")
    match = _NO_MASTER.search(text)
    if match:
        return (f"this node could not reach the master's rendezvous at {match.group(2)}:{match.group(3)} within "
                f"{join_timeout}s: the master node never started its launcher (is there a node with rank 0?), "
                f"MASTER_ADDR does not route here, or a firewall blocks TCP {match.group(3)}")
    return None


def _meaning(identity: NodeIdentity) -> str:
    vars_ = dict(identity.variables)
    if identity.platform == "nodes":
        return f"WORLD_SIZE={vars_.get('WORLD_SIZE')} was read as {identity.nnodes} nodes (--platform nodes)"
    if identity.platform == "torchrun":
        return (f"WORLD_SIZE={vars_.get('WORLD_SIZE')} / LOCAL_WORLD_SIZE={vars_.get('LOCAL_WORLD_SIZE')} was read "
                f"as {identity.nnodes} nodes (--platform torchrun)")
    source = "PET_NNODES" if "PET_NNODES" in vars_ else "WORLD_SIZE"
    return f"{source}={vars_.get(source)} was read as {identity.nnodes} pods (--platform pytorchjob)"
