"""Work beside the caller: per-host actions on threads of their own (`Background`)."""
from __future__ import annotations

import threading
import time
from typing import Sequence

from clusterctl.executor.connections import Connections
from clusterctl.executor.pool import DEFAULT_WIDTH, HostAction, _on_host
from clusterctl.models import Host, HostResult

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

