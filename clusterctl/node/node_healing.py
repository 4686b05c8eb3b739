"""A detached run that heals itself (issue 35): what the supervisor and the keepers of node/node_agent.py
do on the cluster, with no clusterctl on the controller, that backends/healing.py does for an attached
run. Runs on the nodes, so: the standard library only, Python 3.8+, shipped beside node_agent.py.

The controller decides everything it can at hand-over (heal/detached.py) and writes it into
each node's supervision.json under "heal": the cause -> response table (ground/healing.py's TABLE with
the inventory's `job.heal` overrides: one table, shipped as data), `restarts`, `min_nodes`, the
backoff, the hosts in use and the spares (in order: the first in use is the master), each host's
ranks and job-network address, `job.checkpoint`, and for that node alone its launch TEMPLATE: the
torchrun argv and environment of the run with tokens for what a relaunch changes (nnodes, node rank,
master address, world size, attempt, checkpoint). Here:

- `cause_of`/`verdict` name a failed attempt's cause from what the supervisor heard (a node silent
  -> node_unreachable; its torchrun's log tail: a SIGKILL, the OOM killer, an import error, a
  rendezvous or collective timeout; else unknown) and blame: a node fault anywhere first (a lost or
  killed node explains its peers' errors), else the earliest failure's response.
- `replan` leaves the blamed host out for good and takes the first spare (or goes on with fewer
  nodes down to min_nodes); the first host still in use is the master.
- `Healer` wraps one Supervisor per attempt: when an attempt fails it waits for the survivors to
  stop (the attempt's supervisor tells them), classifies, backs off and orders the next attempt's
  launch from each keeper's beat; `launch` is what a keeper then does on its node: the last
  attempt's files set aside as RUN_DIR.attempt-N (where collect-logs looks), the env written, the
  wrapper (plan/wrapper.py's) started.
The supervisor lives on the first master. Losing that node ends the run as before (every lease runs
out); losing any other node, or the master's ranks while its node lives, is healed.
"""
import glob
import json
import os
import re
import subprocess
import threading
import time

RUNS_ON_NODES = True
ATTEMPT_FILE = "attempt"  # the attempt a node's run dir holds (absent: 1, launched by the controller)
# what stays in the run dir when an attempt is set aside: the supervisor's and keeper's own files
DAEMON_FILES = ("node_agent.py", "node_healing.py", "supervision.json", "supervisor.json", "supervisor.json.tmp",
                "supervise.log", "keep.log")
END_WAIT_S = 5.0  # once over: the keepers are told to end for this long at most

# (cause, pattern) in order: the first that matches a failed node's log tail names its cause. Patterns
# as diagnose/rules.py's for the same causes (tests/test_node_healing.py checks they agree).
CAUSES = (
    ("oom_killed", r"Out of memory: Kill|invoked oom-killer|\boom[-_]kill|OOMKilled|Memory cgroup out of memory"),
    ("killed_by_signal", r"(?:exitcode|exit code|return code|exit status)\s*[:=]?\s*-9\b|Signal 9 \(SIGKILL\)"
                         r"|Signals\.SIGKILL|signal 9: SIGKILL"),
    ("import_error", r"ModuleNotFoundError: No module named|ImportError: "),
    ("cuda_oom", r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError: CUDA"),
    ("rdzv_unreachable", r"RendezvousConnectionError|RendezvousTimeoutError|client socket has timed out"
                         r"|connection to the C10d store has failed|Connection refused to \S*MASTER"
                         r"|DistStoreError: .*(?:Timed out|timeout)"),
    ("nccl_timeout_slow_rank", r"Watchdog caught collective operation timeout|collective operation timeout"
                               r"|Timed out waiting \d+ ?ms for (?:send|recv) operation to complete"),
    ("launcher_args", r"error: unrecognized arguments|error: the following arguments are required"),
)


# ---- classification and replanning (pure)

def cause_of(failure):
    """The cause of one failure the supervisor heard: {"host", "lost", "exit_code", "tail"}."""
    if failure.get("lost"):
        return "node_unreachable"
    tail = failure.get("tail") or ""
    for cause, pattern in CAUSES:
        if re.search(pattern, tail, re.MULTILINE):
            return cause
    return "unknown"


def response_of(cause, table):
    return table.get(cause) or "job"


def verdict(failures, table):
    """(response, cause, host) of an attempt's failures (in the order they were heard): a node fault
    anywhere blames its node; else the earliest failure's response (a node fault without a host is
    transient: nothing can be left out). No failure: a job fault (nothing understood, nothing retried)."""
    named = [(f, cause_of(f)) for f in failures]
    for failure, cause in named:
        if response_of(cause, table) == "node" and failure.get("host"):
            return "node", cause, failure["host"]
    if not named:
        return "job", "unknown", None
    failure, cause = min(named, key=lambda fc: fc[0].get("at") or 0)
    response = response_of(cause, table)
    return ("transient" if response == "node" else response), cause, failure.get("host")


def says(response, cause, host):
    """As ground/healing.Verdict.says."""
    where = f" on {host}" if host else ""
    return {"node": f"{host} lost ({cause})", "transient": f"{cause}{where}, no node to blame",
            "job": f"{cause}{where} is the job's own fault: not retried"}[response]


def replan(active, spares, blamed, min_nodes, nproc, divides=None):
    """(hosts in use, spares, None) once `blamed` is left out and the first spare took its place (or
    fewer nodes, down to min_nodes), or (None, None, why not). The first host in use is the master."""
    active = [h for h in active if h != blamed]
    spares = [h for h in spares if h != blamed]
    if spares:
        active, spares = active + spares[:1], spares[1:]
    elif not min_nodes or len(active) < min_nodes:
        need = f"job.min_nodes is {min_nodes}" if min_nodes else "job.min_nodes is not set"
        return None, None, (f"no spare host is left and {len(active)} node(s) remain ({need}): set job.min_nodes, "
                            "or add a spare host beyond job.nodes")
    world = sum(int(nproc.get(h, 1)) for h in active)
    if divides and world % int(divides):
        return None, None, f"the world size would be {world}, which job.world_size_divides ({divides}) does not divide"
    return active, spares, None


def substitute(text, values):
    """`text` with each @TOKEN.name@ replaced ({"@TOKEN.nnodes@": "2", ...})."""
    for token, value in values.items():
        text = text.replace(token, value)
    return text


def launch_values(token, active, host, addresses, nproc, attempt, checkpoint):
    """What the tokens of `host`'s template become in an attempt on `active` (the first is the master)."""
    master = addresses[active[0]]
    return {f"@{token}.nnodes@": str(len(active)), f"@{token}.node_rank@": str(active.index(host)),
            f"@{token}.master@": f"[{master}]" if ":" in master else master,
            f"@{token}.world_size@": str(sum(int(nproc.get(h, 1)) for h in active)),
            f"@{token}.attempt@": str(attempt), f"@{token}.checkpoint@": checkpoint or ""}


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


# ---- the keeper's side: launch the next attempt on this node

def attempt_of(run_dir):
    try:
        with open(os.path.join(run_dir, ATTEMPT_FILE)) as f:
            return int(f.read().strip() or 1)
    except (OSError, ValueError):
        return 1


def set_aside(run_dir, attempt):
    """Every file of the last attempt into RUN_DIR.attempt-N (the daemons' own files stay)."""
    moving = [n for n in os.listdir(run_dir) if n not in DAEMON_FILES]
    if "agent.pid" not in moving:  # a spare joining: nothing ran here (its empty env is written again)
        return
    aside = f"{run_dir.rstrip('/')}.attempt-{attempt}"
    os.makedirs(aside, mode=0o700, exist_ok=True)
    for name in moving:
        os.replace(os.path.join(run_dir, name), os.path.join(aside, name))


def launch(run_dir, config, order):
    """Start attempt order["attempt"] on this node: set the last one aside, write its env, start the
    wrapper (without the run's marker: only torchrun carries it, see plan/wrapper.py). Never twice."""
    heal = config["heal"]
    attempt = int(order["attempt"])
    if attempt <= attempt_of(run_dir) or os.path.exists(os.path.join(run_dir, "stopped")):
        return False
    set_aside(run_dir, attempt_of(run_dir))
    values = order["values"]
    env = [(k, substitute(v, values)) for k, v in heal["template"]["env"]]
    env = [(k, v) for k, v in env if v or k != "CLUSTERCTL_CHECKPOINT"]
    descriptor = os.open(os.path.join(run_dir, "env"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in env))
    with open(os.path.join(run_dir, ATTEMPT_FILE), "w") as f:
        f.write(f"{attempt}\n")
    argv = [substitute(a, values) for a in heal["template"]["argv"]]
    clean = {k: v for k, v in os.environ.items() if k not in heal["marker_names"]}
    # `setsid -f` forks: the wrapper is nobody's child here (no zombie under the keeper), as agent.start_command
    subprocess.run(["setsid", "-f", "sh", "-c", heal["wrapper"], "clusterctl-wrapper", run_dir, str(config["lease_s"]),
                    heal.get("workdir") or "", *heal.get("sampler_args", ()), *argv], env=clean, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    print(f"attempt {attempt} launched on this node", flush=True)
    return True


# ---- the supervisor's side

class Healer:
    """The supervisor of a run that heals itself: one `make(config)` Supervisor per attempt, on the
    hosts in use; the same beat/tick/document as a Supervisor, so node_agent.serve runs either."""

    def __init__(self, config, run_dir, make, now=time.time):
        self.config, self.run_dir, self.make, self.now = config, run_dir, make, now
        self.heal = config["heal"]
        self.lock = threading.Lock()
        self.started = now()
        self.active, self.spares = list(self.heal["active"]), list(self.heal["spares"])
        self.attempt, self.attempts, self.excluded = 1, [], []
        self.inner = make(self._config(), run_dir, now)
        self.phase = "running"  # -> stopping (the failed attempt's ranks end) -> backoff -> running | over
        self.relaunch_at, self.over_at, self.reason, self.final_state = None, None, None, None
        self.last_seq, self.seen = {h: -1 for h in config["hosts"]}, {h: None for h in config["hosts"]}
        self.told_end, self.orders = set(), {}
        self.checkpoint, self.heal_refused = None, None

    def _config(self):
        config = {**self.config, "hosts": list(self.active)}
        if config.get("timeout_s"):  # `run --timeout` counts from the first attempt's start
            config["timeout_s"] = max(1.0, float(config["timeout_s"]) - (self.now() - self.started))
        return config

    # -- one keeper's report
    def beat(self, message):
        host, seq = message.get("host"), message.get("seq")
        with self.lock:
            if host not in self.last_seq or not isinstance(seq, int) or seq <= self.last_seq[host]:
                return None
            self.last_seq[host], self.seen[host] = seq, self.now()
            if message.get("stopped") and self.phase != "over":  # `clusterctl stop` marked this node
                self._over("stopped", "the run was stopped by `clusterctl stop`")
            ours = host in self.inner.nodes and int(message.get("attempt") or 1) == self.attempt
            answer = self.inner.beat(message) if ours else None
            if answer is None:
                out = self.phase == "over" or host in {e["host"] for e in self.excluded}
                answer = {"seq": seq, "stop": out, "reason": self.reason or "left out of the run", "ack": False}
            return self._answered(host, message, answer)

    def _answered(self, host, message, answer):
        over = self.phase == "over"
        idle = message.get("exit_code") is None and not message.get("ranks") and host not in self.orders
        answer["ack"] = bool(answer.get("ack")) and over
        answer["end"] = over and (answer["ack"] or idle or host not in self.inner.nodes)
        if answer["ack"] or answer["end"]:
            self.told_end.add(host)
        order = self.orders.get(host)
        if order and not over and int(message.get("attempt") or 1) < order["attempt"]:
            answer["launch"] = order
        answer["attempt"] = self.attempt
        return answer

    # -- the main loop's turn; True once the supervisor may end
    def tick(self):
        with self.lock:
            if self.phase == "running":
                drained = self.inner.tick()
                if self.inner.state == "failed" and not self.inner.timed_out:
                    self.phase = "stopping"
                elif self.inner.state != "running":
                    self._over(self.inner.state, self.inner.stop_reason)
                    return self._may_end(drained)
            if self.phase == "stopping" and self.inner.tick():
                self._decide()
            if self.phase == "backoff" and self.now() >= self.relaunch_at:
                self._relaunch()
            return self.phase == "over" and self._may_end(self.inner.tick())

    def _may_end(self, drained):
        alive = [h for h in self.last_seq if h not in {e["host"] for e in self.excluded}]
        return drained and (all(h in self.told_end for h in alive) or self.now() - self.over_at > END_WAIT_S)

    def _over(self, state, reason):
        self.phase, self.final_state, self.reason, self.over_at = "over", state, reason, self.now()
        self.orders = {}
        if self.inner.state == "running":  # a stop between two attempts: the attempt's nodes are told too
            self.inner._end(state, reason)

    def _decide(self):
        """The failed attempt's ranks have ended (or their nodes are silent): relaunch or end."""
        failures = [f for f in self.inner.failures if (f.get("at") or 0) <= (self.inner.ended or 0)]
        failures += [{"host": h, "lost": True, "at": self.inner.ended} for h, n in self.inner.nodes.items()
                     if n["exit_code"] is None and not n["lost"]]  # never reported its end: silent
        response, cause, host = verdict(failures, self.heal["table"])
        entry = self._entry(failures, cause, host)
        self.attempts.append(entry)
        why = None
        if response == "job":
            why = says(response, cause, host)
        elif self.attempt > int(self.heal["restarts"]):
            why = f"{says(response, cause, host)}, and the {self.heal['restarts']} restart(s) of job.restarts are spent"
        elif response == "node":
            active, spares, refused = replan(self.active, self.spares, host, self.heal.get("min_nodes"),
                                             self.heal["nproc"], self.heal.get("world_size_divides"))
            self.excluded.append({"host": host, "cause": cause})
            entry["excluded"] = [{"host": host, "cause": cause}]
            if refused:
                why = f"{says(response, cause, host)}, {refused}"
            else:
                self.active, self.spares = active, spares
        if why:
            self.inner.stop_reason = f"not relaunched: {why}"
            self._over("failed", self.inner.stop_reason)
            self.heal_refused = why
            return
        backoff = self.heal["backoff_s"]
        self.relaunch_at = self.now() + float(backoff[min(self.attempt, len(backoff)) - 1])
        self.phase = "backoff"
        print(f"attempt {self.attempt}: {says(response, cause, host)}; relaunching on {', '.join(self.active)}", flush=True)

    def _entry(self, failures, cause, host):
        first = {"host": host, "rank": None, "diagnosis": [{"cause": cause, "host": host, "rank": None,
                                                             "evidence": _evidence(failures, host)}]}
        return {"attempt": self.attempt, "started": self.inner.started, "ended": self.inner.ended,
                "hosts": list(self.inner.nodes), "exit_code": 1, "first_failure": first, "excluded": [],
                "relaunch_s": None, "checkpoint": self.checkpoint}

    def _relaunch(self):
        self.attempt += 1
        self.checkpoint = latest_checkpoint(self.heal.get("checkpoint"))
        heal, token = self.heal, self.heal["token"]
        self.orders = {h: {"attempt": self.attempt, "values": launch_values(
            token, self.active, h, heal["addresses"], heal["nproc"], self.attempt, self.checkpoint)}
            for h in self.active}
        self.inner = self.make(self._config(), self.run_dir, self.now)
        self.phase = "running"

    def document(self, final=False):
        with self.lock:
            document = self.inner.document(final)
            if self.phase != "over":
                document.update(state="running", reason=None, ended=None)
            else:
                document.update(state=self.final_state, reason=self.reason)
            current = {"attempt": self.attempt, "started": self.inner.started, "ended": self.inner.ended,
                       "hosts": list(self.inner.nodes), "exit_code": {"succeeded": 0}.get(document["state"]),
                       "first_failure": None, "excluded": [], "checkpoint": self.checkpoint,
                       "relaunch_s": None}
            attempts = self.attempts + ([current] if self.phase == "running" or self.attempt > len(self.attempts)
                                        else [])
            for before, after in zip(attempts, attempts[1:]):
                if before.get("ended") and after.get("started"):
                    after["relaunch_s"] = round(after["started"] - before["ended"], 1)
            for host, seen in self.seen.items():  # the spares and the hosts left out: heard, not in use
                if host not in document["nodes"]:
                    document["nodes"][host] = {"exit_code": None, "stopped": False, "lost": False, "ranks": 0,
                                               "silent_s": None, "in_use": False,
                                               "seen_s_ago": round(self.now() - seen, 1) if seen else None}
            document.update(started=self.started, attempt=self.attempt, attempts=attempts,
                            excluded=list(self.excluded), phase=self.phase, hosts_in_use=list(self.active),
                            heal_refused=self.heal_refused)
            return document


def _evidence(failures, host):
    for failure in failures:
        if failure.get("host") == host:
            if failure.get("lost"):
                return f"{host} stopped answering the run's supervisor"
            lines = [line for line in (failure.get("tail") or "").splitlines() if line.strip()]
            return lines[-1][:300] if lines else f"exit {failure.get('exit_code')}"
    return ""
