"""One persistent transport per host for the whole invocation, opened lazily and in parallel
(`Connections`), and the open-files limit lifted for them."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from clusterctl.errors import ClusterctlError, HostKeyError, UnreachableError
from clusterctl.models import Host, HostResult, HostStatus

# Connections kept open for the whole invocation. Each costs the controller a thread (paramiko's
# transport; a second one for a jump host's keepalive), a socket (two through a jump host) and about
# 0.3 MB. Up to MAX_OPEN nodes every connection is reused by every step; past it, a node's
# connection is opened for its action and closed after (a reconnect per step for those nodes only),
# so threads and descriptors stay under ~MAX_OPEN + the pool's width, far below the default
# descriptor limit of 1024 that `raise_descriptor_limit` lifts anyway.
MAX_OPEN = 256
CONNECT_RETRIES = 1  # for a dropped handshake (sshd MaxStartups), never for a command that ran


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

    def warm(self, hosts, width: int = 64) -> None:
        """Start opening `hosts`' connections now, in the background (`width` daemon threads at most, the first
        `max_open` hosts), while the command still prepares (issue 52: its imports, its plan): `get` then waits
        for a connection under way, and raises what opening it raised (remembered, or met again)."""
        with self._guard:
            pending = [h for h in hosts if h.name not in self._open and h.name not in self._failed][:self.max_open]
        lock = threading.Lock()
        queue = iter(pending)

        def opener() -> None:
            while True:
                with lock:
                    host = next(queue, None)
                if host is None:
                    return
                try:
                    self.get(host)
                except Exception:  # noqa: BLE001 - said where the connection is used: `get` raises it there
                    continue

        for index in range(min(width, len(pending))):
            threading.Thread(target=opener, name=f"warm-{index}", daemon=True).start()

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

