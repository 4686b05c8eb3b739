"""The only place with threads, clocks and retries.

`Connections` keeps one persistent transport per host for the whole invocation, opened
lazily and in parallel. `for_each_host` runs one action on many hosts through a bounded
pool and returns one `HostResult` per host: an unreachable host or a crashed action is a
value, never an exception that unwinds the pool. `run_plan` runs a playbook's tasks with a
barrier between tasks; a host that fails leaves the play, the others carry on. `Streams` reads
every host's long-running command (a run's live log, `logs --follow`) in one thread, and
`Background` runs per-host actions beside the caller, at most the pool's width at once.
"""
from __future__ import annotations

import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from clusterctl.errors import ClusterctlError, HostKeyError, UnreachableError
from clusterctl.models import Command, CommandResult, Host, HostResult, HostStatus, Inventory, Skip

DEFAULT_WIDTH = 64
# Connections kept open for the whole invocation. Each costs the controller a thread (paramiko's
# transport; a second one for a jump host's keepalive), a socket (two through a jump host) and about
# 0.3 MB. Up to MAX_OPEN nodes every connection is reused by every step; past it, a node's
# connection is opened for its action and closed after (a reconnect per step for those nodes only),
# so threads and descriptors stay under ~MAX_OPEN + the pool's width, far below the default
# descriptor limit of 1024 that `raise_descriptor_limit` lifts anyway.
MAX_OPEN = 256
CONNECT_RETRIES = 1  # for a dropped handshake (sshd MaxStartups), never for a command that ran


@dataclass(frozen=True)
class Event:
    """What the core tells the renderer. kinds: task, host_done, line, progress, note."""

    kind: str
    host: Optional[str] = None
    text: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)


OnEvent = Callable[[Event], None]


def _ignore(_event: Event) -> None:
    pass


# --------------------------------------------------------------------------- connections


class Connections:
    """One transport per host, opened on first use and closed by `close()`."""

    def __init__(self, connect: Callable[[Host], Any], max_open: int = MAX_OPEN):
        self._connect = connect
        self.max_open = max_open
        self._open: dict[str, Any] = {}
        self._failed: dict[str, HostResult] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._users: dict[str, int] = {}  # actions using a host's connection now
        self._passing: set[str] = set()  # hosts over max_open: closed when their last action ends
        self.peak_open = 0

    def get(self, host: Host):
        """The transport for `host`, or raises UnreachableError/HostKeyError (remembered)."""
        with self._guard:
            lock = self._locks.setdefault(host.name, threading.Lock())
        with lock:
            if host.name in self._open:
                return self._open[host.name]
            if host.name in self._failed:
                raise UnreachableError(self._failed[host.name].detail, where=host.name)
            started = time.monotonic()
            try:
                transport = self._connect_with_retry(host)
            except (UnreachableError, HostKeyError) as exc:
                self._failed[host.name] = _unreachable(host, exc, time.monotonic() - started)
                raise
            with self._guard:
                if len(self._open) >= self.max_open:
                    self._passing.add(host.name)
                self._open[host.name] = transport
                self.peak_open = max(self.peak_open, len(self._open))
            return transport

    def acquire(self, host: Host):
        """`get`, counted as in use until `release`: a connection over max_open closes when unused."""
        with self._guard:
            self._users[host.name] = self._users.get(host.name, 0) + 1
        try:
            return self.get(host)
        except BaseException:
            self.release(host.name)
            raise

    def release(self, host_name: str) -> None:
        with self._guard:
            self._users[host_name] = self._users.get(host_name, 1) - 1
            done = self._users[host_name] <= 0 and host_name in self._passing
            if done:
                self._passing.discard(host_name)
                transport = self._open.pop(host_name, None)
        if done and transport is not None:
            transport.close()

    def _connect_with_retry(self, host: Host):
        for attempt in range(CONNECT_RETRIES + 1):
            try:
                return self._connect(host)
            except UnreachableError as exc:
                transient = "banner" in exc.what or "reset" in exc.what.lower()
                if attempt == CONNECT_RETRIES or not transient:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def drop(self, host_name: str) -> None:
        with self._guard:
            transport = self._open.pop(host_name, None)
            self._passing.discard(host_name)
        if transport is not None:
            transport.close()

    def close(self) -> None:
        for name in list(self._open):
            self.drop(name)


def raise_descriptor_limit(wanted: int = 8192) -> int:
    """Lift this process's soft limit on open files towards `wanted` (never past the hard limit):
    a node costs one socket, two through a jump host, and `logs`/`run` hold a channel per node, so the
    usual soft limit of 1024 would be the first thing to break at a few hundred nodes. Returns the limit."""
    try:
        import resource
    except ImportError:  # not POSIX: nothing to lift
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError):
            return soft
    return soft


def _unreachable(host: Host, exc: ClusterctlError, duration: float) -> HostResult:
    detail = exc.what + (f" (fix: {exc.fix})" if exc.fix else "")
    return HostResult(host.name, HostStatus.UNREACHABLE, detail=detail, duration=duration)


# --------------------------------------------------------------------------- the pool


HostAction = Callable[[Any, Host], HostResult]  # (transport, host) -> result


def for_each_host(
    hosts: Sequence[Host],
    action: HostAction,
    connections: Connections,
    width: int = DEFAULT_WIDTH,
) -> dict[str, HostResult]:
    """Run `action` on every host at once (at most `width` in flight). Results in host order."""

    def one(host: Host) -> HostResult:
        return _on_host(host, action, connections)

    if not hosts:
        return {}
    pool = ThreadPoolExecutor(max_workers=max(1, min(width, len(hosts))), thread_name_prefix="host")
    try:
        results = list(pool.map(one, hosts))
    except BaseException:
        # Ctrl-C/SIGTERM: return at once instead of waiting for every host's action (a pull can
        # take minutes); the caller closes the connections, which ends the actions still running.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return {r.host: r for r in results}


def _on_host(host: Host, action: HostAction, connections: Connections) -> HostResult:
    """`action` on one host as a value: an unreachable host or a crashed action is a HostResult."""
    started = time.monotonic()
    try:
        transport = connections.acquire(host)
    except Exception as exc:  # noqa: BLE001 - a value, as below
        return _as_result(host, exc, None, connections, started)
    try:
        result = action(transport, host)
        return result if result.duration else replace(result, duration=time.monotonic() - started)
    except Exception as exc:  # noqa: BLE001 - the edge: one host's bug never unwinds the pool
        return _as_result(host, exc, transport, connections, started)
    finally:
        connections.release(host.name)


def _as_result(host: Host, exc: Exception, transport, connections: Connections, started: float) -> HostResult:
    duration = time.monotonic() - started
    if isinstance(exc, (UnreachableError, HostKeyError)):
        connections.drop(host.name)
        return _unreachable(host, exc, duration)
    if isinstance(exc, ClusterctlError):
        return HostResult(host.name, HostStatus.FAILED, detail=str(exc), duration=duration)
    if transport is not None and not getattr(transport, "alive", True):
        connections.drop(host.name)
        return HostResult(host.name, HostStatus.UNREACHABLE, duration=duration, detail=(
            f"the connection to {host.address} was lost ({type(exc).__name__}: {exc}). "
            "fix: check the host and its network, then rerun; what completed is kept"))
    return HostResult(host.name, HostStatus.FAILED, detail=f"internal error: {type(exc).__name__}: {exc}",
                      duration=duration)


# --------------------------------------------------------------------------- commands on one host


class HostLog:
    """The log file of one host for one step: every command, its output, its exit code."""

    def __init__(self, path: Optional[Path]):
        self.path = path
        self._handle = None
        if path is not None:
            from clusterctl.state import private_dir

            private_dir(path.parent)  # step logs hold command lines and outputs: 0700 / 0600
            self._handle = os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a", encoding="utf-8")

    def write(self, text: str) -> None:
        if self._handle is not None:
            self._handle.write(text)
            self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


def run_commands(
    transport,
    host: Host,
    commands: Iterable[Command],
    on_event: OnEvent = _ignore,
    log_path: Optional[Path] = None,
    stream: bool = False,
) -> HostResult:
    """Run commands in order on one host; stop at the first that fails."""
    log = HostLog(log_path)
    started = time.monotonic()
    outputs, errors, changed = [], [], False
    last = CommandResult(0)
    try:
        for command in commands:
            log.write(f"$ {command.display}\n")
            on_line = _line_forwarder(host.name, on_event, log) if stream else None
            last = transport.run(command, on_line=on_line)
            if not stream:
                log.write(last.stdout + last.stderr)
            log.write(f"[exit {last.exit_code}{' timed out' if last.timed_out else ''} after {last.duration:.2f}s]\n")
            outputs.append(last.stdout)
            errors.append(last.stderr)
            if last.timed_out or last.exit_code not in command.ok_exit_codes:
                detail = _failure_detail(command, last)
                return HostResult(
                    host.name, HostStatus.FAILED, detail, last.exit_code, "".join(outputs), "".join(errors),
                    time.monotonic() - started, log_path=str(log_path) if log_path else None,
                )
            changed = changed or command.changes
    finally:
        log.close()
    status = HostStatus.CHANGED if changed else HostStatus.OK
    return HostResult(
        host.name, status, "", last.exit_code, "".join(outputs), "".join(errors),
        time.monotonic() - started, log_path=str(log_path) if log_path else None,
    )


def _line_forwarder(host_name: str, on_event: OnEvent, log: HostLog):
    def on_line(stream: str, line: str) -> None:
        log.write(line + "\n")
        on_event(Event("line", host_name, line, {"stream": stream}))

    return on_line


def _failure_detail(command: Command, result: CommandResult) -> str:
    shown = _shorten(command.display)
    if result.timed_out:
        return f"timed out after {command.timeout:g}s: {shown}"
    tail = [_shorten(line) for line in (result.stderr.strip() or result.stdout.strip()).splitlines()[-3:]]
    return f"exit {result.exit_code}: {shown}" + ("\n" + "\n".join(tail) if tail else "")


def _shorten(text: str, limit: int = 600) -> str:
    """A command line or output line fit for a report (a job's argv may hold a 100 KB prompt)."""
    return text if len(text) <= limit else f"{text[:limit // 2]} ...[{len(text) - limit} characters]... {text[-limit // 2:]}"


# --------------------------------------------------------------------------- plays


@dataclass(frozen=True)
class TaskContext:
    """What a module sees: the host, the inventory, and the invocation's variables."""

    host: Host
    inventory: Inventory
    vars: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterContext:
    """What a cluster-scoped module sees (one call for all hosts, e.g. cross-node checks)."""

    hosts: Sequence[Host]
    inventory: Inventory
    vars: Mapping[str, Any]
    connections: "Connections"
    on_event: OnEvent


# A module returns commands to run, a Skip, or a HostAction for engine-level work (Docker API).
ModuleOutput = Any


@dataclass(frozen=True)
class PlannedTask:
    name: str
    module: str
    args: Mapping[str, Any]
    hosts: str = "all"  # all | master | workers | a group | a host name
    where: str = ""  # file:line, for messages


@dataclass
class TaskReport:
    task: PlannedTask
    results: dict[str, HostResult]


@dataclass
class PlayReport:
    tasks: list[TaskReport] = field(default_factory=list)
    hosts: dict[str, HostResult] = field(default_factory=dict)  # each host's final state

    @property
    def ok(self) -> bool:
        return all(r.succeeded for r in self.hosts.values())


def select_hosts(inventory: Inventory, selector: str) -> list[Host]:
    if selector in ("all", "*"):
        return list(inventory.hosts)
    master = inventory.master
    if selector == "master":
        return [master]
    if selector == "workers":
        return [h for h in inventory.hosts if h.name != master.name]
    return [h for h in inventory.hosts if h.name == selector or selector in h.groups]


def run_plan(
    tasks: Sequence[PlannedTask],
    inventory: Inventory,
    connections: Connections,
    resolve_module: Callable[[str], Callable[..., ModuleOutput]],
    variables: Mapping[str, Any] = None,
    on_event: OnEvent = _ignore,
    log_dir: Optional[Path] = None,
    width: int = DEFAULT_WIDTH,
) -> PlayReport:
    """Run tasks one after another (a barrier between tasks) on their hosts in parallel."""
    report = PlayReport()
    variables = {"on_event": on_event, **(variables or {}), "report": report}  # modules may read earlier results
    for index, task in enumerate(tasks, 1):
        alive = [h for h in select_hosts(inventory, task.hosts) if report.hosts.get(h.name, _OK).succeeded]
        on_event(Event("task", text=task.name, data={"index": index, "hosts": [h.name for h in alive]}))
        module = resolve_module(task.module)
        step_dir = log_dir / f"{index:02d}-{_slug(task.name)}" if log_dir else None

        def action(transport, host: Host, task=task, module=module, step_dir=step_dir) -> HostResult:
            ctx = TaskContext(host, inventory, variables)
            output = module(ctx, **task.args)
            log_path = step_dir / f"{host.name}.log" if step_dir else None
            return apply_module_output(output, transport, host, on_event, log_path)

        if getattr(module, "cluster_scope", False):
            ctx = ClusterContext(alive, inventory, variables, connections, on_event)
            results = module(ctx, **task.args)
        else:
            results = for_each_host(alive, action, connections, width)
        for result in results.values():
            on_event(Event("host_done", result.host, result.detail, {"result": result, "task": task.name}))
            previous = report.hosts.get(result.host)
            report.hosts[result.host] = _merge(previous, result)
        report.tasks.append(TaskReport(task, results))
    return report


_OK = HostResult("", HostStatus.OK)


def apply_module_output(output: ModuleOutput, transport, host: Host, on_event: OnEvent, log_path: Optional[Path]) -> HostResult:
    if isinstance(output, Skip):
        return HostResult(host.name, HostStatus.SKIPPED, output.reason)
    if isinstance(output, HostResult):
        return output
    if callable(output):
        return output(transport, host)
    return run_commands(transport, host, output, on_event, log_path)


def _merge(previous: Optional[HostResult], current: HostResult) -> HostResult:
    """A host's state across tasks: failures stick, `changed` beats `ok`, data accumulates."""
    if previous is None:
        return current
    if not current.succeeded:
        return current
    status = HostStatus.CHANGED if HostStatus.CHANGED in (previous.status, current.status) else (
        HostStatus.OK if HostStatus.OK in (previous.status, current.status) else current.status
    )
    data = {**previous.data, **current.data}
    return HostResult(current.host, status, current.detail or previous.detail, current.exit_code,
                      current.stdout, current.stderr, previous.duration + current.duration, data, current.log_path)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "task"


# --------------------------------------------------------------------------- background work


class Background:
    """Per-host actions running while the caller does other work (the stacks of a stalled run, the
    node diagnostics of collect-logs), at most `width` at once. Results arrive as values."""

    def __init__(self, hosts: Sequence[Host], action: HostAction, connections: Connections, width: int = DEFAULT_WIDTH):
        self.results: dict[str, HostResult] = {}
        self._waiting, self._lock = list(reversed(hosts)), threading.Lock()
        # daemon threads of its own, not a pool's: a pool's threads are joined at exit, so an action
        # still running at Ctrl-C would hold the process
        self._threads = [threading.Thread(target=self._work, args=(action, connections), name=f"bg-{i}", daemon=True)
                         for i in range(max(1, min(width, len(hosts))))]
        for thread in self._threads:
            thread.start()

    def _work(self, action: HostAction, connections: Connections) -> None:
        while True:
            with self._lock:
                if not self._waiting:
                    return
                host = self._waiting.pop()
            self.results[host.name] = _on_host(host, action, connections)

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds in all; True when every action has finished."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)


class Streams:
    """Every host's long-running command (the live log of a run, `logs --follow`), all read by one
    thread that polls their descriptors: a run on hundreds of nodes costs one thread here, not one per
    node. The commands start through the pool; `on_output(host, data)` gets each host's stdout as it
    arrives, in this one thread; `on_end(host, result)` (stderr gathered in `result.stderr`) gives the
    host's HostResult. An unreachable host, or a connection lost on the way, is a value as in
    `for_each_host`. `close()` ends what still runs."""

    _POLL_S = 0.05  # how often streams whose output ended are asked for their exit status

    def __init__(self, hosts: Sequence[Host], command_of: Callable[[Host], Command],
                 on_output: Callable[[str, bytes], None], on_end: Callable[[str, CommandResult], HostResult],
                 connections: Connections):
        self.results: dict[str, HostResult] = {}
        self._hosts, self._command_of, self._connections = list(hosts), command_of, connections
        self._on_output, self._on_end = on_output, on_end
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._read_all, name="streams", daemon=True)
        self._thread.start()

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds; True when every host's command has ended."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def close(self) -> None:
        self._closed.set()

    def _read_all(self) -> None:
        import select

        opened: dict[str, _Followed] = {}

        def start(transport, host: Host) -> HostResult:
            # counted as in use until the stream ends (past MAX_OPEN the connection closes then)
            self._connections.acquire(host)
            try:
                command = self._command_of(host)
                opened[host.name] = _Followed(host, transport.open_stream(command), command.timeout)
            except BaseException:
                self._connections.release(host.name)
                raise
            return HostResult(host.name, HostStatus.OK)

        for name, result in for_each_host(self._hosts, start, self._connections).items():
            if name not in opened:  # unreachable, or the command could not start
                self.results[name] = result
        live = dict(opened)
        poller, registered = select.poll(), {}
        try:
            while live and not self._closed.is_set():
                by_fd = {fd: name for name, f in live.items() if not f.output_ended for fd in f.stream.filenos()}
                for fd in set(registered) - set(by_fd):
                    poller.unregister(fd)
                for fd in set(by_fd) - set(registered):
                    poller.register(fd, select.POLLIN | select.POLLHUP)
                registered = by_fd
                ending = any(f.output_ended for f in live.values())
                timeout = min([self._POLL_S if ending else 1.0, *(f.time_left() for f in live.values())])
                ready = {by_fd[fd] for fd, _event in poller.poll(max(0.0, timeout) * 1000)}
                for name in list(live):
                    followed = live[name]
                    result = followed.step(name in ready, self._on_output)
                    if result is not None:
                        del live[name]
                        self._end(followed.host, result)
        finally:
            for name, followed in live.items():  # closed early: what still runs is ended
                followed.stream.close()
                self._connections.release(name)
                self.results.setdefault(name, HostResult(name, HostStatus.FAILED, detail="stopped following"))

    def _end(self, host: Host, outcome) -> None:
        try:
            if isinstance(outcome, Exception):
                self.results[host.name] = _as_result(host, outcome, None, self._connections, time.monotonic())
            else:
                self.results[host.name] = self._on_end(host.name, outcome)
        except Exception as exc:  # noqa: BLE001 - the edge, as in _on_host
            self.results[host.name] = _as_result(host, exc, None, self._connections, time.monotonic())
        finally:
            self._connections.release(host.name)


class _Followed:
    """One host's stream in `Streams`: its stderr kept, its deadline, whether its output ended."""

    def __init__(self, host: Host, stream, timeout: Optional[float]):
        self.host, self.stream, self.started = host, stream, time.monotonic()
        self.deadline = self.started + timeout if timeout else None
        self.stderr: list[bytes] = []
        self.output_ended = False

    def time_left(self) -> float:
        return 3600.0 if self.deadline is None else self.deadline - time.monotonic()

    def _stderr_text(self) -> str:
        return b"".join(self.stderr).decode("utf-8", errors="replace")

    def step(self, readable: bool, on_output: Callable[[str, bytes], None]):
        """What the stream had, handed on; the host's CommandResult (or the exception) once it ended."""
        try:
            if readable and not self.output_ended:
                chunks = self.stream.read_ready()
                if chunks is None:
                    self.output_ended = True
                for kind, data in chunks or ():
                    if kind == "stdout":
                        on_output(self.host.name, data)
                    else:
                        self.stderr.append(data)
            if self.output_ended:
                result = self.stream.exited()
                if result is not None:
                    self.stream.close()
                    return replace(result, stderr=self._stderr_text())
            if self.deadline is not None and time.monotonic() >= self.deadline:
                self.stream.close()
                return CommandResult(None, "", self._stderr_text(), time.monotonic() - self.started, timed_out=True)
        except Exception as exc:  # noqa: BLE001 - the connection lost on the way: a value for this host
            self.stream.close()
            return exc
        return None


class Ticker:
    """A monotonic clock for polling loops: `sleep_until_next()` keeps a fixed period."""

    def __init__(self, period: float):
        self.period = period
        self.started = time.monotonic()
        self._next = self.started

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def sleep_until_next(self, wake: Optional[threading.Event] = None) -> None:
        """Sleep until the next period begins; `wake`, set by another thread (something happened that
        the loop should look at now), ends the sleep early, and the periods count from then."""
        self._next += self.period
        delay = max(0.0, self._next - time.monotonic())
        if wake is None:
            time.sleep(delay)
        elif wake.wait(delay):
            wake.clear()
            self._next = time.monotonic()
