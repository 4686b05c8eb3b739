"""The heal half of the run's engine (node/engine.py): what a run that heals itself does with a failed
attempt (issue 35). The only code that decides it: the controller (backends/healing.py, an attached
run) and the master node's supervisor (node/engine.Engine, a detached run) both call `decide`.
Runs on the nodes too, so: the standard library only, Python 3.8+, shipped beside node_agent.py. Pure.

One table, cause -> response:
- `node`: the failure is the node's (its GPU, its network, its disk, its kernel killed a rank): that
  host is left out of the run and a spare takes its place (or the job goes on with fewer nodes,
  down to `job.min_nodes`). The first host still in use is the master.
- `job`: the failure is the job's own (an import error, the model's CUDA OOM, bad arguments): any
  node would fail alike, so the run ends at once, as without `restarts`.
- `transient`: nobody is to blame (the rendezvous or a collective timed out with no node named):
  relaunched on the same nodes.
A cause not in the table is a job fault (nothing is retried that nobody understood). The inventory's
`job.heal: {CAUSE: node | job | transient}` overrides a row (the table travels to the nodes as data).

A failure is {"host", "at", "lost", "exit_code", "tail"} as the supervisor heard it, or {"host",
"cause"} where the controller's diagnosis (watch/failures.py) named its cause already.
"""
import base64
import fnmatch
import json
import os
import re
from collections import namedtuple

if __package__:  # imported by the controller
    from clusterctl.node.safe_files import Dir, Refused
else:  # run on a node, safe_files.py shipped beside it (run/supervision.BESIDE_AGENT)
    from safe_files import Dir, Refused

RUNS_ON_NODES = True
RESPONSES = ("node", "job", "transient")
BACKOFF_S = (1.0, 10.0, 30.0, 60.0)  # before relaunch 1, 2, 3, then every later one

TABLE = {
    # the node's own fault: leave it out
    "node_unreachable": "node", "gpu_xid": "node", "ecc_error": "node", "fabricmanager": "node",
    "ib_config": "node", "nic_mismatch": "node", "disk_full": "node", "oom_killed": "node",
    "killed_by_signal": "node", "container_lost_gpu": "node", "docker_no_gpu_runtime": "node",
    "driver_too_old": "node", "shm_too_small": "node", "p2p_unsupported": "node",
    "slurm_gres_config": "node",
    "ssh_failed": "node", "driver_library_mismatch": "node", "nccl_topo_file": "node", "container_start_failed": "node",
    "gpu_leases_held": "node",  # a spare whose GPUs another run holds (node_healing.launch): the next one joins
    # nobody to blame: relaunch on the same nodes
    "rdzv_unreachable": "transient", "nccl_timeout_slow_rank": "transient", "rank_hang": "transient",
    "nccl_socket_error": "transient", "port_in_use": "transient",
    # the job's own fault: every node would fail alike
    "import_error": "job", "cuda_oom": "job", "launcher_args": "job", "launcher_missing": "job",
    "config_divisibility": "job", "slurm_request_invalid": "job",
    "gpu_ordinal": "job", "duplicate_gpu": "job", "version_mismatch": "job", "library_too_old": "job",
    "nccl_too_old": "job", "permission_denied": "job", "segfault": "job", "unknown": "job",
    "platform_backend_unsupported": "job", "hostname_unresolvable": "job", "image_pull_failed": "job",
    "insufficient_resources": "job", "shm_permission": "job",
    "sighup_session_closed": "job", "collective_mismatch": "job", "duplicate_host": "job",
    "gpu_arch_unsupported": "job", "net_plugin_incompatible": "job",
    "extension_build_failed": "job", "ddp_unused_parameters": "job", "job_code_error": "job", "library_bug": "job",
    "mpi_pmi_missing": "job", "mpi_gpu_support_missing": "job",
}

# (cause, pattern) in order: the first that matches a failed node's log tail names its cause, where no
# diagnosis named it (on the nodes). Patterns as diagnose/rules.py's for the same causes
# (tests/unit/test_engine.py checks they agree).
CAUSES = (
    ("oom_killed", r"Out of memory: Kill|invoked oom-killer|\boom[-_]kill|OOMKilled|Memory cgroup out of memory"),
    # torchrun's report; the rank wrapper of `none` and deepspeed (plan/launcher.py): 137 is sh's 128 + SIGKILL
    ("killed_by_signal", r"(?:exitcode|exit code|return code|exit status)\s*[:=]?\s*-9\b|Signal 9 \(SIGKILL\)"
                         r"|Signals\.SIGKILL|signal 9: SIGKILL|clusterctl: the (?:job|rank) exited with code 137\b"),
    ("import_error", r"ModuleNotFoundError: No module named|ImportError: "),
    ("cuda_oom", r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError: CUDA"),
    ("rdzv_unreachable", r"RendezvousConnectionError|RendezvousTimeoutError|client socket has timed out"
                         r"|connection to the C10d store has failed|Connection refused to \S*MASTER"
                         r"|DistStoreError: .*(?:Timed out|timeout)"),
    ("nccl_timeout_slow_rank", r"Watchdog caught collective operation timeout|collective operation timeout"
                               r"|Timed out waiting \d+ ?ms for (?:send|recv) operation to complete"),
    ("launcher_args", r"error: unrecognized arguments|error: the following arguments are required"),
    ("gpu_leases_held", r"^clusterctl: GPU leases held on this node"),  # node_healing.LEASES_HELD, said by us
)


class Verdict(namedtuple("Verdict", "response cause host")):
    """What to do with one attempt's failures: `response` (node | job | transient), the cause it was
    read from, and the host a node fault blames."""

    def says(self):
        where = f" on {self.host}" if self.host else ""
        return {"node": f"{self.host} lost ({self.cause})", "transient": f"{self.cause}{where}, no node to blame",
                "job": f"{self.cause}{where} is the job's own fault: not retried"}[self.response]


# The heal's answer to one attempt's end: `relaunch` (then `says` what is done, on `active` after
# `backoff_s`), or not (then `why` not, None where the run simply succeeded or was stopped).
Decision = namedtuple("Decision", "relaunch says why verdict active spares excluded backoff_s")


def cause_of(failure):
    """The cause of one failure: the one named already, a node silent -> node_unreachable, else the
    first pattern its log tail matches, else unknown."""
    if failure.get("cause"):
        return failure["cause"]
    if failure.get("lost"):
        return "node_unreachable"
    tail = failure.get("tail") or ""
    for cause, pattern in CAUSES:
        if re.search(pattern, tail, re.MULTILINE):
            return cause
    return "unknown"


def response_of(cause, table=()):
    """The table's row for `cause`, with `table`'s rows (the inventory's `job.heal`) over TABLE's."""
    return dict(table).get(cause) or TABLE.get(cause, "job")


def verdict(failures, table=()):
    """The Verdict of an attempt's failures (in the order they were heard): a node fault anywhere blames
    its node (a lost or killed node explains its peers' errors); else the earliest failure's response
    (a node fault without a host is transient: nothing can be left out). No failure: a job fault."""
    named = [(f, cause_of(f)) for f in failures]
    for failure, cause in named:
        if response_of(cause, table) == "node" and failure.get("host"):
            return Verdict("node", cause, failure["host"])
    if not named:
        return Verdict("job", "unknown", None)
    failure, cause = min(named, key=lambda fc: fc[0].get("at") or 0)
    response = response_of(cause, table)
    return Verdict("transient" if response == "node" else response, cause, failure.get("host"))


def failure_of(first_failure):
    """The controller's first failure (watch/failures.py: host, rank, diagnosis) as a failure here."""
    if not first_failure:
        return []
    diagnosis = (first_failure.get("diagnosis") or [{}])[0]
    return [{"host": first_failure.get("host") or diagnosis.get("host"), "cause": diagnosis.get("cause") or "unknown"}]


def leave_out(active, spares, blamed, granted=False):
    """(hosts in use, spares, who joins) once `blamed` is out and the first spare took its place; who
    joins is None without a spare (`granted`: a scheduler grants another node in its place)."""
    active = [h for h in active if h != blamed]
    spares = [h for h in spares if h != blamed]
    if not spares:
        return active, spares, "another node of the allocation" if granted else None
    return active + spares[:1], spares[1:], spares[0]


def replan(active, spares, blamed, min_nodes, nproc, divides=None, granted=False):
    """(hosts in use, spares, None) once `blamed` is left out and the first spare took its place (or
    fewer nodes, down to min_nodes), or (None, None, why not). The first host in use is the master."""
    active, spares, joined = leave_out(active, spares, blamed, granted)
    if joined is None and (not min_nodes or len(active) < min_nodes):
        need = f"job.min_nodes is {min_nodes}" if min_nodes else "job.min_nodes is not set"
        return None, None, (f"no spare host is left and {len(active)} node(s) remain ({need}): set job.min_nodes, "
                            "or add a spare host beyond job.nodes")
    world = sum(int(nproc.get(h, 1)) for h in active)
    if divides and world % int(divides):
        return None, None, f"the world size would be {world}, which job.world_size_divides ({divides}) does not divide"
    return active, spares, None


def decide(ended, failures, attempt, rules, active, spares, granted=False, progress=(None,)):
    """The run's fate once attempt `attempt` ended (`ended`: succeeded | stopped | failed, with the
    failures heard). `rules`: "table", "restarts", "min_nodes", "nproc", "world_size_divides", "backoff_s".
    `progress`: every failed attempt's `progress_of` so far, this one's last. An attempt without
    progress counts double against job.restarts, and two in a row end the run: it never loops."""
    if ended != "failed":
        return Decision(False, None, None, None, active, spares, [], None)
    found = verdict(failures, rules.get("table") or ())
    restarts = int(rules.get("restarts") or 0)
    if found.response == "job":
        return Decision(False, None, found.says(), found, active, spares, [], None)
    progress = list(progress) or [None]
    if len(progress) >= 2 and progress[-1] is False and progress[-2] is False:
        why = (f"{found.says()}, and attempts {attempt - 1} and {attempt} in a row made no progress "
               "(no newer complete checkpoint, or the same first failure again): a relaunch would loop")
        return Decision(False, None, why, found, active, spares, [], None)
    spent = sum(2 if made is False else 1 for made in progress)
    if attempt > restarts or spent > restarts:
        double = f" ({spent} counted: an attempt without progress counts double)" if spent > attempt else ""
        why = f"{found.says()}, and the {restarts} restart(s) of job.restarts are spent{double}"
        return Decision(False, None, why, found, active, spares, [], None)
    pause = backoff_of(attempt, rules.get("backoff_s") or BACKOFF_S)
    if found.response == "transient":
        return Decision(True, found.says(), None, found, active, spares, [], pause)
    excluded = [{"host": found.host, "cause": found.cause}]
    _, _, joined = leave_out(active, spares, found.host, granted)
    kept, left, refused = replan(active, spares, found.host, rules.get("min_nodes"), rules.get("nproc") or {},
                                 rules.get("world_size_divides"), granted)
    if refused:
        return Decision(False, None, f"{found.says()}, {refused}", found, active, spares, excluded, None)
    joins = f", {joined} joins" if joined else f", going on with {len(kept)} node(s) (job.min_nodes)"
    return Decision(True, found.says() + joins, None, found, kept, left, excluded, pause)


def progress_of(checkpointed, resumed_from, newest, first_failure, earlier_failure):
    """Whether an attempt moved the run on. With `job.checkpoint` (`checkpointed`): a complete
    checkpoint newer than the one it resumed from. Without: a first failure other than the attempt
    before's (None: the first attempt, nothing to compare; the same cause, host and evidence line is
    the same failure at the same step)."""
    if checkpointed:
        return bool(newest) and (not resumed_from or natural(step_of(newest)) > natural(step_of(resumed_from)))
    if earlier_failure is None or first_failure is None:
        return None
    return failure_key(first_failure) != failure_key(earlier_failure)


def step_of(path):
    return (path or "").rstrip("/").rsplit("/", 1)[-1]


def failure_key(first_failure):
    """(host, cause, evidence) of a first failure ({"host", "diagnosis": [{"cause", "evidence"}]})."""
    diagnosis = (first_failure.get("diagnosis") or [{}])[0] if isinstance(first_failure, dict) else {}
    return (first_failure.get("host") if isinstance(first_failure, dict) else None,
            diagnosis.get("cause"), (diagnosis.get("evidence") or "").strip())


def backoff_of(attempt, backoff=BACKOFF_S):
    """The pause before the attempt after `attempt`."""
    return float(backoff[min(attempt, len(backoff)) - 1])


# ---- the next attempt's values: one substitution, the controller's relaunch and the keepers' alike

def substitute(text, values):
    """`text` with each @TOKEN.name@ replaced ({"@TOKEN.nnodes@": "2", ...})."""
    for token, value in values.items():
        text = text.replace(token, value)
    return text


def launch_values(token, active, host, addresses, nproc, attempt, checkpoint, gpus=None):
    """What the tokens of `host`'s template (plan/launch_plan.py) become in an attempt on `active` (the
    first is the master); `gpus`: each host's planned GPU ordinals (None on CPU)."""
    master, gpus = addresses[active[0]], gpus or {}
    counts = [int(nproc.get(h, 1)) for h in active]
    return {f"@{token}.nnodes@": str(len(active)), f"@{token}.node_rank@": str(active.index(host)),
            f"@{token}.first_rank@": str(sum(counts[:active.index(host)])),
            f"@{token}.master@": f"[{master}]" if ":" in master else master, f"@{token}.master_host@": active[0],
            f"@{token}.world_size@": str(sum(counts)),
            f"@{token}.hostfile@": hostfile([(addresses[h], n) for h, n in zip(active, counts)]),
            f"@{token}.world_info@": world_info([(h, gpus.get(h), n) for h, n in zip(active, counts)]),
            f"@{token}.attempt@": str(attempt), f"@{token}.checkpoint@": checkpoint or ""}


def hostfile(nodes):
    """mpirun's hostfile of [(address, ranks)] in node-rank order."""
    return "".join(f"{address} slots={slots}\n" for address, slots in nodes)


def world_info(nodes):
    """DeepSpeed launch.py's --world_info of [(host, GPU ordinals or None, ranks)] in node-rank order:
    {host: [device ids]} as JSON in URL-safe base64 (its runner.py's encode_world_info)."""
    hosts = {host: list(gpus[:nproc] if gpus else range(nproc)) for host, gpus, nproc in nodes}
    return base64.urlsafe_b64encode(json.dumps(hosts).encode()).decode()


def attempt_env(attempt, checkpoint):
    """The variables that tell a job which attempt it is and where to resume (none without a checkpoint)."""
    return (("CLUSTERCTL_ATTEMPT", str(attempt)),) + ((("CLUSTERCTL_CHECKPOINT", checkpoint),) if checkpoint else ())


def natural(name):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


# A checkpoint's directory name as it may reach an env file (CLUSTERCTL_CHECKPOINT): plain characters
# only; a newline in a name the job (or anyone who can write there) chose would inject a variable.
CHECKPOINT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}\Z")


def checkpoint_name_ok(name):
    return bool(CHECKPOINT_NAME.match(name or ""))


def complete_steps(root, complete, refused=None):
    """The names under `root` that are complete checkpoints, oldest first (natural order): a directory
    (not a link), ours (this process's uid), with a plain name, holding a regular file matching
    `complete`. Each one passed over for its name, kind or owner is appended to `refused` (why).
    Read through the no-follow layer (safe_files.py, shipped beside): a step the job turned into a link
    is named, never entered."""
    try:
        where = Dir.open(root)
    except (OSError, Refused):
        return []
    found = []
    with where:
        for entry in where.entries():
            name = entry.name
            if name.startswith(".") or entry.kind not in ("dir", "link"):
                continue  # a hidden name is no step (the replicas' own directory is one)
            why = ("its name has characters other than letters, digits and ._+-" if not checkpoint_name_ok(name)
                   else "it is a symbolic link" if entry.kind == "link"
                   else f"it is owned by uid {entry.uid}, not {os.geteuid()}" if entry.uid != os.geteuid() else None)
            if why:
                if refused is not None:
                    refused.append(f"{name!r:.80} under {root}: not used as a checkpoint, {why}")
                continue
            if _marked(where, name, complete):
                found.append(name)
    return sorted(found, key=natural)


def marked(path, complete):
    """Whether the directory `path` holds a regular file (not a link) whose name matches `complete`."""
    parent, name = os.path.split(os.path.normpath(path))
    try:
        with Dir.open(parent or ".") as where:
            return _marked(where, name, complete)
    except (OSError, Refused):
        return False


def _marked(where, name, complete):
    try:
        with where.sub(name) as step:
            return any(e.kind == "file" for e in step.entries() if fnmatch.fnmatch(e.name, complete))
    except (OSError, Refused):
        return False


def latest_checkpoint(spec, refused=None):
    """The newest complete checkpoint under spec["dir"] (complete_steps), as
    the controller finds it (node/run_files.py `checkpoints`, heal/hooks.checkpoint_on); None without one."""
    if not spec:
        return None
    steps = complete_steps(spec["dir"], spec["complete"], refused)
    return f"{spec['dir'].rstrip('/')}/{steps[-1]}" if steps else None
