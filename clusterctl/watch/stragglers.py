"""Stragglers, attached: the verdict of node/straggler_verdict.py (the one copy, which the detached
run's supervisor uses too) on the controller's py-spy samples, with what only the controller knows:
the step time, from the ranks' progress in the live log where they print one (`step 120`, tqdm's
`120/1000 [...]` or its rate), so that the lag is said in seconds (else as a share of the step), and
the rank's GPU. Pure: samples and times in, values out.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

from clusterctl.documents import parts
from clusterctl.documents.convert import plain
from clusterctl.node import straggler_verdict as verdict, waits_verdict
from clusterctl.node.straggler_verdict import RECENT, WINDOW, Reading, Tally  # noqa: F401  (the verdict's values)
from clusterctl.watch.stacks import RankStack

Key = tuple[str, int]  # (host, rank)


@dataclass(frozen=True)
class Straggler:
    host: str
    rank: int
    gpu: Optional[int]
    lag_s: Optional[float]  # seconds per step the others wait for it (None: no step time known)
    lag_share: float  # of the step
    ratio: float  # its work per step over the median rank's
    since: float  # wall-clock time it was first named
    singled_out: int
    samples: int
    others_waiting: int  # ranks that waited for it
    said: str = ""  # the evidence where it is not py-spy's samples (the flight recorder's: watch/collective_watch.py)

    @property
    def evidence(self) -> str:
        return self.said or verdict.evidence(self.singled_out, self.samples, self.others_waiting)

    @property
    def by_flight_recorder(self) -> bool:
        return bool(self.said)

    def how_late(self) -> str:
        if self.lag_s is not None:
            return f"+{self.lag_s:.2f} s per step"
        return f"+{self.lag_share:.0%} of each step"

    def line(self) -> str:
        """`node2 r3: +0.41 s per step (2.1x the median), 40 of the last 40 samples working while ...`"""
        gpu = f" (GPU {self.gpu})" if self.gpu is not None else ""
        return f"{self.host} r{self.rank}{gpu}: {self.how_late()} ({self.ratio:.1f}x the median), {self.evidence}"

    def to_json(self) -> dict:
        """Its document, rounded; `until` stays null while it is late (watch/straggler_watch.py sets it)."""
        return plain(parts.Straggler(
            host=self.host, rank=self.rank, gpu=self.gpu, lag_s=round(self.lag_s, 3) if self.lag_s is not None else None,
            ratio=round(self.ratio, 2), since=round(self.since, 3), evidence=self.evidence,
            lag_share=round(self.lag_share, 3)))


def waits(rank: RankStack) -> bool:
    """Waiting for the others: inside torch.distributed, (NCCL) in the CUDA sync behind a collective, or
    asleep inside a library (a plain DDP loop's reducer under loss.backward()); never while stopped. The
    nodes' rule itself (node/straggler_verdict.py frames_wait), on RankStack's frames: one copy of it."""
    return verdict.frames_wait([(f.function, f.path or f.file) for f in rank.frames], rank.state)


def readings(samples: Iterable[Sequence[RankStack]]) -> list[list[Reading]]:
    """The samples as the verdict reads them: each readable rank, and whether it waits."""
    return [[Reading(r.host, r.rank, waits(r)) for r in sample if r.frames] for sample in samples]


def tally(samples: Iterable[Sequence[RankStack]]) -> dict[Key, Tally]:
    """Each rank's counts over the samples (a sample: every rank read at about the same moment)."""
    return verdict.tally(readings(samples))


def find(samples: Sequence[Sequence[RankStack]], step_s: Optional[float], now: float,
         gpu_of: Mapping[Key, int] = {}) -> Optional[Straggler]:
    """The straggler of the latest WINDOW samples, or None when every rank keeps pace."""
    found = verdict.judge(readings(list(samples)[-WINDOW:]))
    if found is None:
        return None
    return Straggler(found.host, found.rank, gpu_of.get((found.host, found.rank)),
                     found.lag_share * step_s if step_s else None, found.lag_share, found.ratio, now,
                     found.singled_out, found.samples, found.others_waiting)


def of_waits(found: waits_verdict.WaitsVerdict, step_s: Optional[float], now: float, gpu_of: Mapping[Key, int] = {}) -> Straggler:
    """The straggler the flight recorder's rounds named (node/waits_verdict.py judge_waits)."""
    return Straggler(found.host, found.rank, gpu_of.get((found.host, found.rank)),
                     found.lag_share * step_s if step_s else None, found.lag_share, found.ratio, now,
                     waits_verdict.WAITS_ROUNDS, waits_verdict.WAITS_ROUNDS, 0, waits_verdict.waits_evidence(found))


def recovered(samples: Sequence[Sequence[RankStack]], named: Straggler) -> bool:
    """The named rank is singled out in under RECOVERED_SHARE of the latest RECENT samples."""
    return verdict.recovered(readings(list(samples)[-RECENT:]), named.host, named.rank)


# --------------------------------------------------------------------------- step time from the live log

# `step 120`, `Step: 120/1000`, `iter=120`, `global_step 120` (not `step 0.55s`: a time, not a step)
_STEP_RE = re.compile(r"\b(?:global[_ ]step|step|iter(?:ation)?)\b\s*[:=#]?\s*([0-9]{1,9})(?![0-9.])", re.IGNORECASE)
# tqdm: `120/1000 [00:30<03:40, 4.01it/s]` or `..., 1.25s/it]`
_TQDM_RE = re.compile(r"\b([0-9]{1,9})/[0-9]{1,9} \[[^\]]*?,\s*([0-9]{1,6}(?:\.[0-9]{1,6})?)(it/s|s/it)\s*\]")


def progress_of(text: str) -> tuple[Optional[int], Optional[float]]:
    """(step number, seconds per step) that a rank's line says, each None where it says none."""
    tqdm = None
    for tqdm in _TQDM_RE.finditer(text):
        pass
    if tqdm:
        value = float(tqdm.group(2))
        seconds = (1.0 / value if value > 0 else None) if tqdm.group(3) == "it/s" else (value or None)
        return int(tqdm.group(1)), seconds
    step = _STEP_RE.search(text)
    return (int(step.group(1)) if step else None), None


@dataclass(frozen=True)
class Progress:
    """When a rank's line said which step: (controller's monotonic time, step)."""

    at: float
    step: int


def step_time(seen: Sequence[Progress], rates: Sequence[float] = ()) -> Optional[float]:
    """Seconds per step: over the latest run of steps that went forward (a counter that starts again,
    a new epoch, begins a new run), else the median rate tqdm printed."""
    run = list(seen[-1:])
    for earlier in reversed(seen[:-1]):
        if earlier.step > run[0].step:
            break
        if earlier.step < run[0].step:
            run.insert(0, earlier)
    first, last = (run[0], run[-1]) if run else (None, None)
    if first is not None and last.step > first.step and last.at > first.at:
        return (last.at - first.at) / (last.step - first.step)
    return statistics.median(rates) if rates else None
