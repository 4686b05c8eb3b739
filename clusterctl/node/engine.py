"""The run's engine: the only code that decides a run's fate (issue 46). Fail fast (a node whose
launcher failed -> after SETTLE_S for the others to report, the run ends failed), a lost node (silent
for `lost_after_s`, the inventory's `job.lost_after`), the run's timeout, the stall verdict (every rank
silent for `stall_timeout_s`: reported stalled; a hang named from the stacks is an event that ends
it), `clusterctl stop`, and, for a run that heals itself, the heal (node/heal_policy.py: classify,
choose the hosts, back off, give up).

Pure: driven by what it is told (`beat`: a node's report, with the time on the `now` clock given;
`hang`: an observer's verdict) and by `tick` (the clock moved on); what it decided is its `state`
(running -> succeeded | failed | stopped, with `stop_reason`), the answer to each node ("stop",
"launch" attempt N with its values, "end") and its `document`. Two hosts run it, alike:
- attached, the controller (run/runner.py) holds an Attempt in-process, feeds it what its SSH polls
  read, and carries its end out (stop every rank, name the first failure); backends/healing.py asks
  heal_policy.decide between attempts and relaunches with its launcher;
- detached, the master node's supervisor (node/node_agent.py) holds an Engine (an Attempt per attempt
  and the heal around them); the keepers feed it over the signed endpoint and carry its answers out.
Runs on the nodes: the standard library only, Python 3.8+, shipped beside node_agent.py.
"""
import os
import threading
import time

if __package__:  # imported by the controller
    from clusterctl.node import checkpoint_copies, heal_policy, straggler_verdict
else:  # beside node_agent.py in a node's run dir (the script's directory is on sys.path)
    import checkpoint_copies
    import heal_policy
    import straggler_verdict

RUNS_ON_NODES = True
SETTLE_S = 3.0  # after a first failure: the others report before the run is stopped (the culprit is named)
DRAIN_S = 20.0  # after the run ended: the nodes' last reports (their ranks' exits) are awaited this long
NEVER_SEEN_S = 60.0  # a node whose keeper never reported by then is lost
TAIL_BYTES = 24000
END_WAIT_S = 5.0  # once over: the keepers are told to end for this long at most


class Attempt:
    """One attempt of a run on `config["hosts"]`: fail fast, lost nodes, timeout, stall, stop."""

    def __init__(self, config, run_dir=None, now=time.time):
        self.config, self.run_dir, self.now = config, run_dir, now
        self.lock = threading.Lock()
        self.started = now()
        self.nodes = {h: {"seen": None, "seq": -1, "exit_code": None, "stopped": False, "ranks": 0,
                          "silent_s": None, "lost": False, "ended_at": None, "tail": "", "health": None,
                          "released": False}
                      for h in config["hosts"]}
        # detached (node_agent.supervisor_of), the run's end waits for each node's word that its GPU leases
        # went (node_agent._keep): a final state never precedes a lease still held. Attached, the controller
        # releases them itself; an Engine's attempts leave it to the Engine (leases are kept across attempts)
        self.awaits_release = False
        self.stall_timeout_s = float(config.get("stall_timeout_s") or 0)
        self.timeout_s = float(config.get("timeout_s") or 0)  # `run --timeout`: the run is stopped past it
        self.timed_out, self.hung = False, False
        self.stalled_s = None  # no rank of any node wrote a byte for this long (>= stall_timeout_s)
        self.state = "running"  # -> succeeded | failed | stopped
        self.stop_reason = None
        self.first_failure_at = None
        self.ended = None
        self.failures = []  # [{"host", "exit_code", "at", "lost", "tail"}] in the order they were seen
        # detached: the keepers' py-spy samples (node_stragglers.py), the rank the others wait for named
        self.stragglers = straggler_verdict.Watch() if config.get("stragglers") else None

    # one report of a node's keeper; returns the answer (None: refused)
    def beat(self, message):
        host = message.get("host")
        with self.lock:
            node = self.nodes.get(host)
            if node is None or not isinstance(message.get("seq"), int) or message["seq"] <= node["seq"]:
                return None
            node["seq"], node["seen"] = message["seq"], self.now()
            node["released"] = node["released"] or bool(message.get("released"))
            node["ranks"] = int(message.get("ranks") or 0)
            silent = message.get("silent_s")
            node["silent_s"] = float(silent) if isinstance(silent, (int, float)) else None
            node["health"] = message["health"] if isinstance(message.get("health"), dict) else node["health"]
            if self.stragglers is not None:
                self.stragglers.heard(host, message.get("stragglers"))
            code = message.get("exit_code")
            if code is not None and node["exit_code"] is None:
                node["exit_code"], node["ended_at"] = int(code), self.now()
                node["stopped"] = bool(message.get("stopped"))
                node["tail"] = str(message.get("tail") or "")[-TAIL_BYTES:]
                if node["exit_code"] != 0 and not node["stopped"] and not node["lost"]:
                    self.failures.append({"host": host, "exit_code": node["exit_code"], "at": node["ended_at"],
                                          "lost": False, "tail": node["tail"]})
                    if self.first_failure_at is None:
                        self.first_failure_at = self.now()
                if node["stopped"] and self.state == "running":
                    self._end("stopped", "the run was stopped by `clusterctl stop`")
            stop = self.state != "running"
            return {"seq": message["seq"], "stop": stop, "reason": self.stop_reason if stop else None,
                    "ack": node["exit_code"] is not None}

    def tick(self):
        """Decide from what was heard; returns True once the supervisor may end."""
        with self.lock:
            now = self.now()
            for host, node in self.nodes.items():
                if node["lost"] or node["exit_code"] is not None:
                    continue
                silent = now - (node["seen"] if node["seen"] is not None else self.started)
                limit = self.config["lost_after_s"] if node["seen"] is not None else NEVER_SEEN_S
                if silent > limit and self.state == "running":
                    node["lost"], node["ended_at"] = True, now
                    self.failures.append({"host": host, "exit_code": None, "at": now, "lost": True,
                                          "tail": "", "silent_s": round(silent, 1)})
                    self._end("failed", f"{host} stopped answering for {silent:.0f}s")
            if self.state == "running" and self.timeout_s and now - self.started > self.timeout_s:
                self.timed_out = True
                self._end("failed", f"the job ran past --timeout {self.timeout_s:g}s")
            if self.state == "running":
                if self.first_failure_at is not None and (now - self.first_failure_at >= SETTLE_S or all(
                        n["exit_code"] is not None or n["lost"] for n in self.nodes.values())):
                    self._end("failed", f"{self.failures[0]['host']} failed (exit {self.failures[0]['exit_code']})")
                elif all(n["exit_code"] == 0 for n in self.nodes.values()):
                    self._end("succeeded", None)
            self.stalled_s = self._silence(now) if self.state == "running" else None
            if self.stragglers is not None and self.state == "running":
                self.stragglers.judge(now)
            if self.state == "running":
                return False
            pending = [n for n in self.nodes.values() if not n["lost"]
                       and (n["exit_code"] is None or (self.awaits_release and not n["released"]))]
            return not pending or now - self.ended > DRAIN_S

    def _silence(self, now):
        """How long no rank of any running node wrote a byte, once that reaches stall_timeout_s (else None).
        Each node measures its own silence on its own clock; the time since its report is added here."""
        if self.stall_timeout_s <= 0:
            return None
        running = [n for n in self.nodes.values() if n["exit_code"] is None and not n["lost"]]
        if not running or any(n["seen"] is None or n["silent_s"] is None for n in running):
            return None
        silent = min(n["silent_s"] + (now - n["seen"]) for n in running)
        return round(silent, 1) if silent >= self.stall_timeout_s else None

    @property
    def settling(self):
        """A node failed: the others are heard (asked at once, attached) before the run ends."""
        return self.state == "running" and self.first_failure_at is not None

    def hang(self, reason):
        """An observer's verdict from the ranks' stacks (watch/stalls.py): the run hangs; it ends failed."""
        with self.lock:
            if self.state == "running":
                self.hung = True
                self._end("failed", reason)

    def _end(self, state, reason):
        self.state, self.stop_reason, self.ended = state, reason, self.now()

    def document(self, final=False):
        with self.lock:
            nodes = {h: {k: n[k] for k in ("exit_code", "stopped", "lost", "ranks", "silent_s", "health")}
                     for h, n in self.nodes.items()}
            for h, n in self.nodes.items():
                nodes[h]["seen_s_ago"] = round(self.now() - n["seen"], 1) if n["seen"] is not None else None
            return {"run_id": self.config["run_id"], "state": self.state, "reason": self.stop_reason,
                    "started": self.started, "ended": self.ended, "final": final, "pid": os.getpid(),
                    "stall_timeout_s": self.stall_timeout_s, "stalled_s": self.stalled_s, "timed_out": self.timed_out,
                    "nodes": nodes, "failures": list(self.failures),
                    **({"stragglers": self.stragglers.found(), "straggler_problems": dict(self.stragglers.problems)}
                       if self.stragglers is not None else {})}


class Engine:
    """A run that heals itself: one Attempt per attempt (`make`), on the hosts in use, and the heal
    between them (heal_policy.decide); the same beat/tick/document as an Attempt, so node_agent.serve
    runs either. A keeper's answer carries its orders: "stop", "launch" (attempt N with its values,
    heal_policy.launch_values), "end"."""

    def __init__(self, config, run_dir=None, make=None, now=time.time):
        self.config, self.run_dir, self.make, self.now = config, run_dir, make or Attempt, now
        self.heal = config["heal"]
        self.lock = threading.Lock()
        self.started = now()
        self.active, self.spares = list(self.heal["active"]), list(self.heal["spares"])
        self.attempt, self.attempts, self.excluded = 1, [], []
        self.inner = self._attempt()
        # -> stopping (the failed attempt's ranks end) -> backoff -> (restoring: replicas) -> running | over
        self.phase = "running"
        self.relaunch_at, self.over_at, self.reason, self.final_state = None, None, None, None
        self.last_seq, self.seen = {h: -1 for h in config["hosts"]}, {h: None for h in config["hosts"]}
        self.released, self.orders = set(), {}  # hosts whose keepers said their GPU leases went
        self.checkpoint, self.heal_refused = None, None
        # job.checkpoint.replicas: the keepers' copies, the restore before a relaunch (issue 50)
        self.copies = checkpoint_copies.Copies(self.heal.get("checkpoint"))
        self.timings, self.marks = {}, {}  # where the current attempt's relaunch went: detection ... first step
        self.baseline = {}

    # the run's state and reason, as an Attempt's (node_agent.serve says them as the supervisor ends)
    @property
    def state(self):
        return self.final_state if self.phase == "over" else "running"

    @property
    def stop_reason(self):
        return self.reason

    def _attempt(self):
        return self.make(self._config(), self.run_dir, self.now)

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
            if message.get("released"):
                self.released.add(host)
            for event in self.copies.heard_from(host, message.get("checkpoints")):
                print(f"checkpoint replica on {event['host']}: {event['kind']}: {event['says']}", flush=True)
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
        order = self.orders.get(host)
        if order and not over and int(message.get("attempt") or 1) < order["attempt"]:
            answer["launch"] = order
        if self.phase == "restoring" and host in self.active and self.copies.order:
            answer["restore"] = self.copies.order
        answer["attempt"], answer["active"] = self.attempt, list(self.active)
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
                self._restore() if self.copies.on else self._relaunch(self.newest())
            if self.phase == "restoring":
                self._restoring()
            self._time_first_step()
            return self.phase == "over" and self._may_end(self.inner.tick())

    def _may_end(self, drained):
        alive = [h for h in self.last_seq if h not in {e["host"] for e in self.excluded}]
        return drained and (all(h in self.released for h in alive) or self.now() - self.over_at > END_WAIT_S)

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
        decided = self.now()
        found = heal_policy.verdict(failures, self.heal.get("table") or ())
        entry = self._entry(failures, found.cause, found.host)
        lost = [f.get("silent_s") for f in failures if f.get("lost") and f.get("silent_s") is not None]
        self.marks = {"detection_s": lost[0] if lost else 0.0,  # a rank's exit is reported within a beat
                      "stop_s": round(decided - (self.inner.ended or decided), 1)}
        spec = self.heal.get("checkpoint")
        entry["progress"] = heal_policy.progress_of(
            bool(spec), self.checkpoint, self.newest(), entry["first_failure"],
            self.attempts[-1]["first_failure"] if self.attempts else None)
        decision = heal_policy.decide("failed", failures, self.attempt, self.heal, self.active, self.spares,
                                      progress=[a.get("progress") for a in self.attempts] + [entry["progress"]])
        self.attempts.append(entry)
        self.excluded += decision.excluded
        entry["excluded"] = list(decision.excluded)
        if not decision.relaunch:
            self.inner.stop_reason = f"not relaunched: {decision.why}"
            self._over("failed", self.inner.stop_reason)
            self.heal_refused = decision.why
            return
        self.active, self.spares = list(decision.active), list(decision.spares)
        self.relaunch_at = self.now() + decision.backoff_s
        self.marks.update(replan_s=round(self.now() - decided, 3), backoff_s=decision.backoff_s)
        self.phase = "backoff"
        print(f"attempt {self.attempt}: {decision.says}; relaunching on {', '.join(self.active)}", flush=True)

    def _entry(self, failures, cause, host):
        first = {"host": host, "rank": None, "diagnosis": [{"cause": cause, "host": host, "rank": None,
                                                             "evidence": _evidence(failures, host)}]}
        return {"attempt": self.attempt, "started": self.inner.started, "ended": self.inner.ended,
                "hosts": list(self.inner.nodes), "exit_code": 1, "first_failure": first, "excluded": [],
                "relaunch_s": None, "checkpoint": self.checkpoint, "resumed_from": self.checkpoint, "progress": None,
                "timings": dict(self.timings), "replica_events": self._events_since()}

    def _events_since(self):
        """The replica events said while this attempt ran (its record names each problem)."""
        return [e for e in self.copies.events if (e.get("at") or 0) >= (self.inner.started or 0) - 1][-20:]

    def newest(self):
        """The newest complete checkpoint the run has now: as this node sees `job.checkpoint.dir` (a
        shared volume), or with replicas, complete across the copies of the hosts that answer."""
        if self.copies.on:
            return self.copies.newest(list(self.inner.nodes), self._survivors())
        return heal_policy.latest_checkpoint(self.heal.get("checkpoint"))

    def _survivors(self):
        gone = {e["host"] for e in self.excluded} | {h for h, n in self.inner.nodes.items() if n["lost"]}
        return [h for h, seen in self.seen.items() if seen is not None and h not in gone
                and self.now() - seen <= self.config["lost_after_s"]]

    def _restore(self):
        """Before attempt N+1's ranks: every host in use completes the newest step complete across the
        survivors' copies (checkpoint_copies.choose), or the attempt starts without one, said."""
        owners = self.attempts[-1]["hosts"] if self.attempts else list(self.active)
        if self.copies.plan(self.attempt + 1, owners, self._survivors(), self.now()) is None:
            print("checkpoint replicas: no step is complete across the surviving copies; starting from the "
                  "beginning", flush=True)
            return self._relaunch(None)
        self.marks.setdefault("restore", self.now())  # a second step after a refused one: the same transfer
        self.phase = "restoring"
        print(f"attempt {self.attempt + 1}: restoring {self.copies.order['step']} on {', '.join(self.active)}",
              flush=True)

    def _restoring(self):
        state, why = self.copies.restored(self.active, self.now())
        if state == "done":
            return self._relaunch(self.copies.path(self.copies.order["step"]))
        if state is not None:
            print(f"checkpoint replicas: {why}", flush=True)
            self.copies.events.append({"at": round(self.now(), 1), "kind": "refused" if state == "failed" else "late",
                                       "host": None, "peer": None, "step": self.copies.order["step"], "says": why})
            self._restore() if state == "failed" else self._relaunch(None)

    def _time_first_step(self):
        """The relaunched attempt's launch (every rank started) and first step (a keeper reports a complete
        step newer than it resumed from)."""
        if self.attempt > 1 and "launch_s" not in self.timings and self.phase == "running" \
                and all(n["ranks"] > 0 for n in self.inner.nodes.values()):
            self.timings["launch_s"] = round(self.now() - self.inner.started, 1)
        if self.copies.on and self.attempt > 1 and "first_step_s" not in self.timings and self.phase == "running" \
                and self.copies.first_step(self.active, self.baseline):
            self.timings["first_step_s"] = round(self.now() - self.inner.started, 1)

    def _relaunch(self, checkpoint):
        now = self.now()
        restore = self.marks.pop("restore", None)
        self.timings = {**self.marks, "transfer_s": round(now - restore, 1) if restore is not None else None}
        self.marks = {}
        self.attempt += 1
        self.checkpoint = checkpoint
        self.baseline = self.copies.newest_own(self.active)  # the first step of this attempt is newer than these
        heal, token = self.heal, self.heal["token"]
        self.orders = {h: {"attempt": self.attempt, "values": heal_policy.launch_values(
            token, self.active, h, heal["addresses"], heal["nproc"], self.attempt, self.checkpoint, heal.get("gpus"))}
            for h in self.active}
        self.inner = self._attempt()
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
                       "resumed_from": self.checkpoint, "progress": None, "relaunch_s": None,
                       "timings": dict(self.timings), "replica_events": self._events_since()}
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
                            heal_refused=self.heal_refused,
                            **({"replica_events": list(self.copies.events)} if self.copies.on else {}))
            return document


def _evidence(failures, host):
    for failure in failures:
        if failure.get("host") == host:
            if failure.get("lost"):
                return f"{host} stopped answering the run's supervisor"
            lines = [line for line in (failure.get("tail") or "").splitlines() if line.strip()]
            return lines[-1][:300] if lines else f"exit {failure.get('exit_code')}"
    return ""
