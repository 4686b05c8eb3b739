"""Every host's long-running command read by one thread polling their descriptors (`Streams`)."""
from __future__ import annotations

import time
import threading
from dataclasses import replace
from typing import Callable, Optional, Sequence

from clusterctl.executor.connections import Connections
from clusterctl.executor.pool import _as_result, for_each_host
from clusterctl.models import Command, CommandResult, Host, HostResult, HostStatus

STDERR_KEPT = 1 << 20  # of a followed command's stderr, the last bytes kept (the stream of stdout is handed on, not kept)


class Streams:
    """Every host's long-running command (the live log of a run, `logs --follow`), all read by one
    thread that polls their descriptors: a run on hundreds of nodes costs one thread here, not one per
    node. The commands start through the pool; `on_output(host, data)` gets each host's stdout as it
    arrives, in this one thread; `on_end(host, result)` (stderr gathered in `result.stderr`) gives the
    host's HostResult. An unreachable host, or a connection lost on the way, is a value as in
    `for_each_host`. `close()` ends what still runs. `send(host, data)` writes to a running command's
    stdin (one started with `stdin_open`), `on_stderr(host, data)` hears its stderr as it comes (the
    run's lease carried by its stream: plan/wrapper.follow_command)."""

    _POLL_S = 0.05  # how often streams whose output ended are asked for their exit status

    def __init__(self, hosts: Sequence[Host], command_of: Callable[[Host], Command],
                 on_output: Callable[[str, bytes], None], on_end: Callable[[str, CommandResult], HostResult],
                 connections: Connections, on_stderr: Optional[Callable[[str, bytes], None]] = None):
        self.results: dict[str, HostResult] = {}
        self._running: dict[str, "_Followed"] = {}  # the commands started and not ended (send)
        self._hosts, self._command_of, self._connections = list(hosts), command_of, connections
        self._on_output, self._on_end, self._on_stderr = on_output, on_end, on_stderr
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._read_all, name="streams", daemon=True)
        self._thread.start()

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds; True when every host's command has ended."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def close(self) -> None:
        self._closed.set()

    def send(self, host: str, data: bytes) -> bool:
        """`data` to `host`'s command's stdin: False where it is not running (not yet, or no more) or could not."""
        followed = self._running.get(host)
        if followed is None or followed.output_ended:
            return False
        try:
            return bool(followed.stream.send(data))
        except Exception:  # noqa: BLE001 - the connection lost on the way: the reading thread says so
            return False

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
        self._running = live  # the same dict: an ended command leaves it
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
                    result = followed.step(name in ready, self._on_output, self._on_stderr)
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
        self.stderr, self.stderr_dropped = bytearray(), 0  # its last STDERR_KEPT bytes: an error says itself last
        self.output_ended = False

    def time_left(self) -> float:
        return 3600.0 if self.deadline is None else self.deadline - time.monotonic()

    def _stderr_text(self) -> str:
        text = self.stderr.decode("utf-8", errors="replace")
        return (f"[clusterctl: the first {self.stderr_dropped} bytes of this stderr were dropped]\n" + text
                if self.stderr_dropped else text)

    def _keep_stderr(self, data: bytes) -> None:
        self.stderr += data
        if len(self.stderr) > STDERR_KEPT:
            cut = len(self.stderr) - STDERR_KEPT
            self.stderr_dropped += cut
            del self.stderr[:cut]

    def step(self, readable: bool, on_output: Callable[[str, bytes], None],
             on_stderr: Optional[Callable[[str, bytes], None]] = None):
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
                        self._keep_stderr(data)
                        if on_stderr is not None:
                            on_stderr(self.host.name, data)
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

