"""Stragglers: the rank that the others wait for, step after step. Pure: samples and times in, values out.

Every rank of a data-parallel job meets the others at each step's collectives. A rank slower than
the rest (a throttled GPU, a noisy neighbour, a slow data loader) arrives last every time, and the
others wait for it inside torch.distributed. So in periodic py-spy samples of every rank (watch/sampler.py,
non-blocking: the ranks are not paused), the straggler is the rank that is working while every other
rank waits in a collective (or, with NCCL, in the CUDA sync behind one). Over a window of samples:
- a rank singled out so (working, all others waiting) in a good share of the samples, far more often
  than any other rank, is late at the collectives consistently: it is named;
- the share of samples the others spend waiting, w, is the part of each step they lose to it: its lag
  is w x the step time, and it works (1 - w_self) / (1 - w) times as long as the median rank.
The step time comes from the ranks' progress in the live log where they print one (`step 120`,
tqdm's `120/1000 [...]` or its rate); without it the lag is said as a share of the step.

A healthy job has no rank singled out more than at random: the named rank must be singled out in at
least MIN_SHARE of the samples, MIN_SAMPLES times, and DOMINANCE times as often as the next rank.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

from clusterctl.documents import parts
from clusterctl.documents.convert import plain
from clusterctl.watch.stacks import RankStack

WINDOW = 40  # samples judged (the latest)
MIN_SAMPLES = 5  # samples that single the rank out, at least
MIN_SHARE = 0.10  # of the window's samples: on 4 x H100 a rank 20% slower (on its CPU side) was singled out in
# 5 of 34 samples (14.7%), the healthy ranks in 0 of 37-39 (docs/gpu-validation.md, issue 37)
DOMINANCE = 3.0  # times as often as any other rank
RECOVERED_SHARE = MIN_SHARE / 2  # below this, over the latest RECENT samples, a named rank keeps pace again
RECENT = 20
STALLED_SHARE = 0.95  # the others wait in (nearly) every sample: not a slow rank but a stopped one

Key = tuple[str, int]  # (host, rank)


@dataclass(frozen=True)
class Tally:
    """One rank over a window: samples it was read in, waiting in a collective, singled out."""

    host: str
    rank: int
    read: int = 0
    waiting: int = 0
    singled_out: int = 0  # working while every other rank read in that sample waited

    @property
    def wait_share(self) -> float:
        return self.waiting / self.read if self.read else 0.0


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

    @property
    def evidence(self) -> str:
        return (f"{self.singled_out} of the last {self.samples} samples working while the other "
                f"{self.others_waiting} rank{'s' if self.others_waiting != 1 else ''} waited in a collective")

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
    """Waiting for the others: inside torch.distributed, or (NCCL) in the CUDA sync behind a collective."""
    return rank.in_collective or rank.in_cuda_wait


def tally(samples: Iterable[Sequence[RankStack]]) -> dict[Key, Tally]:
    """Each rank's counts over the samples (a sample: every rank read at about the same moment)."""
    counts: dict[Key, list[int]] = {}
    for sample in samples:
        readable = [r for r in sample if r.frames]
        waiting = {(r.host, r.rank) for r in readable if waits(r)}
        for rank in readable:
            key = (rank.host, rank.rank)
            row = counts.setdefault(key, [0, 0, 0])
            row[0] += 1
            row[1] += key in waiting
            others = len(readable) - 1
            row[2] += key not in waiting and others > 0 and len(waiting) == others
    return {key: Tally(key[0], key[1], *row) for key, row in counts.items()}


def find(samples: Sequence[Sequence[RankStack]], step_s: Optional[float], now: float,
         gpu_of: Mapping[Key, int] = {}) -> Optional[Straggler]:
    """The straggler of the latest WINDOW samples, or None when every rank keeps pace."""
    window = list(samples)[-WINDOW:]
    tallies = tally(window)
    ranked = sorted(tallies.values(), key=lambda t: (-t.singled_out, t.rank))
    if len(ranked) < 2:
        return None
    top, runner_up = ranked[0], ranked[1]
    if top.singled_out < max(MIN_SAMPLES, MIN_SHARE * len(window)) or top.singled_out < DOMINANCE * runner_up.singled_out:
        return None
    others = [t.wait_share for t in ranked[1:] if t.read]
    lag_share = statistics.median(others) if others else 0.0
    if lag_share >= STALLED_SHARE:
        return None  # the others never get past the collective: a hang, the stall watch's to judge (watch/stalls.py)
    ratio = (1.0 - top.wait_share) / max(1.0 - lag_share, 0.05)
    return Straggler(top.host, top.rank, gpu_of.get((top.host, top.rank)),
                     lag_share * step_s if step_s else None, lag_share, ratio, now, top.singled_out,
                     len(window), len(ranked) - 1)


def recovered(samples: Sequence[Sequence[RankStack]], named: Straggler) -> bool:
    """The named rank is singled out in under RECOVERED_SHARE of the latest RECENT samples."""
    recent = list(samples)[-RECENT:]
    if len(recent) < RECENT // 2:
        return False
    row = tally(recent).get((named.host, named.rank))
    return row is None or row.singled_out < RECOVERED_SHARE * len(recent)


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
