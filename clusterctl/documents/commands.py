"""Every `--json` document, declared once: what each command prints (CONTRACT.md's shapes, "minimum;
more keys welcome"), and the run record (.clusterctl/runs/RUN/run.json). A command that fails on
bad input, an interrupt or an internal error prints an ErrorDocument instead."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from clusterctl.documents.parts import (
    Attempt, CheckEntry, CheckupStep, ExecHostEntry, Finding, FirstFailure, Fleet, HostEntry, LeftRunning,
    ImagePulled, ImageSent, InventorySourceEntry, LogLine, Master, NcclLink, NodeCommand, NodeEnd, NodeHealth, PlannedNode, RollCall, RunEntry,
    PeersFailed, SimilarCase, Straggler, Supervisor, doc,
)


@dataclass(frozen=True)
class Document:
    """Every document: did the command do what it was asked."""

    ok: bool


@dataclass(frozen=True)
class ErrorDocument(Document):
    """A command that stopped on an error: what, where (file:line or host), and the fix."""

    ok: Literal[False]
    error: str
    where: Optional[str] = None
    fix: Optional[str] = None


@dataclass(frozen=True)
class HostsDocument(Document):
    """up, down, play, stop, logs: every host's result."""

    hosts: dict[str, HostEntry]


@dataclass(frozen=True)
class UpHostEntry(HostEntry):
    distribute: Union[ImageSent, ImagePulled, PeersFailed] = doc("where the node's image came from, when it moved",
                                                                 default=None)
    left_running: list[LeftRunning] = doc("live runs of anyone the stale-rank cleanup left alone (issue 48)",
                                          default_factory=list)


@dataclass(frozen=True)
class UpDocument(HostsDocument):
    hosts: dict[str, UpHostEntry]
    checks: list[CheckEntry] = doc("the preflight checks at the end of up", default_factory=list)


@dataclass(frozen=True)
class DownDocument(HostsDocument):
    """`down`: every host's result; a live run's node names it in `left_running` (kept without --force)."""

    hosts: dict[str, UpHostEntry]


@dataclass(frozen=True)
class ExecDocument(Document):
    hosts: dict[str, ExecHostEntry]


@dataclass(frozen=True)
class StatusDocument(Document):
    hosts: dict[str, HostEntry] = doc("none for a Slurm cluster without hosts", default_factory=dict)
    runs: list[RunEntry] = doc("the latest runs, newest first", default_factory=list)
    cluster: Optional[str] = None
    fleet: Optional[Fleet] = doc("every operator's runs on these nodes, the waiters, the runs ended by force",
                                 default=None)


@dataclass(frozen=True)
class CheckDocument(Document):
    checks: list[CheckEntry]
    summary: dict[str, int] = doc("how many checks passed, warned, failed", default_factory=dict)
    health: list[dict[str, Any]] = doc("each inventory host's health state (no events)", default_factory=list)


@dataclass(frozen=True)
class RunDocument(Document):
    """`run`: the plan (--plan), the run's end, or a detached run's start."""

    world_size: int
    nproc_per_node: int
    exit_code: Optional[int] = doc("torchrun's exit code; null while the run goes on or before it starts")
    run_id: Optional[str] = None
    master: Optional[Master] = None
    first_failure: Optional[FirstFailure] = None
    nodes: dict[str, NodeEnd] = field(default_factory=dict)
    stragglers: list[Straggler] = doc("ranks the others waited for (empty when every rank keeps pace)",
                                      default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    duration_s: Optional[float] = None
    nnodes: Optional[int] = None
    topology: list[PlannedNode] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    facts_from: dict[str, Literal["up", "probed"]] = doc("where the planner's facts of each node came from",
                                                         default_factory=dict)
    phases: dict[str, float] = doc("seconds since the process started when each phase was reached",
                                   default_factory=dict)
    phases_cpu: dict[str, float] = doc("CPU seconds (user + system) this process and its reaped children had "
                                       "spent when each phase was reached", default_factory=dict)
    plan: Union[dict[str, NodeCommand], str, None] = doc("--plan: per node what would start (Slurm: the batch "
                                                         "script)", default=None)
    detached: bool = False
    state: Optional[str] = None
    stopped: bool = False
    heal_refused: Optional[str] = None


@dataclass(frozen=True)
class RunRecord:
    """.clusterctl/runs/RUN/run.json: the run as it was decided, and how it ended."""

    run_id: str
    started: float
    exit_code: Optional[int]
    state: Optional[Literal["running", "ended", "stopped"]] = doc("a run's (an nccl-test's record has none)",
                                                                  default=None)
    kind: Optional[str] = doc("nccl-test for an nccl-test's record, absent for a job's", default=None)
    world_size: Optional[int] = None
    nproc_per_node: Optional[int] = None
    master: Optional[Master] = None
    ended: Optional[float] = None
    first_failure: Optional[FirstFailure] = None
    nodes: dict[str, NodeEnd] = field(default_factory=dict)
    stragglers: list[Straggler] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    commands: dict[str, NodeCommand] = doc("per host: what started there", default_factory=dict)
    topology: list[PlannedNode] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    phases_cpu: dict[str, float] = doc("as the run document's", default_factory=dict)
    supervisor: Optional[Supervisor] = doc("a detached run's supervisor", default=None)
    inventory_source: Optional[InventorySourceEntry] = None


@dataclass(frozen=True)
class CollectDocument(Document):
    run_id: str
    dest: str
    files: int = doc("how many files were gathered", default=0)
    findings: list[Finding] = field(default_factory=list)
    hosts: dict[str, HostEntry] = field(default_factory=dict)


@dataclass(frozen=True)
class DiagnoseDocument(Document):
    findings: list[Finding] = doc("most likely cause first")
    similar: list[SimilarCase] = doc("the nearest known cases", default_factory=list)
    root_cause: Optional[str] = None
    identified: bool = doc("a cause other than unknown was found", default=False)
    path: Optional[str] = None


@dataclass(frozen=True)
class HealthDocument(Document):
    """`health [HOST]`, `health release HOST`: the fleet's record."""

    nodes: list[NodeHealth]


@dataclass(frozen=True)
class HealthCheckDocument(Document):
    """`health check HOST`: the checkup's steps."""

    host: str
    steps: list[CheckupStep]
    checks: list[CheckEntry] = field(default_factory=list)
    nodes: list[NodeHealth] = field(default_factory=list)


@dataclass(frozen=True)
class PrometheusDocument(Document):
    prometheus: str = doc("the text exposition format")


@dataclass(frozen=True)
class ExportDocument(Document):
    kind: Literal["pytorchjob", "trainjob", "rayjob", "job", "sbatch"]
    nnodes: int
    nproc_per_node: int
    world_size: int
    file: Optional[str]
    notes: list[str]
    manifests: list[dict[str, Any]] = doc("the Kubernetes objects (not for sbatch)", default_factory=list)
    script: Optional[str] = doc("the batch script (sbatch)", default=None)


@dataclass(frozen=True)
class InventoryDocument(Document):
    inventory: str
    name: str
    hosts: list[dict[str, Any]]


@dataclass(frozen=True)
class AttachDocument(Document):
    run_id: str
    state: str
    exit_code: Optional[int] = None


@dataclass(frozen=True)
class LogsHost:
    status: str
    detail: str


@dataclass(frozen=True)
class LogsDocument(Document):
    run_id: str
    hosts: dict[str, LogsHost]
    lines: list[LogLine] = field(default_factory=list)


@dataclass(frozen=True)
class StopDocument(Document):
    run_id: str
    hosts: dict[str, HostEntry]
    state: Optional[str] = None


@dataclass(frozen=True)
class StackRank:
    host: str
    rank: int
    pid: Optional[int] = None


@dataclass(frozen=True)
class StackGroup:
    """Ranks with the same stack."""

    ranks: list[StackRank]
    stack: list[str] = doc("innermost last: function (file:line)")


@dataclass(frozen=True)
class StacksDocument(Document):
    run_id: str
    groups: list[StackGroup]
    roll_call: RollCall
    saved: Optional[str] = None
    evidence: Optional[str] = None
    problems: dict[str, str] = doc("per host, why no stack came from it", default_factory=dict)


@dataclass(frozen=True)
class CompletionDocument(Document):
    shell: Literal["bash", "zsh"]
    script: str


@dataclass(frozen=True)
class LaunchDocument(Document):
    exit_code: Optional[int] = None


@dataclass(frozen=True)
class RunNotStartedDocument(HostsDocument):
    """`run` whose nodes were not ready (unreachable, a container not running): the run did not start."""

    exit_code: None = doc("null: nothing ran", default=None)


@dataclass(frozen=True)
class ReportDocument(Document):
    """`report`: the run report written."""

    run_id: str
    report: str = doc("the self-contained HTML file written")
    bundle: Optional[str] = doc("the collect-logs directory it drew from, or null (the record alone)")
    metrics_of: list[str] = doc("the hosts whose metrics it charts", default_factory=list)
    logs_linked: int = doc("how many logs it links to", default=0)


@dataclass(frozen=True)
class NodeLook:
    """One node of a running run as `top`/`metrics` read it: its latest metrics sample
    (node/node_metrics.py's line, null before the first) and each rank's last line."""

    host: str
    sample: Optional[dict[str, Any]] = None
    exit_code: Optional[int] = doc("torchrun's, once it ended", default=None)
    error: Optional[str] = doc("why the node could not be read", default=None)
    ranks: dict[str, dict[str, Any]] = doc("global rank -> {stream, line}", default_factory=dict)


@dataclass(frozen=True)
class LookDocument(Document):
    """`top --json` (`--once`), `metrics --json`: one look at every node of a run."""

    run_id: str
    state: Optional[str] = None
    nodes: list[NodeLook] = field(default_factory=list)


@dataclass(frozen=True)
class NcclTestDocument(Document):
    """`nccl-test`: one all-reduce test on every node (mode single), or one per pair of nodes (pairs)."""

    mode: Literal["single", "pairs"]
    stages: dict[str, dict[str, Any]] = doc("connect, small, full: each stage's status (empty for pairs)")
    sizes: list[dict[str, Any]] = doc("each size measured (empty for pairs)")
    pairs: list[dict[str, Any]] = doc("each pair's test, slowest first (empty for single)")
    slowest_node: Optional[str] = doc("the pairs' slowest node, where one stands out")
    link: Optional[NcclLink] = doc("the link measured (single)", default=None)
    verdict: Optional[str] = doc("pass | warn | fail at the largest size, - where none applies", default=None)


@dataclass(frozen=True)
class NotificationDiagnosis:
    cause: str
    host: Optional[str]
    rank: Optional[int]
    fix: str
    evidence: str = ""
    confidence: Optional[float] = None


@dataclass(frozen=True)
class Notification:
    """What `notify:` posts as JSON (observe/messages.py): an event of a run, its own versioned schema."""

    schema: Literal["clusterctl.notification/1"]
    event: Literal["end", "failure", "relaunch", "straggler", "quarantine"]
    run_id: str
    cluster: str
    hosts: list[str]
    state: str = doc("running | succeeded | failed | stopped")
    duration_s: Optional[float]
    summary: str = doc("one line a person reads first")
    diagnosis: Optional[NotificationDiagnosis] = doc("the leading cause (absent without one)", default=None)
    detail: dict[str, Any] = doc("the event's own facts (the straggler, the host quarantined...)",
                                 default_factory=dict)


# what each command prints (a command with subcommands may print one of several); every one of them
# may print an ErrorDocument instead
COMMANDS: dict[str, tuple[type, ...]] = {
    "up": (UpDocument,), "down": (DownDocument,), "exec": (ExecDocument,), "status": (StatusDocument,),
    "check": (CheckDocument,), "run": (RunDocument, RunNotStartedDocument), "attach": (AttachDocument, RunDocument),
    "logs": (LogsDocument,), "stop": (StopDocument,), "collect-logs": (CollectDocument,),
    "diagnose": (DiagnoseDocument,), "stacks": (StacksDocument,), "play": (HostsDocument,), "sandbox": (Document,),
    "nccl-test": (NcclTestDocument, RunNotStartedDocument), "export": (ExportDocument,), "launch": (LaunchDocument,),
    "health": (HealthDocument, HealthCheckDocument, PrometheusDocument), "completion": (CompletionDocument,),
    "inventory": (InventoryDocument,), "report": (ReportDocument,), "top": (LookDocument,),
    "metrics": (LookDocument,),
}
RECORDS: dict[str, type] = {"run-record": RunRecord, "notification": Notification}
