"""One job on the cluster: launch torchrun everywhere, watch, fail fast, stop cleanly.

The controller polls every node each `poll_s` seconds (which also renews the node's
lease, see plan/wrapper.py). The run ends when every node's torchrun exited 0, or at
the first failure: a node whose torchrun exited non-zero, or a node silent for
`lost_after_s`. Then every other node's ranks are stopped (marker-scoped, this run only)
and the first failure is named with its diagnosis: the others get a few seconds to report
first, so that the rank that crashed is named rather than a peer that lost it. The same
stop runs on Ctrl-C/SIGTERM. A job silent for `job.stall_timeout` seconds has every rank's
stack taken (watch/stalls.py): stacks that do not move are a hang, which stops the run and names
the rank that is elsewhere.
"""
from __future__ import annotations

import json
import re
import shlex
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping, Optional

from clusterctl.models import secret_values
from clusterctl.errors import UsageError
from clusterctl.executor import Connections, Event, OnEvent, Streams, Ticker, for_each_host, run_commands
from clusterctl.plan.torchrun import MAX_ARG_BYTES, RANK_PREFIX_RE, job_argv, log_dir, placeholder_values, torchrun_env
from clusterctl.models import Command, Host, HostResult, HostStatus, Inventory, MASK, looks_secret
from clusterctl.plan import wrapper as agent
from clusterctl.watch import rollcall, stalls
from clusterctl.run import supervision
from clusterctl.watch import culprit, pace
from clusterctl.plan import launcher as launchers
from clusterctl.run import phases
from clusterctl.watch.straggler_watch import StragglerWatch
from clusterctl.watch.failures import first_ranks_of
from clusterctl.watch.follow import FollowStream, Piece, latest_state, line_prefix
from clusterctl.modules import process
from clusterctl.plan import metrics_sampler as sampling
from clusterctl.plan.topology import Topology
from clusterctl.transport import remote_argv
# what lived here before (importable from here as before): shipped files, and a run already going
from clusterctl.run.in_progress import ensure_no_run_in_progress, run_in_progress, run_scan_command  # noqa: F401
from clusterctl.plan.shipping import _FILE_NAME_RE, _PUT_FILE, files_dir, put_file_command  # noqa: F401

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
                 connections: Connections, on_event: OnEvent, poll_s: float = 1.0, lost_after_s: float = 7.0,
                 timeout_s: Optional[float] = None, files: Optional[Mapping[str, bytes]] = None,
                 stall_timeout_s: Optional[float] = None, stacks_dir: Optional[Path] = None,
                 stack_interval_s: float = stalls.INTERVAL_S, attempt: int = 1, checkpoint: Optional[str] = None):
        """`files`: {name: bytes} written into `files_dir(outputs, run_id)` on every node before
        torchrun starts (e.g. a rank-side script that job.command points at). `stall_timeout_s`:
        seconds without output before the stacks are taken (None: job.stall_timeout; 0: never);
        `stacks_dir`: where the stacks of a hang are saved on this machine."""
        self.inventory, self.topology, self.run_id = inventory, topology, run_id
        self.files = {**sampling.shipped(inventory), **launchers.shipped(inventory), **(files or {})}  # sampler (41), mpi gate (38)
        for name in self.files:
            if not _FILE_NAME_RE.fullmatch(name):
                raise ValueError(f"not a plain file name: {name!r}")
        self.connections, self.on_event = connections, on_event
        self.poll_s, self.lost_after_s, self.timeout_s = poll_s, lost_after_s, timeout_s
        self.started_at = time.time()  # the kernel log of a SIGKILL is read from here on (watch/kernel_log.py)
        outputs = inventory.job.outputs
        # a run that heals itself (backends/healing.py): which attempt this is, and where to resume
        attempt_env = (("CLUSTERCTL_ATTEMPT", str(attempt)),) + ((("CLUSTERCTL_CHECKPOINT", checkpoint),) if checkpoint else ())
        argv = job_argv(inventory.job, {**placeholder_values(topology, run_id, prompt, outputs),
                                        "attempt": str(attempt), "checkpoint": checkpoint or ""})
        self.nodes: dict[str, NodeRun] = {}
        for plan in topology.nodes:
            run_dir = log_dir(outputs, run_id, plan.host.name)
            env = (*process.marker_env(inventory.name, plan.host.name, run_id), *torchrun_env(plan, inventory, run_dir),
                   *launchers.node_env(inventory, topology, plan, run_id), *agent.job_env(inventory, plan.host.env), *attempt_env)
            command = launchers.node_command(inventory, topology, plan, run_id, argv, outputs)
            self.nodes[plan.host.name] = NodeRun(plan.host, run_dir, command, env)
            _check_command_line(plan.host.name, agent.start_command(inventory, self.nodes[plan.host.name].run_dir,
                                                                        command), len(prompt.encode()))
        self.stacks_dir = stacks_dir
        self.supervised: Optional[supervision.Supervised] = None
        self.heal = None  # heal/detached.DetachedHealing: a detached run that heals itself (issue 35)
        self._wake = threading.Event()  # set when a node's output stream ends: its torchrun ended
        self.health_watch = None  # watch/health_watch.PassiveWatch, set by the run flow (issue 36)
        self.phases = phases.Phases()  # the run flow hands its own in (run/phases.py)
        self.pace = pace.Pace()  # which nodes a turn of the watch loop asks (watch/pace.py)
        self._started = time.monotonic()
        self.stragglers = StragglerWatch.of_topology(inventory, topology, run_id, connections, on_event)
        self.stalls = stalls.StallWatch(inventory, stalls.JobShape.of_topology(topology), run_id, connections, on_event,
                                        inventory.job.stall_timeout if stall_timeout_s is None else stall_timeout_s,
                                        stack_interval_s, kept=self.stragglers.kept)  # py-spy shipped once per node
        self._secret_values = sorted(secret_values(inventory), key=len, reverse=True)
        self._secret_names = {e.name for e in (*inventory.job.env, *(inventory.container.env if inventory.container else ()),
                                               *(e for h in inventory.hosts for e in h.env)) if e.is_secret}

    # ---- what would run (for --plan and the run record)
    def commands(self) -> dict[str, dict]:
        shipped = {"files": [f"{files_dir(self.inventory.job.outputs, self.run_id)}/{n}" for n in self.files]} if self.files else {}
        return {
            name: {"argv": list(node.torchrun),
                   "env": {k: (MASK if looks_secret(k) or k in self._secret_names else v) for k, v in node.env},
                   "run_dir": node.run_dir,
                   "command": shlex.join(node.torchrun),
                   "launched_with": agent.start_command(self.inventory, node.run_dir, ("torchrun",)).argv[:4],
                   **shipped}
            for name, node in self.nodes.items()
        }

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
            return JobOutcome(1, _launch_failure(failures), launch_failures=failures, duration=time.monotonic() - started)
        if detach:
            outcome = self.hand_over(ranks_timeout_s)
            outcome.duration = time.monotonic() - started
            return outcome
        follows = {name: FollowStream(self.topology.node(name).nproc) for name in self.nodes}
        streams = Streams([n.host for n in self.nodes.values()],
                          lambda host: agent.follow_command(self.inventory, self.nodes[host.name].run_dir,
                                                            self.topology.node(host.name).nproc),
                          lambda name, data: self._show(name, follows[name].feed(data), follows[name].follows_ranks),
                          lambda name, _result: self._followed_to_end(name, follows[name]), self.connections)
        try:
            outcome = self._watch(hung_up)
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
        finally:
            self.stragglers.kept.forget(self.connections)  # the py-spy the nodes kept (watch/pyspy_kept.py)
        streams.wait(3.0)
        outcome.duration = time.monotonic() - started
        return outcome

    def _launch(self) -> dict[str, HostResult]:
        def action(transport, host: Host) -> HostResult:
            node = self.nodes[host.name]
            where = files_dir(self.inventory.job.outputs, self.run_id)
            commands = [agent.write_env_command(self.inventory, node.run_dir, node.env),
                        *(put_file_command(self.inventory, where, name, data) for name, data in self.files.items()),
                        agent.start_command(self.inventory, node.run_dir, node.torchrun)]
            return run_commands(transport, host, commands)

        self.on_event(Event("note", text=f"launching {self.topology.world_size} ranks on {len(self.nodes)} nodes"))
        return for_each_host([n.host for n in self.nodes.values()], action, self.connections)

    # The live log: every node's output stream (agent.follow_command), read by executor.Streams.
    # The ranks' own files are read, not torchrun's copy (watch/follow.py says why): `line` for each
    # whole line of a rank (or of torchrun), `partial` for the line a rank is still writing (a
    # progress bar redrawn with `\r`).
    def _show(self, host: str, pieces: list[Piece], ranks_started: bool = False) -> None:
        if pieces:
            self.stalls.heard()
        if ranks_started:
            self.phases.reach("first_rank")
        plan = self.topology.node(host)
        for piece in pieces:
            self._emit(host, self.nodes[host], plan.first_rank, piece)

    def _followed_to_end(self, host: str, stream: FollowStream) -> HostResult:
        self._show(host, stream.finish())
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
            self.connections, stall_timeout_s=self.stalls.timeout_s, since=self.started_at, heal=self.heal,
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
        ticker = Ticker(self.poll_s)
        while True:
            if hung_up():
                return self.hand_over()
            self._poll_once()
            self._report_status()
            if self.health_watch is not None:  # issue 36: every 30 s, the running nodes' GPUs and kernel log
                self.health_watch.tick([n.host for n in self.nodes.values() if n.exit_code is None and not n.lost])
            failed = [n for n in self.nodes.values() if n.failed]
            if failed:
                if not any(n.lost for n in failed) and not self._stopped():
                    failed = self._settle(ticker)
                if self._stopped():
                    # `clusterctl stop` marks every node before it ends any rank: a node that failed
                    # meanwhile lost a peer to the stop; no failure to name, the rest to stop
                    self.stop("the run was stopped by `clusterctl stop`")
                    return JobOutcome(1, stopped=True)
                first = self._first_failure(failed)
                self.stop(f"{first['host']} failed")
                return JobOutcome(1, first)
            if all(n.exit_code is not None or n.lost for n in self.nodes.values()):
                self.phases.reach("torchrun_exits")
            if all(n.exit_code == 0 for n in self.nodes.values()):
                return JobOutcome(0)
            running = [n.host for n in self.nodes.values() if n.exit_code is None and not n.lost]
            self.stragglers.check(running, paused=self.stalls.sampling)
            hang = self.stalls.check(running)
            if hang is not None:
                return self._hung(hang)
            if self.timeout_s and ticker.elapsed() > self.timeout_s:
                self.stop("timeout")
                return JobOutcome(1, {"host": None, "rank": None, "diagnosis": [{
                    "cause": "unknown", "host": None, "rank": None, "evidence": f"the job ran past --timeout {self.timeout_s:g}s",
                    "fix": "raise --timeout, or look at the live log for the rank that stopped progressing"}]})
            ticker.sleep_until_next(self._wake)

    def _stopped(self) -> bool:
        return any(n.stopped for n in self.nodes.values())

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
        due = self.pace.due([name for name, n in self.nodes.items() if n.exit_code is None and not n.lost], time.monotonic(), everyone)
        waiting = [_with_connect_timeout(self.nodes[name].host, quick) for name in due]

        def action(transport, host: Host) -> HostResult:
            node = self.nodes[host.name]
            return run_commands(transport, host, [agent.poll_command(self.inventory, node.run_dir)])

        now = time.monotonic()
        for name, result in for_each_host(waiting, action, self.connections).items():
            node = self.nodes[name]
            self.pace.answered(name, result.succeeded)
            if result.succeeded:
                node.last_seen = now
                node.exit_code = agent.parse_poll(result.stdout)
                node.stopped = agent.poll_says_stopped(result.stdout)
                if node.exit_code is not None:
                    node.ended_at = now
                    how = " (`clusterctl stop`)" if node.stopped else ""
                    self.on_event(Event("note", name, f"torchrun exited {node.exit_code}{how}"))
            elif now - node.last_seen > self.lost_after_s:
                node.lost = True
                node.ended_at = now
                self.on_event(Event("note", name, f"no answer for {now - node.last_seen:.0f}s: node lost ({result.detail})"))

    def _settle(self, ticker: Ticker, seconds: float = 3.0) -> list[NodeRun]:
        """Once a node failed, let the others report for a moment before naming the first failure:
        peers of a crashed rank fail within milliseconds (connection closed), and the culprit's
        own torchrun may well be the last of them to exit."""
        for _left in ticker.during(seconds, done=lambda: all(n.exit_code is not None or n.lost
                                                             for n in self.nodes.values())):
            self._poll_once(everyone=True)
        return [n for n in self.nodes.values() if n.failed]

    def _first_failure(self, failed: list[NodeRun]) -> dict:
        return culprit.first_failure_of(self, failed)

    def _mask(self, text: str) -> str:
        """What a job prints of its secrets (a config dump) never reaches the terminal or the run record."""
        for value in self._secret_values:
            text = text.replace(value, MASK)
        return text

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


def _check_command_line(host: str, command: Command, prompt_bytes: int) -> None:
    """ssh hands the remote shell the whole command as one argument, which Linux caps at 128 KiB:
    refuse before launching anything rather than fail on every node with "Argument list too long"."""
    size = len(shlex.join(remote_argv(command)).encode())
    if size > MAX_ARG_BYTES:
        raise UsageError(
            f"the command that starts torchrun on {host} is {size} bytes once quoted for the remote shell "
            f"(the prompt is {prompt_bytes} of them); Linux refuses a command line over 128 KiB "
            f"({MAX_ARG_BYTES} bytes) in one argument, and ssh passes the whole command as one",
            where="PROMPT_FILE", fix="shorten the prompt (quotes and $ take more room once escaped), "
            "or have the job read it from a file on a shared volume")


def _with_connect_timeout(host: Host, seconds: float) -> Host:
    return replace(host, ssh=replace(host.ssh, connect_timeout=min(host.ssh.connect_timeout, seconds)))


def _launch_failure(failures: dict[str, HostResult]) -> dict:
    name, result = next(iter(failures.items()))
    cause = "node_unreachable" if result.status is HostStatus.UNREACHABLE else "unknown"
    return {"host": name, "rank": None, "diagnosis": [{
        "cause": cause, "host": name, "rank": None, "evidence": result.detail,
        "fix": "the node could not start torchrun (see the evidence): check that job.outputs is writable there, "
               "run `clusterctl up` if the container is gone, and `clusterctl check`"}]}
