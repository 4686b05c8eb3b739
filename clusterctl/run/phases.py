"""When each phase of a run was reached, in seconds since the command started (`run --json`'s
`phases`, and the run record's). How each is observed, on this machine:

- `probe`: the nodes' facts are known (the backend's `facts`: read from `clusterctl up`'s, or probed).
- `launch`: every node's start command returned (torchrun started, detached, on every node).
- `first_rank`: the first node's output stream names torchrun's per-rank directory (torchrun makes
  it as it starts its workers; the stream looks for it every 0.25 s) or brings a rank's first line.
- `last_rank_done`: the last line of any rank reached this machine.
- `torchrun_exits`: the poll that learned the last node's torchrun exit code (`agent.exit`).
- `watch_ended`: the watch loop carried the end out (a success stops nothing; a failure stops the ranks).
- `streams_ended`: the py-spy the nodes kept is removed and every node's output stream has ended.
- `recorded`: the run record, the health record and the stragglers' are written.
- `returned`: the nodes' connections are closed (and the run's lock let go); the document is about to be returned.

`cpu` (`run --json`'s `phases_cpu`): at each phase, the CPU seconds (user + system) this process
(every thread) and the children it reaped (a `connection: local` node's commands, ssh) had spent
since it started; the difference of two is what the controller spent between them, a figure a
loaded machine does not inflate as it does wall time.

"Since the command started" is since this process started (Linux: /proc/self/stat), so the
interpreter's own start-up is in every figure, as it is in the time a user waits; elsewhere,
since this module was imported.
"""
from __future__ import annotations

import os
import resource
import time
from typing import Optional

from clusterctl.node.rank_procs import stat_fields

NAMES = ("probe", "launch", "first_rank", "last_rank_done", "torchrun_exits", "watch_ended", "streams_ended",
         "recorded", "returned")


def process_started() -> float:
    """This process's start, wall clock (Linux); the import of this module elsewhere."""
    try:
        ticks = int(stat_fields("self")[19])
        with open("/proc/uptime") as uptime:  # to 0.01 s (the boot time in /proc/stat is whole seconds)
            up = float(uptime.read().split()[0])
        return time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return _IMPORTED


_IMPORTED = time.time()


def cpu_seconds() -> float:
    """User + system CPU seconds of this process (every thread) and of the children it reaped."""
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


class Phases:
    """The phases reached so far. `reach` keeps the first time, `again` the latest; thread-safe
    enough for its use (a float stored per key, from the streams' threads too)."""

    def __init__(self, started: Optional[float] = None):
        self.started = process_started() if started is None else started
        self._at: dict[str, float] = {}
        self._cpu: dict[str, float] = {}

    def reach(self, name: str) -> None:
        if name not in self._at:
            self._cpu[name] = cpu_seconds()
            self._at.setdefault(name, time.time())

    def again(self, name: str) -> None:
        self._cpu[name] = cpu_seconds()
        self._at[name] = time.time()

    def cpu_json(self) -> dict:  # the value of RunDocument/RunRecord.phases_cpu
        """{name: CPU seconds this process had spent at the phase}, as to_json."""
        return {name: round(self._cpu[name], 3) for name in NAMES if name in self._cpu}

    def to_json(self) -> dict:  # the value of RunDocument/RunRecord.phases (dict[str, float]), not a document
        """{name: seconds since the command started}, in NAMES' order, the phases reached only."""
        return {name: round(max(0.0, self._at[name] - self.started), 3) for name in NAMES if name in self._at}
