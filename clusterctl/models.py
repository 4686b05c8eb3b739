"""Frozen value types shared by every layer. No I/O here.

The shape of the data is the contract between layers: the inventory loader builds an
`Inventory`; modules turn it into `Command`s; the executor turns those into
`HostResult`s; the renderer and the CLI read those.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Union

SECRET_NAME_MARKERS = ("TOKEN", "KEY", "PASSWORD", "SECRET", "PASSWD", "CREDENTIAL")
MASK = "***"
MAX_OUTPUT = 32 << 20  # bytes of one stream of a node command kept by the controller (Command.max_output)


def looks_secret(name: str) -> bool:
    """True for variable names whose values must never be printed or stored."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_NAME_MARKERS)


class HostStatus(str, enum.Enum):
    OK = "ok"
    CHANGED = "changed"
    SKIPPED = "skipped"
    FAILED = "failed"
    UNREACHABLE = "unreachable"

    @property
    def succeeded(self) -> bool:
        return self in (HostStatus.OK, HostStatus.CHANGED, HostStatus.SKIPPED)


class CheckStatus(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


# --------------------------------------------------------------------------- inventory


@dataclass(frozen=True)
class SSHSettings:
    user: Optional[str] = None
    port: Optional[int] = None
    identity_file: Optional[str] = None
    known_hosts: str = "~/.ssh/known_hosts"
    host_key_policy: str = "strict"  # strict | accept-new
    connect_timeout: float = 10.0
    command_timeout: float = 600.0
    proxy_jump: Optional[str] = None
    forward_agent: bool = False
    config_file: Optional[str] = None  # an ssh_config read instead of ~/.ssh/config + /etc/ssh/ssh_config (ssh -F)
    # further ssh options, as `ssh -o Key=Value` (win over ssh_config): ProxyCommand (%h %p %r),
    # StrictHostKeyChecking ...; e.g. from ansible_ssh_common_args
    options: tuple[tuple[str, str], ...] = ()
    # the fields above that the inventory set; the others are defaults that ssh_config may replace
    # (known_hosts, host_key_policy, connect_timeout); where a value came from, not the value: not compared
    explicit: frozenset = field(default=frozenset(), compare=False)


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str
    secret: bool = False

    @property
    def is_secret(self) -> bool:
        return self.secret or looks_secret(self.name)

    @property
    def shown(self) -> str:
        return MASK if self.is_secret else self.value


# gpus: "all" | "none" | a count | explicit device ids
GpuSelection = Union[str, int, tuple]


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    ssh: SSHSettings = field(default_factory=SSHSettings)
    connection: str = "ssh"  # ssh | local
    gpus: Optional[GpuSelection] = None  # per-host override of container.gpus
    groups: tuple[str, ...] = ()
    slots: Optional[int] = None  # from an MPI hostfile: processes this host may run
    nic: Optional[str] = None  # overrides the detected NCCL/GLOO socket interface
    env: tuple[EnvVar, ...] = ()
    # privilege escalation for a non-root SSH user (ansible_become*): `sudo -n`, never a password
    become: Optional[bool] = None
    become_user: Optional[str] = None
    become_method: Optional[str] = None  # sudo (the only one)

    @property
    def is_local(self) -> bool:
        return self.connection == "local"


@dataclass(frozen=True)
class RegistryAuth:
    """Whose registry login a pull uses (`container.registry_auth`). Absent: the node's own
    (ssh.user's Docker config and credential helpers there). Never holds a secret: the
    password is read from this controller's environment when the pull is made."""

    source: str = "node"  # node | password (username + password_env) | docker-config (this controller's)
    username: Optional[str] = None
    password_env: Optional[str] = None


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    name: str = "clusterctl"
    runtime: str = "docker"  # docker | host (no container)
    gpus: GpuSelection = "all"
    shm_size: Optional[str] = None
    ipc: Optional[str] = None  # "host" or None
    volumes: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()
    command: tuple[str, ...] = ("sleep", "infinity")
    pull: str = "missing"  # always | missing | never
    distribute: str = "auto"  # registry | peers | auto (peers from 4 nodes up): registry/peers.py
    labels: tuple[tuple[str, str], ...] = ()
    registry_auth: RegistryAuth = field(default_factory=RegistryAuth)


@dataclass(frozen=True)
class RendezvousSpec:
    port: int = 29500
    master: Optional[str] = None  # host name; defaults to the first host
    join_timeout: int = 120
    # the master's address on the network the ranks use, when it is not the address SSH
    # reaches it on (a management network for SSH, a fabric network for the job)
    address: Optional[str] = None


@dataclass(frozen=True)
class CheckpointSpec:
    """`job.checkpoint`: where the job saves its checkpoints (on the nodes) and what marks one complete:
    a file name inside a checkpoint's directory (`COMPLETE`) or a glob matched there (`*.done`).
    `replicas` (issue 50): each node's newly complete step is copied to that many peers of the run
    (node/checkpoint_replica.py), `keep` steps a peer holds of each node, at most `bandwidth` bytes/s
    (None: a quarter of the node's fastest link)."""
    dir: str
    complete: str
    replicas: int = 0
    keep: int = 2
    bandwidth: Optional[int] = None


@dataclass(frozen=True)
class HealingSpec:
    """`job.nodes/restarts/min_nodes/checkpoint/heal/lost_after` (clusterctl/ground/healing.py has the cause
    table `heal` overrides): a run that heals itself. The defaults are today's fail-fast run on every host."""
    nodes: Optional[int] = None  # hosts a run uses (the first N); the others are spares; None: all
    restarts: int = 0
    min_nodes: Optional[int] = None
    checkpoint: Optional[CheckpointSpec] = None
    heal: tuple[tuple[str, str], ...] = ()  # (cause, node | job | transient)
    lost_after: float = 15.0  # seconds without its keeper's report before a detached run counts a node lost

    @property
    def enabled(self) -> bool:
        return self.restarts > 0


@dataclass(frozen=True)
class JobSpec:
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    workdir: Optional[str] = None
    nproc_per_node: Union[int, str] = "auto"
    world_size_divides: Optional[int] = None
    outputs: str = "/tmp/clusterctl-outputs"
    env: tuple[EnvVar, ...] = ()
    python: str = "python3"
    stall_timeout: float = 900.0  # seconds without output before the ranks' stacks are taken; 0: never
    launcher: str = "torchrun"  # torchrun | none (job.command once per node) | mpirun | deepspeed: plan/launcher.py
    metrics_every: float = 5.0  # seconds between the node sampler's metrics (node/node_metrics.py); 0: off
    healing: HealingSpec = field(default_factory=HealingSpec)


@dataclass(frozen=True)
class CheckSettings:
    shm_min_bytes: int = 1 << 30
    disk_min_bytes: int = 1 << 30
    clock_skew_warn_s: float = 1.0
    ib: str = "auto"  # auto | required | off


@dataclass(frozen=True)
class HealthRuleOverride:
    """One row of the inventory's `health.rules`: a rule's kind and the values written for it
    (suspect_after, quarantine_after, window_days; None where `never` was written)."""
    kind: str
    values: tuple[tuple[str, Optional[float]], ...] = ()


@dataclass(frozen=True)
class HealthSettings:
    """The inventory's `health:` section (clusterctl/health/rules.py has the table it overrides)."""
    rules: tuple[HealthRuleOverride, ...] = ()


@dataclass(frozen=True)
class NotifySettings:
    """The inventory's `notify:` section (issue 41; clusterctl/observe/notify.py sends them)."""
    webhook: Optional[str] = None
    format: str = "json"  # json | slack
    command: tuple[str, ...] = ()
    on: tuple[str, ...] = ("end", "failure", "relaunch", "straggler", "quarantine")


@dataclass(frozen=True)
class SchedulerSpec:
    """`scheduler:`: the job runs on an allocation of this scheduler (only Slurm so far); every
    field but `type` left out means Slurm's own default (its default partition, one node...)."""

    type: str = "slurm"
    partition: Optional[str] = None
    nodes: Optional[int] = None  # None: len(hosts) when hosts are listed, else Slurm's default (1)
    time: Optional[str] = None  # as written (HH:MM:SS or another Slurm form); validated at load
    account: Optional[str] = None
    gpus_per_node: Optional[int] = None
    extra_args: tuple[str, ...] = ()  # more salloc/sbatch options, e.g. [--qos=high]


@dataclass(frozen=True)
class Inventory:
    name: str
    hosts: tuple[Host, ...]
    ssh: SSHSettings = field(default_factory=SSHSettings)
    container: Optional[ContainerSpec] = None
    rendezvous: RendezvousSpec = field(default_factory=RendezvousSpec)
    job: JobSpec = field(default_factory=JobSpec)
    checks: CheckSettings = field(default_factory=CheckSettings)
    source: Optional[Path] = None
    health: HealthSettings = field(default_factory=HealthSettings)
    scheduler: Optional[SchedulerSpec] = None  # with one, hosts may be empty: the allocation's nodes are the hosts
    notify: Optional[NotifySettings] = None
    # what was read but not used (an ssh option clusterctl does not act on, an unknown Ansible
    # variable), each with file:line; said, never fatal
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    @property
    def master(self) -> Host:
        if self.rendezvous.master:
            return self.host(self.rendezvous.master)
        return self.hosts[0]

    def host_named_by(self, named: Optional[str], log_of: str) -> str:
        """The inventory host that a log's words name. Logs say what the machine calls itself (a
        hostname, an FQDN, `localhost`, an address), rarely the inventory's name: an inventory
        name or a host's address is taken as it is; anything else means `log_of`, the host whose
        log it is."""
        names = {h.name for h in self.hosts}
        if named in names:
            return named
        if named and named != "localhost" and not named.startswith("127.") and named != "::1":
            for host in self.hosts:
                if named == host.address or (host.name == self.master.name and named == self.rendezvous_address):
                    return host.name
        return log_of

    @property
    def rendezvous_address(self) -> str:
        """Where the ranks reach the master: `rendezvous.address`, else the master's own address."""
        return self.rendezvous.address or self.master.address

    @property
    def uses_container(self) -> bool:
        return self.container is not None and self.container.runtime == "docker"

    def limited(self, names: "tuple[str, ...] | list[str]") -> "Inventory":
        from dataclasses import replace

        wanted = set(names)
        hosts = tuple(h for h in self.hosts if h.name in wanted or wanted & set(h.groups))
        rendezvous = self.rendezvous
        if self.master not in hosts:  # rendezvous.master and .address name a host left out
            rendezvous = replace(rendezvous, master=None, address=None)
        return replace(self, hosts=hosts, rendezvous=rendezvous)


# --------------------------------------------------------------------------- execution


@dataclass(frozen=True)
class Command:
    """One remote process, as an argv list. Quoting happens only at the transport edge."""

    argv: tuple[str, ...]
    timeout: Optional[float] = 120.0
    env: tuple[tuple[str, str], ...] = ()
    stdin: Optional[bytes] = None
    cwd: Optional[str] = None
    ok_exit_codes: tuple[int, ...] = (0,)
    changes: bool = False  # a zero exit means the host changed
    # stdin stays open while it runs, so it reads EOF exactly when this connection ends (a helper
    # that must not outlive an interrupted or killed clusterctl watches for that)
    stdin_open: bool = False
    # needs root on the node (other users' /proc entries, firewall rules, killing ranks that run
    # as root in the container): run through `sudo -n` when the SSH user is not root and may
    # (see transport.base.remote_argv); otherwise as the user, seeing what the user may see
    privileged: bool = False
    # the most of each of its streams (bytes) the controller keeps in memory: past it the rest is
    # counted, dropped and named at the stream's end (transport/base.py); a caller that reads more
    # declares it, one that reads a file's end reads it with `tail -c` on the node
    max_output: int = MAX_OUTPUT

    def __post_init__(self) -> None:
        object.__setattr__(self, "argv", tuple(str(a) for a in self.argv))

    @property
    def display(self) -> str:
        import shlex

        env = " ".join(f"{k}={MASK if looks_secret(k) else shlex.quote(v)}" for k, v in self.env)
        return (env + " " if env else "") + shlex.join(self.argv)


@dataclass(frozen=True)
class CommandResult:
    exit_code: Optional[int]
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class Skip:
    reason: str


@dataclass(frozen=True)
class HostResult:
    host: str
    status: HostStatus
    detail: str = ""
    exit_code: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    data: Mapping = field(default_factory=dict)
    log_path: Optional[str] = None

    @property
    def succeeded(self) -> bool:
        return self.status.succeeded


@dataclass(frozen=True)
class CheckResult:
    host: Optional[str]
    check: str
    status: CheckStatus
    detail: str
    fix: str = ""

    def to_json(self) -> dict:
        from clusterctl.documents import parts
        from clusterctl.documents.convert import as_document

        return as_document(parts.CheckEntry, self)


@dataclass(frozen=True)
class Finding:
    """One diagnosis: a cause from CONTRACT.md's vocabulary, where, the evidence, the fix."""

    cause: str
    evidence: str
    fix: str
    host: Optional[str] = None
    rank: Optional[int] = None
    score: float = 0.0  # ranking weight; not part of the JSON contract
    confidence: float = 0.0  # 0..1, how sure the diagnosis is of this cause (CONTRACT.md, round two)

    def to_json(self) -> dict:
        from clusterctl.documents import parts
        from clusterctl.documents.convert import as_document

        return as_document(parts.Finding, self)


def secret_values(inventory: Inventory) -> set[str]:
    """The values of `secret: true` variables (4 characters or more), to be masked wherever text is written."""
    values = set()
    envs = list(inventory.job.env) + [e for h in inventory.hosts for e in h.env]
    if inventory.container is not None:
        envs += list(inventory.container.env)
    for var in envs:
        if var.is_secret and len(var.value) >= 4:
            values.add(var.value)
    auth = inventory.container.registry_auth if inventory.container is not None else None
    if auth is not None and auth.password_env:
        import os

        password = os.environ.get(auth.password_env, "")
        if len(password) >= 4:
            values.add(password)
    return values
