"""Calls that run beside the caller and must never hold it up (a notification's delivery, issue 41):
each on a daemon thread of its own, retried with a growing pause, and waited for at most a bound."""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterator


class Beside:
    """Daemon threads, one per call started; `wait(timeout)` at the end (a process that exits would
    cut a delivery in flight), never longer than the bound the caller gives."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self, call: Callable[[], None], name: str = "beside") -> None:
        thread = threading.Thread(target=call, name=name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds in all; True when every call has finished."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)


def backoff(tries: int, first_pause_s: float, factor: float = 2.0) -> Iterator[int]:
    """A bounded retry with a growing pause: yields 0..tries-1, pausing first_pause_s, then factor
    times longer each time, between them (not after the last)."""
    pause = first_pause_s
    for attempt in range(tries):
        if attempt:
            time.sleep(pause)
            pause *= factor
        yield attempt
