"""The pool: one action on many hosts (`for_each_host`), at most `width` at once, each host's
result a value; and the commands of one host run in order (`run_commands`), logged per host."""
from __future__ import annotations

import os
import time
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from clusterctl import interrupts
from clusterctl.errors import ClusterctlError, HostKeyError, UnreachableError
from clusterctl.executor.connections import Connections, _unreachable
from clusterctl.executor.events import Event, OnEvent, _ignore
from clusterctl.models import Command, CommandResult, Host, HostResult, HostStatus

DEFAULT_WIDTH = 64
INTERRUPT_CHECK_S = 0.25
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
        futures = [pool.submit(one, host) for host in hosts]
        pending = set(futures)
        while pending:  # in slices: an interrupt a finalizer swallowed is raised again within one (interrupts.py)
            _done, pending = wait(pending, timeout=INTERRUPT_CHECK_S)
            interrupts.raise_if_swallowed()
        results = [future.result() for future in futures]
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
            from clusterctl.ground.files import private_dir

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


