"""What a node's torchrun said of its failed worker processes (pure): the agent's
`failed (exitcode: N) local_rank: L (pid: P)` line, with its glog timestamp to the microsecond,
and the `Root Cause (first observed failure)` block of its ChildFailedError report (rank,
local_rank, exit code, the signal that ended it, the time to the second).

Both are torchrun's own words, printed by every torch from 1.9 on; the first-failure logic
(watch/failures.py) orders nodes by them instead of by when the controller noticed a node end."""
from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from datetime import datetime
from typing import Optional

# E1127 04:45:16.220000 37 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 3) local_rank: 1 (pid: 49) of binary: ...
_FAILED_LINE = re.compile(
    r"^[EWI](?P<month>\d\d)(?P<day>\d\d) (?P<clock>\d\d:\d\d:\d\d(?:\.\d{1,9})?)\s+\d+\s+\S+\]\s*"
    r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)")
_ROOT_HEADER = "Root Cause (first observed failure)"
_FIELD = re.compile(r"^\s*(time|host|rank|exitcode)\s*:\s*(.*?)\s*$")
_RANK_FIELD = re.compile(r"^(\d+)\s*\(local_rank:\s*(\d+)\)")
_EXITCODE_FIELD = re.compile(r"^(-?\d+)(?:\s*\(pid:\s*(\d+)\))?")
_SIGNAL_NAME = re.compile(r"\((SIG[A-Z0-9]+)\)")
_ROOT_TIME = "%Y-%m-%d_%H:%M:%S"


@dataclass(frozen=True)
class FailedProcess:
    """The worker process torchrun names as its first observed failure."""

    local_rank: int
    rank: Optional[int]  # as torchrun computed it (the global rank); failures.py recomputes it from the plan
    exit_code: Optional[int]  # negative: the signal that ended it
    at: Optional[float]  # seconds (the agent's clock; only differences between nodes are used)
    pid: Optional[int] = None  # in the namespace torchrun ran in (a container's pids are not the kernel log's)

    @property
    def signal_name(self) -> Optional[str]:
        if self.exit_code is None or self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"


def first_failed_process(tail: str, year: int = 2000) -> Optional[FailedProcess]:
    """The process torchrun's report on this node names first, or None when the tail holds no report.
    The Root Cause block gives rank and exit code; the agent's `failed (exitcode...)` line of the same
    local rank, where present, gives the time to the microsecond (the block's is to the second)."""
    root = _root_cause_fields(tail)
    failed = _failed_lines(tail, year)
    if root is None and not failed:
        return None
    if root is None:
        local, code, at, pid = failed[0]
        return FailedProcess(local, None, code, at, pid)
    ranks = _RANK_FIELD.match(root.get("rank", ""))
    code = _EXITCODE_FIELD.match(root.get("exitcode", ""))
    local = int(ranks.group(2)) if ranks else (failed[0][0] if failed else 0)
    same = [at for line_local, _, at, _ in failed if line_local == local]
    at = same[0] if same else _root_time(root.get("time", ""))
    pid = int(code.group(2)) if code and code.group(2) else None
    return FailedProcess(local, int(ranks.group(1)) if ranks else None,
                         int(code.group(1)) if code else (failed[0][1] if failed else None), at, pid)


def _root_cause_fields(tail: str) -> Optional[dict]:
    """The fields of the last Root Cause block (a relaunch's report follows the earlier one)."""
    fields: Optional[dict] = None
    inside = False
    for line in tail.splitlines():
        stripped = line.strip()
        if stripped.startswith(_ROOT_HEADER):
            fields, inside = {}, True
        elif inside and (stripped.startswith("====") or stripped.startswith("----")):
            inside = False
        elif inside and fields is not None:
            match = _FIELD.match(stripped)
            if match:
                fields.setdefault(match.group(1), match.group(2))
    return fields


def _failed_lines(tail: str, year: int) -> list[tuple[int, Optional[int], Optional[float], int]]:
    found = []
    for line in tail.splitlines():
        match = _FAILED_LINE.match(line.strip())
        if match:
            found.append((int(match.group("local")), int(match.group("code")), _glog_time(match, year),
                          int(match.group("pid"))))
    return found


def _glog_time(match: re.Match, year: int) -> Optional[float]:
    clock, _, fraction = match.group("clock").partition(".")
    try:
        stamp = datetime.strptime(f"{year}-{match.group('month')}-{match.group('day')} {clock}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return stamp.timestamp() + (float(f"0.{fraction}") if fraction else 0.0)


def _root_time(text: str) -> Optional[float]:
    try:
        return datetime.strptime(text, _ROOT_TIME).replace(year=2000).timestamp()
    except ValueError:
        return None
