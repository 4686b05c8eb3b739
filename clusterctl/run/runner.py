"""One job on the cluster: launch torchrun everywhere, watch, fail fast, stop cleanly.

The controller polls every node, or asks its output stream (either renews the node's lease: plan/wrapper.py,
watch/pace.py), and hosts the run's engine (node/engine.py), which decides from what they read: the run ends when every
node's torchrun exited 0, or at the first failure: a node whose torchrun exited non-zero, or a node
silent for `lost_after_s` (`job.lost_after`, the same window as a detached run's), or past
`--timeout`. Here the engine's end is carried out: every other node's ranks are stopped
(marker-scoped, this run only) and the first failure is named with its diagnosis (the engine gives
the others a few seconds to report first, so that the rank that crashed is named rather than a peer
that lost it). The same stop runs on Ctrl-C/SIGTERM. A job silent for `job.stall_timeout` seconds has every rank's
stack taken (watch/stalls.py): stacks that do not move are a hang, which stops the run and names the rank elsewhere.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping, Optional

from clusterctl.ground.masking import masker
from clusterctl.models import Host, HostResult, HostStatus, Inventory, secret_values
from clusterctl.executor import Connections, Event, OnEvent, Streams, Ticker, for_each_host, run_commands
from clusterctl.plan.torchrun import RANK_PREFIX_RE
from clusterctl.node.layout import files_dir  # noqa: F401  (importable from here as before)
from clusterctl.plan import wrapper as agent
from clusterctl.node import engine, rank_output
from clusterctl.watch import culprit, pace, rollcall, stalls
from clusterctl.run import launching, phases, supervision
from clusterctl.watch.straggler_watch import StragglerWatch
from clusterctl.watch.failures import first_ranks_of
from clusterctl.watch.follow import FollowStream, Piece, latest_state, line_prefix
from clusterctl.modules import process
from clusterctl.plan.topology import Topology
from clusterctl.plan.launch_plan import NodeLaunch, commands_of, node_launches, shipped_files
from clusterctl.plan.shipping import put_file_command

@dataclass
class NodeRun:
    host: Host
    run_dir: str
    torchrun: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    exit_code: Optional[int] = None
    lost: bool = False
    last_seen: float = field(default_factory=time.monotonic)
    ended_at: Optional[float] = None
    last_line: str = ""
    ranks_seen: set = field(default_factory=set)
    last_detail: str = ""  # why the last poll went unanswered
    stopped: bool = False  # its torchrun ended by `clusterctl stop` (the run dir's `stopped` mark)

    @property
    def state(self) -> str:
        if self.lost:
            return "lost"
        if self.stopped:
            return "stopped"
        if self.exit_code is not None:
            return f"exited {self.exit_code}"
        return "running" if self.ranks_seen else "rendezvous"

    @property
    def failed(self) -> bool:
        return self.lost or (self.exit_code not in (None, 0))


@dataclass
class JobOutcome:
    exit_code: int
    first_failure: Optional[dict] = None
    interrupted: bool = False
    launch_failures: dict = field(default_factory=dict)
    duration: float = 0.0
    stopped: bool = False  # ended by `clusterctl stop` (from another terminal)
    detached: bool = False  # handed over to the cluster (run/supervision.py); it goes on


class RunnerCrashed(Exception):
    """An unexpected exception while watching a run, raised after every rank was stopped: the
    caller still records the run, then lets the exception reach the CLI's internal-error line."""

    def __init__(self, outcome: JobOutcome, cause: Exception):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.outcome, self.cause = outcome, cause


class JobRunner:
    def __init__(self, inventory: Inventory, topology: Topology, run_id: str, prompt: str,
                 connections: Connections, on_event: OnEvent, poll_s: float = 1.0, lost_after_s: Optional[float] = None,
                 timeout_s: Optional[float] = None, files: Optional[Mapping[str, bytes]] = None,
                 stall_timeout_s: Optional[float] = None, stacks_dir: Optional[Path] = None,
                 stack_interval_s: float = stalls.INTERVAL_S, attempt: int = 1, checkpoint: Optional[str] = None,
                 launches: Optional[tuple[NodeLaunch, ...]] = None):
        """`files`: {name: bytes} written into `files_dir(outputs, run_id)` on every node before
        torchrun starts (e.g. a rank-side script that job.command points at). `stall_timeout_s`:
        seconds without output before the stacks are taken (None: job.stall_timeout; 0: never);
        `lost_after_s`: a node silent that long is lost (None: job.lost_after, as a detached run's);
        `stacks_dir`: where the stacks of a hang are saved on this machine. `launches`: what starts on
        each node as the Plan decided it (plan/launch_plan.py); without, decided here from `prompt`,
        `attempt` and `checkpoint` (a run that heals itself: which attempt this is, where to resume)."""
        self.inventory, self.topology, self.run_id = inventory, topology, run_id
        self.files = shipped_files(inventory, files)
        self.connections, self.on_event = connections, on_event
        self.poll_s, self.timeout_s = poll_s, timeout_s
        self.lost_after_s = inventory.job.healing.lost_after if lost_after_s is None else lost_after_s
        self.started_at = time.time()  # the kernel log of a SIGKILL is read from here on (watch/kernel_log.py)
        if launches is None:
            launches = node_launches(inventory, topology, run_id, prompt, attempt, checkpoint)
        self.nodes: dict[str, NodeRun] = {n.host.name: NodeRun(n.host, n.run_dir, n.torchrun, n.env) for n in launches}
        self.stacks_dir = stacks_dir
        self.supervised: Optional[supervision.Supervised] = None
        self.heal = None  # heal/detached.DetachedHealing: a detached run that heals itself (issue 35)
        self.replicas: dict[str, bytes] = {}  # each host's replica.json: an attached run's copier (heal/replicas.py)
        self._wake = threading.Event()  # set when a node's output stream ends: its torchrun ended
        self.health_watch = None  # watch/health_watch.PassiveWatch, set by the run flow (issue 36)
        self.phases = phases.Phases()  # the run flow hands its own in (run/phases.py)
        # which nodes a turn of the watch loop asks (watch/pace.py): each well inside the lost-node window,
        # which the engine counts from the last answer
        self.pace = pace.Pace(min(pace.EVERY_S, self.lost_after_s / 2))
        self.engine: Optional[engine.Attempt] = None  # the run's engine, once it is watched (_watch)
        self._streams: Optional[Streams] = None  # the output streams, which carry the lease (watch/pace.py)
        self._beaten: dict[str, float] = {}  # each node's stream answer the engine last heard of
        self._seq = 0  # the engine's beats are numbered, as a keeper's
        self._started = time.monotonic()
        self.stragglers = StragglerWatch.of_topology(inventory, topology, run_id, connections, on_event)
        self.stalls = stalls.StallWatch(inventory, stalls.JobShape.of_topology(topology), run_id, connections, on_event,
                                        inventory.job.stall_timeout if stall_timeout_s is None else stall_timeout_s,
                                        stack_interval_s, kept=self.stragglers.kept)  # py-spy shipped once per node
        self._secret_values = sorted(secret_values(inventory), key=len, reverse=True)
        self._masker = masker(inventory)  # every written form, as everything leaving this process

    # ---- what would run (for --plan and the run record)
    def commands(self) -> dict[str, dict]:
        return commands_of(self.inventory, self.run_id, self.nodes.values(), self.files)

    # ---- the job
    def run(self, detach: bool = False, hung_up: Callable[[], bool] = lambda: False,
            ranks_timeout_s: float = 300.0) -> JobOutcome:
        """The job from launch to its end; with `detach`, from launch to every rank started, then
        handed over to the cluster. `hung_up()` turning true (the terminal hung up) hands it over too."""
        started = self._started = time.monotonic()
        launched = self._launch()
        self.phases.reach("launch")
        failures = {n: r for n, r in launched.items() if not r.succeeded}
        if failures:
            self.stop("launch failed")
            return JobOutcome(1, culprit.launch_failure(failures), launch_failures=failures, duration=time.monotonic() - started)
        # the launch was each node's first question (its wrapper's lease is fresh): the next one in 4 s, on its
        # stream (watch/pace.py), not a poll at once while the streams start (a `python3` on each node)
        self.pace.due(list(self.nodes), time.monotonic())
        if detach:
            outcome = self.hand_over(ranks_timeout_s)
            outcome.duration = time.monotonic() - started
            return outcome
        follows = {name: FollowStream(self.topology.node(name).nproc) for name in self.nodes}
        streams = Streams([n.host for n in self.nodes.values()],
                          lambda host: agent.follow_command(self.inventory, self.nodes[host.name].run_dir,
                                                            self.topology.node(host.name).nproc, lease=True),
                          lambda name, data: self._show(name, follows[name].feed(data), follows[name].follows_ranks),
                          lambda name, _result: self._followed_to_end(name, follows[name]), self.connections,
                          on_stderr=lambda name, data: self.pace.said(name, data, time.monotonic()))
        self._streams = streams
        try:
            outcome = self._watch(hung_up)
            self.phases.reach("watch_ended")
            if outcome.detached:  # the streams end with the connections: nobody reads them any more
                outcome.duration = time.monotonic() - started
                return outcome
        except KeyboardInterrupt:
            self.on_event(Event("note", text="interrupted: stopping every node's ranks"))
            self.stop("interrupted")
            outcome = JobOutcome(130, interrupted=True)
        except Exception as exc:  # a bug of ours: nothing may stay running because of it
            self.on_event(Event("note", text="internal error: stopping every node's ranks"))
            self.stop("internal error")
            streams.wait(3.0)
            raise RunnerCrashed(JobOutcome(1, interrupted=False, duration=time.monotonic() - started), exc) from exc
        finally:  # the py-spy the nodes kept (watch/pyspy_kept.py), once rounds under way said what they kept
            self.stragglers.settle()
            self.stalls.settle()
            self.stragglers.kept.forget(self.connections)
        self._end_streams(streams)
        outcome.duration = time.monotonic() - started
        return outcome

    def _end_streams(self, streams: Streams, said_after_s: float = 1.0, wait_s: float = 3.0) -> None:
        """Wait up to `wait_s` for every node's output stream (each ends as its agent.exit appears); one
        that takes more than `said_after_s` is named in the live log: the run's return waits for it."""
        if not streams.wait(said_after_s):
            pending = sorted(set(self.nodes) - set(streams.results))
            shown = ", ".join(pending[:8]) + (f" and {len(pending) - 8} more" if len(pending) > 8 else "")
            self.on_event(Event("note", text=f"end of run: waiting up to {wait_s - said_after_s:g}s more for the "
                                             f"output stream of {len(pending)} node(s): {shown}"))
            streams.wait(wait_s - said_after_s)
        self.phases.reach("streams_ended")

    def _launch(self) -> dict[str, HostResult]:
        return launching.launch(self)

    # The live log: every node's output stream (agent.follow_command), read by executor.Streams.
    # The ranks' own files are read, not torchrun's copy (watch/follow.py says why): `line` for each
    # whole line of a rank (or of torchrun), `partial` for the line a rank is still writing (a
    # progress bar redrawn with `\r`).
    def _show(self, host: str, pieces: list[Piece], ranks_started: bool = False) -> None:
        pieces = [p for p in pieces if not rank_output.DUMP_LINE.search(p.text)]  # dumps asked by the watch
        if pieces:
            self.stalls.heard()
        if ranks_started:
            self.phases.reach("first_rank")
        plan = self.topology.node(host)
        for piece in pieces:
            self._emit(host, self.nodes[host], plan.first_rank, piece)

    def _followed_to_end(self, host: str, stream: FollowStream) -> HostResult:
        self._show(host, stream.finish())
        self.pace.stream_ended(host)
        self.pace.everyone()
        self._wake.set()  # the node's torchrun ended (or its connection did): poll it now
        return HostResult(host, HostStatus.OK)

    def _emit(self, host: str, node: NodeRun, first_rank: int, piece: Piece) -> None:
        if piece.source.local_rank is not None:
            local_rank = piece.source.local_rank
            rank, text, stream = first_rank + local_rank, piece.text, piece.source.stream
        else:  # torchrun's own line, or (its ranks' files not followed) its copy of a rank's line
            match = RANK_PREFIX_RE.match(piece.text)
            rank = int(match.group("rank")) if match else None
            local_rank = rank - first_rank if rank is not None else None
            text, stream = (piece.text[match.end():] if match else piece.text), "stdout"
        text = self._mask(text) if piece.complete else self._mask_partial(text)
        if rank is not None:
            node.ranks_seen.add(rank)
            self.phases.reach("first_rank")
            self.phases.again("last_rank_done")
            self.stragglers.heard(rank, text, piece.complete)  # its progress: the step time
        node.last_line = latest_state(text) if "\r" in text else text
        prefix = line_prefix(host, rank)
        self.on_event(Event("line" if piece.complete else "partial", host, text,
                            {"prefix": prefix, "stream": stream, "rank": rank, "local_rank": local_rank}))

    def hand_over(self, ranks_timeout_s: Optional[float] = None) -> JobOutcome:
        """Hand the run to the cluster (run/supervision.py): once its supervisor has heard every node,
        this controller may go. With `ranks_timeout_s`, first wait until every rank has started (or
        the run failed meanwhile, which is returned like any failure). A run that cannot be handed
        over is stopped: nothing is left running that nobody watches."""
        master = self.topology.master.host.name
        self.on_event(Event("note", text="handing the run over to the cluster: a supervisor on "
                                         f"{master}, a keeper on every node"))
        supervised, failed = supervision.establish(
            self.inventory, self.run_id, master, self.topology.master_addr, self.topology.port,
            {name: n.run_dir for name, n in self.nodes.items()}, {name: n.host for name, n in self.nodes.items()},
            self.connections, stall_timeout_s=self.stalls.timeout_s, since=self.started_at, heal=self.heal, files=self.files,
            stragglers=self.stragglers.enabled,
            timeout_s=max(1.0, self.timeout_s - (time.monotonic() - self._started)) if self.timeout_s else None)
        if supervised is None:
            self.stop("the run could not be handed over to the cluster")
            name, result = next(iter(failed.items()))
            return JobOutcome(1, {"host": name, "rank": None, "diagnosis": [{
                "cause": "unknown", "host": name, "rank": None, "evidence": result.detail,
                "fix": f"the run's supervisor listens on {self.topology.master_addr}:{self.topology.port + supervision.PORT_OFFSET} "
                       f"({master}); every node must reach it, as they reach the rendezvous port, and run "
                       f"{self.inventory.job.python} (job.python); `clusterctl check` tests the ports"}]})
        self.supervised = supervised
        if ranks_timeout_s:
            nproc = {plan.host.name: plan.nproc for plan in self.topology.nodes}
            state = supervision.await_ranks(self.inventory, supervised, self.nodes[master].host, self.connections,
                                            nproc, ranks_timeout_s)
            if state.get("state") not in (None, "running", "succeeded"):
                code, first = supervision.outcome_of(state, self.inventory, self._mask,
                                                     first_ranks_of(self.topology.nodes))
                return JobOutcome(code, first, stopped=state.get("state") == "stopped")
            ranks = sum(min((state.get("nodes") or {}).get(h, {}).get("ranks", 0), n) for h, n in nproc.items())
            self.on_event(Event("note", text=f"{ranks} of {self.topology.world_size} ranks started"))
        return JobOutcome(0, detached=True)

    def _watch(self, hung_up: Callable[[], bool] = lambda: False) -> JobOutcome:
        """Feed the run's engine (node/engine.py) what the polls read; carry its end out. Observation stays
        here (the live log, the health watch, the stragglers, the stacks of a silence)."""
        ticker = Ticker(self.poll_s)
        self.engine = engine.Attempt({"run_id": self.run_id, "hosts": list(self.nodes), "lost_after_s": self.lost_after_s,
                                      "timeout_s": self.timeout_s or 0}, now=time.monotonic)
        while True:
            if hung_up():
                return self.hand_over()
            self._poll_once(everyone=self.engine.settling)
            self._report_status()
            if self.health_watch is not None:  # issue 36: every 30 s, the running nodes' GPUs and kernel log
                self.health_watch.tick([n.host for n in self.nodes.values() if n.exit_code is None and not n.lost])
            self.engine.tick()
            self._lost_said()
            if all(n.exit_code is not None or n.lost for n in self.nodes.values()):
                self.phases.reach("torchrun_exits")
            if self.engine.state != "running":
                return self._ended()
            if not self.engine.settling:  # settling after a failure: only the polls
                running = [n.host for n in self.nodes.values() if n.exit_code is None and not n.lost]
                self.stragglers.check(running, paused=self.stalls.sampling)
                hang = self.stalls.check(running)
                if hang is not None:
                    self.engine.hang(f"hang: {hang.detail}")
                    return self._hung(hang)
            ticker.sleep_until_next(self._wake)

    def _ended(self) -> JobOutcome:
        """Carry out the engine's end: stop every rank (a success has none left), name the first failure."""
        if self.engine.state == "succeeded":
            return JobOutcome(0)
        if self.engine.state == "stopped":
            self.stop("the run was stopped by `clusterctl stop`")
            return JobOutcome(1, stopped=True)
        if self.engine.timed_out:
            self.stop("timeout")
            return JobOutcome(1, {"host": None, "rank": None, "diagnosis": [{
                "cause": "unknown", "host": None, "rank": None, "evidence": f"the job ran past --timeout {self.timeout_s:g}s",
                "fix": "raise --timeout, or look at the live log for the rank that stopped progressing"}]})
        first = self._first_failure([n for n in self.nodes.values() if n.failed])
        self.stop(f"{first['host']} failed")
        return JobOutcome(1, first)

    def _lost_said(self) -> None:
        """The nodes the engine counted lost: lost here too, said once."""
        for name, seen in self.engine.nodes.items():
            node = self.nodes[name]
            if seen["lost"] and not node.lost:
                node.lost, node.ended_at = True, seen["ended_at"]
                silent = next((f.get("silent_s") for f in self.engine.failures if f["host"] == name), 0)
                self.on_event(Event("note", name, f"no answer for {silent:.0f}s: node lost ({node.last_detail})"))

    def _hung(self, verdict: rollcall.Verdict) -> JobOutcome:
        """Stop every rank, then keep the stacks that show the hang: here and in each node's run dir
        (so collect-logs brings them back, and diagnose shows them)."""
        silent = self.stalls.silent_s()
        name = stalls.file_name()
        path = self.stacks_dir / name if self.stacks_dir else None
        first = rollcall.hang_finding(verdict, silent, str(path) if path else "")
        self.stop(f"hang: {first['diagnosis'][0]['evidence'][:200]}")
        reason = f"no output for {silent:.0f}s"
        if path is not None:
            stalls.save_local(path.parent, name, stalls.stacks_document(self.run_id, self.stalls.nodes, reason, verdict,
                                                                        first_failure=first))
        self.put_stacks(name, lambda host: stalls.stacks_document(self.run_id, self.stalls.nodes, reason, verdict,
                                                                  first_failure=first, only_host=host))
        return JobOutcome(1, {**first, "stacks": str(path) if path else None})

    def put_stacks(self, name: str, document_of) -> None:
        """Write `document_of(host)` as `name` into each sampled node's run dir (a node that does not
        answer keeps none; the local copy is the one that counts)."""
        hosts = [self.nodes[h].host for h in self.stalls.nodes if h in self.nodes and not self.nodes[h].lost]

        def action(transport, host: Host) -> HostResult:
            data = json.dumps(document_of(host.name), indent=1).encode()
            return run_commands(transport, host, [put_file_command(self.inventory, self.nodes[host.name].run_dir,
                                                                   name, data)])

        for_each_host(hosts, action, self.connections)

    def _report_status(self) -> None:
        """One status line per node for the live view: state, ranks heard from, last log line."""
        nodes = {name: {"state": n.state, "ranks": f"{len(n.ranks_seen)}/{len(self.topology.node(name).ranks)}",
                        "last": n.last_line[-80:]} for name, n in self.nodes.items()}
        self.on_event(Event("status", data={"nodes": nodes}))

    def _poll_once(self, everyone: bool = False) -> None:
        # A node whose connection dropped is reconnected within a few seconds, not within the
        # inventory's connect_timeout: a node cut off mid-run must count as lost after
        # `lost_after_s`, and one dead node must not hold up the polls (and leases) of the others.
        quick = max(1.0, min(self.lost_after_s / 2, 3.0))
        now, running = time.monotonic(), [name for name, n in self.nodes.items() if n.exit_code is None and not n.lost]
        for name in [n for n in running if self.pace.exited(n)]:  # its stream's last line: what a poll would read
            self._answered(name, self.pace.exited(name))
            running.remove(name)
        due = self.pace.due(running, now, everyone)
        self._heard_streams(running)
        renewed = {n for n in due if self._streams and self._streams.send(n, agent.RENEW) and self.pace.renewal_sent(n, now)}
        asked = [n for n in due if n not in renewed]
        waiting = [_with_connect_timeout(self.nodes[name].host, quick) for name in asked]

        def action(transport, host: Host) -> HostResult:
            node = self.nodes[host.name]
            return run_commands(transport, host, [agent.poll_command(self.inventory, node.run_dir)])

        for name, result in for_each_host(waiting, action, self.connections).items():
            node = self.nodes[name]
            self.pace.answered(name, result.succeeded)
            if not result.succeeded:
                node.last_detail = result.detail
                continue
            self._answered(name, result.stdout)
        self._heard_streams(running)  # again: a cut node's poll held this turn while the others' streams answered

    def _answered(self, name: str, answer: str) -> None:
        """A poll's answer from `name` (or its stream's last line, in the same words)."""
        node = self.nodes[name]
        node.last_seen = time.monotonic()
        node.exit_code = agent.parse_poll(answer)
        node.stopped = agent.poll_says_stopped(answer)
        self._beat(name)
        if node.exit_code is not None:
            node.ended_at = node.last_seen
            how = " (`clusterctl stop`)" if node.stopped else ""
            self.on_event(Event("note", name, f"torchrun exited {node.exit_code}{how}"))

    def _heard_streams(self, running: list[str]) -> None:
        """A stream's answer since the engine last heard: the node answered (watch/pace.py); heard only next turn,
        they looked silent to the engine as long as a cut node's poll took (node1 judged lost, node3 cut)."""
        for name in running:
            at = self.pace.streamed_at(name)
            if at is not None and at > self._beaten.get(name, float("-inf")) and not self.nodes[name].lost:
                self._beaten[name] = self.nodes[name].last_seen = at
                self.pace.answered(name, True)
                self._beat(name)

    def _beat(self, name: str) -> None:
        node, self._seq = self.nodes[name], self._seq + 1
        self.engine.beat({"host": name, "seq": self._seq, "exit_code": node.exit_code, "stopped": node.stopped,
                          "ranks": len(node.ranks_seen)})

    def _first_failure(self, failed: list[NodeRun]) -> dict:
        return culprit.first_failure_of(self, failed)

    def _mask(self, text: str) -> str:
        """What a job prints of its secrets (a config dump) never reaches the terminal or the run record."""
        return self._masker(text)

    def _mask_partial(self, text: str) -> str:
        """A line still being written may end in the first characters of a secret whose rest is
        yet to come: those are left out until the line goes on (a few are harmless)."""
        text = self._mask(text)
        cut = max((n for value in self._secret_values for n in range(3, len(value))
                   if text.endswith(value[:n])), default=0)
        return text[:len(text) - cut]

    def stop(self, reason: str) -> dict[str, HostResult]:
        """Stop this run's processes on every node that still answers (marker-scoped)."""
        alive = [n.host for n in self.nodes.values() if not n.lost]

        def action(transport, host: Host) -> HostResult:
            scan = process.scan_command(self.inventory.name, host.name, self.inventory.rendezvous.port, "kill", self.run_id)
            return run_commands(transport, host, [scan])

        results = for_each_host(alive, action, self.connections)
        killed = sum(len(process.parse_scan(r.stdout)["ours"]) for r in results.values())
        self.on_event(Event("note", text=f"stopped: {reason}; {killed} process(es) ended on {len(alive)} node(s)"))
        return results


def _with_connect_timeout(host: Host, seconds: float) -> Host:
    return replace(host, ssh=replace(host.ssh, connect_timeout=min(host.ssh.connect_timeout, seconds)))
