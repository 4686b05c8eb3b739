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
import glob
import json
import os
import re
from collections import namedtuple

RUNS_ON_NODES = True
RESPONSES = ("node", "job", "transient")
BACKOFF_S = (1.0, 10.0, 30.0, 60.0)  # before relaunch 1, 2, 3, then every later one

TABLE = {
    # the node's own fault: leave it out
    "node_unreachable": "node", "gpu_xid": "node", "ecc_error": "node", "fabricmanager": "node",
    "ib_config": "node", "nic_mismatch": "node", "disk_full": "node", "oom_killed": "node",
    "killed_by_signal": "node", "container_lost_gpu": "node", "docker_no_gpu_runtime": "node",
    "driver_too_old": "node", "shm_too_small": "node", "p2p_unsupported": "node",
    # nobody to blame: relaunch on the same nodes
    "rdzv_unreachable": "transient", "nccl_timeout_slow_rank": "transient", "rank_hang": "transient",
    "nccl_socket_error": "transient", "port_in_use": "transient",
    # the job's own fault: every node would fail alike
    "import_error": "job", "cuda_oom": "job", "launcher_args": "job", "launcher_missing": "job",
    "config_divisibility": "job",
    "gpu_ordinal": "job", "duplicate_gpu": "job", "version_mismatch": "job", "library_too_old": "job",
    "nccl_too_old": "job", "permission_denied": "job", "segfault": "job", "unknown": "job",
    "platform_backend_unsupported": "job", "hostname_unresolvable": "job", "image_pull_failed": "job",
    "insufficient_resources": "job", "shm_permission": "job",
    "sighup_session_closed": "job", "collective_mismatch": "job", "duplicate_host": "job",
    "gpu_arch_unsupported": "job",
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


def decide(ended, failures, attempt, rules, active, spares, granted=False):
    """The run's fate once attempt `attempt` ended (`ended`: succeeded | stopped | failed, with the
    failures heard). `rules`: "table", "restarts", "min_nodes", "nproc", "world_size_divides", "backoff_s"."""
    if ended != "failed":
        return Decision(False, None, None, None, active, spares, [], None)
    found = verdict(failures, rules.get("table") or ())
    restarts = int(rules.get("restarts") or 0)
    if found.response == "job":
        return Decision(False, None, found.says(), found, active, spares, [], None)
    if attempt > restarts:
        why = f"{found.says()}, and the {restarts} restart(s) of job.restarts are spent"
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


def latest_checkpoint(spec):
    """The newest complete checkpoint under spec["dir"] (a subdirectory holding a file matching
    spec["complete"]), as ground/healing.latest_checkpoint_command finds it; None without one."""
    if not spec:
        return None
    root = spec["dir"]
    try:
        names = [n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n))]
    except OSError:
        return None
    complete = [n for n in names if glob.glob(os.path.join(glob.escape(os.path.join(root, n)), spec["complete"]))]
    return f"{root.rstrip('/')}/{max(complete, key=natural)}" if complete else None
