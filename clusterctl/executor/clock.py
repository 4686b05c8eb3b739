"""The clock: every wait, sleep and deadline loop of the controller (`Ticker`, `ticks`,
`wait_until`, `attempts`), so stages say what they wait for and never hold a clock of their own."""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterator, Optional

class Ticker:
    """A monotonic clock for polling loops: `sleep_until_next()` keeps a fixed period."""

    def __init__(self, period: float):
        self.period = period
        self.started = time.monotonic()
        self._next = self.started

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def during(self, seconds: float, done: Callable[[], bool] = lambda: False) -> Iterator[float]:
        """The periods of the next `seconds`, until `done()`: each turn sleeps until the next period
        begins, then yields the seconds that were left (`for _ in ticker.during(3, settled): poll()`)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and not done():
            self.sleep_until_next()
            yield left

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


def ticks(timeout_s: float, interval_s: float) -> Iterator[float]:
    """A deadline loop: yields the seconds left, then pauses `interval_s` before the next turn, until
    `timeout_s` has passed (a turn that starts before the deadline always runs). `for left in
    ticks(30, 0.5): ... break` replaces `while time.monotonic() < deadline: ...; time.sleep(0.5)`."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        yield left
        time.sleep(interval_s)


def wait_until(ready: Callable[[], bool], timeout_s: float, interval_s: float,
               wake: Optional[threading.Event] = None) -> bool:
    """Ask `ready()` every `interval_s` until it says yes or `timeout_s` has passed; True when it said
    yes. `wake`, set by another thread when `ready()` may have become true, ends a pause at once (it is
    not cleared: `ready()` is expected to look at it)."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if wake is None:
            time.sleep(min(interval_s, left))
        else:
            wake.wait(min(interval_s, left))
    return True


def attempts(tries: int, pause_s: float) -> Iterator[int]:
    """A bounded retry: yields 0..tries-1, pausing `pause_s` between them (not after the last);
    `for attempt in attempts(4, 0.02): if try_once(): break`."""
    for attempt in range(tries):
        if attempt:
            time.sleep(pause_s)
        yield attempt
