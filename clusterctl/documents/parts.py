"""The shapes that several documents share (a finding, a host's result, an attempt, a straggler),
each declared once. CONTRACT.md names what users rely on; a field without a default is in every
document that has the shape, the others are typed where present. More keys are welcome."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

HostStatusName = Literal["ok", "changed", "skipped", "failed", "unreachable"]
CheckStatusName = Literal["pass", "warn", "fail"]
HealthState = Literal["healthy", "suspect", "quarantined"]


def doc(text: str, key: Optional[str] = None, **kwargs):
    """A field with its description (the schema's `description`); `key`: its JSON key where that is no
    Python name (`class`)."""
    return field(metadata={"doc": text, **({"key": key} if key else {})}, **kwargs)


@dataclass(frozen=True)
class Finding:
    """One diagnosis: a cause from CONTRACT.md's vocabulary, where, the evidence, the fix."""

    cause: str = doc("a slug of CONTRACT.md's causes (nic_mismatch, shm_too_small, ..., unknown)")
    host: Optional[str] = doc("the host it happened on, null when not one host's")
    rank: Optional[int] = doc("the global rank, null when not one rank's")
    evidence: str = doc("the log line(s) that show it")
    fix: str = doc("what to change, in inventory terms where possible")
    confidence: float = doc("0..1, how sure the diagnosis is of this cause", default=0.0)


@dataclass(frozen=True)
class SimilarCase:
    """A known case of the diagnosis corpus near this one."""

    source: str
    cause: str
    fix: str
    score: float


@dataclass(frozen=True)
class LogLine:
    """One line of a rank's output (rank null: torchrun's own line)."""

    host: str
    rank: Optional[int]
    stream: Literal["stdout", "stderr"]
    text: str


@dataclass(frozen=True)
class CheckEntry:
    host: Optional[str]
    check: str = doc("the check's id, e.g. ssh, docker, gpus, shm")
    status: CheckStatusName
    detail: str
    fix: str


@dataclass(frozen=True)
class HostEntry:
    """One host's result in up, exec, down, status, play, stop, logs, collect-logs."""

    status: HostStatusName
    detail: str = doc("what happened, one line")
    duration_s: float


@dataclass(frozen=True)
class LeftRunning:
    """A live run of anyone that `up`/`down` left alone on a node (issue 48)."""

    run_id: str
    operator: Optional[str] = doc("user@controller host that started it; null for a run from before leases")
    since: Optional[float] = doc("when it took its leases, the node's unix time")


@dataclass(frozen=True)
class FleetRun:
    """A run holding GPU leases on the inventory's nodes, whoever started it."""

    run_id: str
    operator: Optional[str]
    since: Optional[float] = doc("when it took its leases, the node's unix time")
    gpus: dict[str, list[str]] = doc("host -> its keys: gpu<N>, or slot<N> on a node without GPUs")


@dataclass(frozen=True)
class FleetWaiter:
    """A run queued for leases (`run --wait`), in the nodes' order."""

    run_id: str
    operator: Optional[str]
    hosts: list[str]


@dataclass(frozen=True)
class FleetEnded:
    """A run someone ended by force (`up --force`, `down --force`), as logged on the node."""

    run_id: str
    by: Optional[str] = doc("user@controller host that forced it")
    at: Optional[float] = doc("the node's unix time")
    how: Optional[str] = doc("the command, e.g. `clusterctl up --force`")
    host: str


@dataclass(frozen=True)
class Fleet:
    """What the nodes say of every operator's runs (node/leases.py)."""

    runs: list[FleetRun]
    waiting: list[FleetWaiter]
    interrupted_by: list[FleetEnded]


@dataclass(frozen=True)
class ExecHostEntry(HostEntry):
    stdout: str = ""
    stderr: str = ""
    exit_code: Optional[int] = None


@dataclass(frozen=True)
class Master:
    host: str
    address: str
    port: int


@dataclass(frozen=True)
class FirstFailure:
    """The rank that failed first (its peers' failures follow from it) and why."""

    host: Optional[str]
    rank: Optional[int] = doc("global rank: node rank x nproc + local rank")
    diagnosis: list[Finding] = doc("findings, most likely cause first", default_factory=list)


@dataclass(frozen=True)
class Straggler:
    """A rank the others keep waiting for."""

    host: str
    rank: int
    gpu: Optional[int]
    lag_s: Optional[float] = doc("seconds it is late per step, once a progress line gave the step time")
    ratio: float = doc("its step time over the median's")
    since: float = doc("when it was first named (seconds since the epoch)")
    evidence: str
    lag_share: float = doc("its lag as a share of a step", default=0.0)
    until: Optional[float] = doc("when it was found keeping pace again; null: late to the end", default=None)


@dataclass(frozen=True)
class Excluded:
    host: str
    cause: str


@dataclass(frozen=True)
class AttemptTimings:
    """Where the time of the relaunch that started an attempt went (a detached run's engine; issue 50)."""

    detection_s: Optional[float] = doc("the failed node's silence before it was counted lost (0: a rank's exit, "
                                       "reported within a beat)", default=None)
    stop_s: Optional[float] = doc("from the failed attempt's end to every survivor's ranks ended", default=None)
    replan_s: Optional[float] = doc("deciding and choosing the hosts", default=None)
    backoff_s: Optional[float] = doc("the pause before the relaunch", default=None)
    transfer_s: Optional[float] = doc("restoring the checkpoint from the replicas on every host (null: none)",
                                      default=None)
    launch_s: Optional[float] = doc("from the launch order to every rank started", default=None)
    first_step_s: Optional[float] = doc("from the launch order to the first new complete checkpoint step",
                                        default=None)


@dataclass(frozen=True)
class ReplicaEvent:
    """A problem of the checkpoint replicas (job.checkpoint.replicas), said by the node that met it."""

    kind: str = doc("disk_full, lost_mid_copy, size_mismatch, checksum_mismatch, refused, incomplete or late")
    says: str
    at: Optional[float] = None
    host: Optional[str] = None
    peer: Optional[str] = None
    step: Optional[str] = None


@dataclass(frozen=True)
class Attempt:
    """One launch of a run that heals itself."""

    attempt: int
    started: Optional[float]
    ended: Optional[float]
    hosts: list[str]
    exit_code: Optional[int]
    first_failure: Optional[FirstFailure]
    excluded: list[Excluded] = doc("the hosts this attempt's failure left out", default_factory=list)
    relaunch_s: Optional[float] = doc("seconds from the previous attempt's end to this one's start", default=None)
    checkpoint: Optional[str] = doc("what CLUSTERCTL_CHECKPOINT was", default=None)
    resumed_from: Optional[str] = doc("the complete checkpoint this attempt resumed from (null: from the start)",
                                      default=None)
    progress: Optional[bool] = doc("whether it moved the run on: a newer complete checkpoint than it resumed from "
                                   "(without job.checkpoint: a first failure other than the attempt before's); "
                                   "false counts double against job.restarts, twice in a row ends the run; "
                                   "null: not known (running, or nothing to compare)", default=None)
    timings: Optional[AttemptTimings] = doc("where the relaunch that started it went", default=None)
    replica_events: list[ReplicaEvent] = doc("the checkpoint replicas' problems while it ran", default_factory=list)


@dataclass(frozen=True)
class NodeEnd:
    """How a node's torchrun ended."""

    exit_code: Optional[int]
    lost: bool
    run_dir: str


@dataclass(frozen=True)
class RunEntry:
    """A run as `status` lists it."""

    run_id: str
    state: Literal["running", "unknown", "stopped", "succeeded", "failed", "interrupted"]
    started: Optional[float]
    first_failure: Optional[FirstFailure]
    ended: Optional[float] = None
    exit_code: Optional[int] = None
    world_size: Optional[int] = None
    stragglers: list[Straggler] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    cluster: Optional[str] = None
    stalled_s: Optional[float] = doc("a detached run whose ranks all went silent this long", default=None)


@dataclass(frozen=True)
class PlannedNode:
    """A node of the plan: its ranks, GPUs and network."""

    host: str
    node_rank: int
    ranks: list[int] = doc("the first and the last global rank")
    gpus: Optional[list[int]]
    nic: Optional[str]
    local_addr: Optional[str]


@dataclass(frozen=True)
class NodeCommand:
    """What `run --plan` would start on a node."""

    argv: list[str]
    env: dict[str, str] = doc("secrets masked")
    run_dir: str
    command: str


@dataclass(frozen=True)
class HealthEvent:
    seq: int
    at: float
    gpu: Optional[str]
    source: str
    kind: str
    severity: Literal["hard", "soft", "info"]
    cause: str
    evidence: str
    run_id: Optional[str]


@dataclass(frozen=True)
class GpuHealth:
    key: str
    index: Optional[int]
    state: HealthState
    since: Optional[float]
    reason: Optional[str]
    keyed_by_index: bool = False


@dataclass(frozen=True)
class NodeHealth:
    host: str
    state: HealthState
    since: Optional[float]
    reason: Optional[str]
    gpus: list[GpuHealth]
    events: list[HealthEvent] = doc("the last three (all for one host)", default_factory=list)


@dataclass(frozen=True)
class CheckupStep:
    step: Literal["preflight", "gpu_burn", "nccl_pair"]
    status: Literal["pass", "fail", "skip"]
    detail: str


@dataclass(frozen=True)
class Supervisor:
    """Where a detached run's supervisor listens (the run record's "supervisor")."""

    host: str
    address: str
    port: int
    run_dir: str


@dataclass(frozen=True)
class InventorySourceEntry:
    """Where a run's inventory came from (the run record's "inventory_source")."""

    kind: Literal["file", "directory", "ansible"]
    location: str


@dataclass(frozen=True)
class ImageSent:
    """Where `up` got a node's image when it distributes it between the nodes (container.distribute)."""

    source: str = doc("present | registry | peer:NODE")
    image_id: str
    bytes: int
    seconds: float
    mb_per_s: Optional[float] = doc("null when nothing was sent")
    layers_kept: int = doc("layers the node had already, not sent again")


@dataclass(frozen=True)
class ImagePulled:
    """A node that pulled the image from the registry itself."""

    source: Literal["registry"]
    image_id: str
    bytes: Optional[int] = doc("the image's size, as the engine says it")
    seconds: float


@dataclass(frozen=True)
class PeersFailed:
    """A node the peers could not send the image to: the registry pull follows."""

    source: None
    peers_failed: str = doc("why")


@dataclass(frozen=True)
class RankAt:
    host: str
    rank: int


@dataclass(frozen=True)
class UnreadRank:
    """A rank whose stack py-spy could not read, and why."""

    host: str
    rank: int
    error: str


@dataclass(frozen=True)
class RollCallGroup:
    """Ranks whose innermost frame is the same."""

    frame: Optional[str] = doc("the innermost frame, null: no Python frame")
    where: str = doc("the function, and the line of the job's code that led there")
    ranks: list[RankAt]
    majority: bool = doc("the group the others are measured against (those waiting in the collective)")


@dataclass(frozen=True)
class RollCall:
    """Every rank's stack, grouped, the ranks elsewhere than the majority named."""

    groups: list[RollCallGroup] = doc("the majority first, then the others, largest first")
    failed: list[UnreadRank]
    missing: list[int] = doc("ranks of the topology no node reported")
    evidence: str


@dataclass(frozen=True)
class NcclLink:
    """The link an nccl-test measured, and the bus bandwidth it should reach."""

    class_: str = doc("nvlink-hopper | nvlink | pcie | gpu-intra-node | infiniband | tcp | gloo | single-rank",
                      key="class")
    target_busbw_gbps: Optional[float] = doc("busbw expected at large sizes; null: reported, not judged")
    basis: str = doc("where the target comes from")
