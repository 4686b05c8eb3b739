"""Stragglers' verdict: the rank that the others wait for, step after step. Pure: readings in, values out.
The one copy, used by the controller's attached watch (watch/stragglers.py) and, detached, by the
master node's supervisor (engine.py, fed by node_stragglers.py in each keeper): the standard library
only, Python 3.8+, shipped beside node_agent.py.

Every rank of a data-parallel job meets the others at each step's collectives. A rank slower than
the rest arrives last every time, and the others wait for it inside torch.distributed. So in
periodic non-blocking py-spy samples of every rank, the straggler is the rank that is working while
every other rank waits in a collective (or, with NCCL, in the CUDA sync behind one; or, in a loop with
no collective of its own, asleep in the kernel inside torch's C++: frames_wait). A Reading is one
readable rank in one sample: where it is (host, rank) and whether it waits. Over a window of samples:
- a rank singled out so (working, all others waiting) in a good share of the samples, far more often
  than any other rank, is late at the collectives consistently: it is named;
- the share of samples the others spend waiting, w, is the part of each step they lose to it, and it
  works (1 - w_self) / (1 - w) times as long as the median rank.
A healthy job has no rank singled out more than at random: the named rank must be singled out in at
least MIN_SHARE of the samples, MIN_SAMPLES times, and DOMINANCE times as often as the next rank, and
more often than chance would: in a healthy job the rank that comes last to a collective is any rank,
so each singled-out sample falls on each of the k ranks with probability 1/k; the named rank's count
must be one that chance gives any of the k ranks with probability at most ALPHA (a binomial tail,
times k for picking the highest). With two ranks the fixed thresholds alone were thin: an untouched
2-rank run on an H200 had rank 1 named at 5 of 20 samples to at most 1 (docs/gpu-validation/watch49),
which chance gives either rank with probability >= 0.06.
"""
import math
import re
import statistics
from collections import namedtuple

if __package__:  # imported by the controller
    from clusterctl.node.waits_verdict import (WAITS_ROUND_S, WaitsRounds, WaitsVerdict, read_upto, seconds_value,
                                              waits_evidence)
else:  # beside node_agent.py in a node's run dir
    from waits_verdict import WAITS_ROUND_S, WaitsRounds, WaitsVerdict, read_upto, seconds_value, waits_evidence

RUNS_ON_NODES = True
# The pace, attached and detached alike: a sample of every rank each INTERVAL_S, the first FIRST_AFTER_S after
# the start (the ranks meet at the rendezvous meanwhile)
INTERVAL_S = 1.0
FIRST_AFTER_S = 3.0
# Ranks still importing (the main thread inside importlib's `_find_and_load`: `import torch` at the start) wait
# for nobody and nobody waits for them yet: while every rank read is, the next look (one sample) comes
# IMPORT_PAUSE_S later, doubled after each such look up to IMPORT_PAUSE_MAX_S (issue 52: a busy rank's dump is
# ~15 ms of its node's CPU; at 8 rehearsal nodes the import took 88 s, with a round every 10 s 1.5 CPU s a node)
IMPORT_PAUSE_S, IMPORT_PAUSE_MAX_S = 5.0, 20.0
WINDOW = 40  # samples judged (the latest)
MIN_SAMPLES = 5  # samples that single the rank out, at least
MIN_SHARE = 0.10  # of the window's samples: on 4 x H100 a rank 20% slower (on its CPU side) was singled out in
# 5 of 34 samples (14.7%), the healthy ranks in 0 of 37-39 (docs/gpu-validation.md, issue 37)
DOMINANCE = 3.0  # times as often as any other rank
ALPHA = 0.01  # chance of the named rank's lead among ranks alike, at most
RECOVERED_SHARE = MIN_SHARE / 2  # below this, over the latest RECENT samples, a named rank keeps pace again
RECENT = 20
# The others wait in every sample: nothing moves, a hang (a stopped rank): the stall watch's to judge. Not "nearly"
# every sample: in a loop that talks more than it computes (FSDP2 over gloo, 3 CPU ranks) the others wait in
# 95-97% of the samples behind a rank held 44% of the time, and the job still moves (docs/benchmarks.md 6b)
STALLED_SHARE = 1.0

# torch.distributed's own files: a rank whose main thread passes through one waits in a collective (or the store)
COLLECTIVE_FILES = ("torch/distributed/",)
# CUDA's host-side waits: torch.cuda.synchronize() and Stream.synchronize() spin a CPU until the GPU's queue
# drains; behind an NCCL kernel whose peer has not come that is a wait, not work (docs/gpu-validation.md, round 2)
CUDA_WAITS = (("synchronize", "torch/cuda/__init__.py"), ("synchronize", "torch/cuda/streams.py"))
# Where library code lives (pip's folders, the standard library): a main thread asleep in the kernel (State: S, a
# futex or poll: /proc/PID/task/PID/stat) with such a frame innermost waits for someone else. That is how a plain
# DDP loop's wait is seen: the reducer's allreduce waits in C++ under loss.backward()
# (torch/autograd/graph.py:_engine_run_backward), FSDP's in its hooks, DeepSpeed's in its engine, no frame of
# torch.distributed on the Python stack; a rank computing there is R (on a CPU, or runnable behind a noisy
# neighbour), a rank held from outside T. Asleep in the job's own code (time.sleep standing in for GPU work) is work.
LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "<frozen ")
STDLIB_RE = re.compile(r"/lib/python3\.\d+/")
ASLEEP = "S"
# Stopped (SIGSTOP, job control, a tracer): whatever its frames say, a stopped rank waits for nobody, the others
# wait for it. FSDP2 over gloo spends most of each step inside torch.distributed, so a rank held from outside is
# mostly stopped inside a collective: read by its frames alone it "waited" like the ranks waiting for it, and a
# rank held 23% of the time (+30% step time) was never named (docs/benchmarks.md 6b, on a quiet 16-core node)
STOPPED = ("T", "t")

Reading = namedtuple("Reading", "host rank waiting")  # one readable rank in one sample
Tally = namedtuple("Tally", "host rank read waiting singled_out")
# host, rank, lag_share (of the step), ratio (its work per step over the median's), singled_out, samples, others_waiting
Verdict = namedtuple("Verdict", "host rank lag_share ratio singled_out samples others_waiting")


def in_collective(where):
    """A frame's file (py-spy's path, else its short name) inside torch.distributed."""
    return any(part in where for part in COLLECTIVE_FILES)


def is_cuda_wait(function, where):
    return any(function == name and where.endswith(file) for name, file in CUDA_WAITS)


def in_library(where):
    """A frame's file in an installed package or the standard library (not the job's own code): its full path,
    or, where py-spy gave only its short name, a relative one with a folder (py-spy shortens an installed
    package's path to `torch/nn/modules/module.py`; the job's own files keep their path)."""
    return any(part in where for part in LIBRARY_PARTS) or bool(STDLIB_RE.search(where)) or \
        ("/" in where and not where.startswith(("/", "./")))


def importing(functions):
    """A main thread inside `import` (its functions' names, any order): importlib's `_find_and_load`."""
    return any(name == "_find_and_load" for name in functions)


def import_pause_s(looks):
    """Seconds to the next look after `looks` looks in a row that found every rank read importing."""
    return min(IMPORT_PAUSE_S * 2 ** max(0, looks - 1), IMPORT_PAUSE_MAX_S)


def frames_wait(frames, state=""):
    """Waiting for the others, from a main thread's frames [(function, where)], innermost first, and its
    kernel state (a letter of /proc's `State:`, "" unknown): in torch.distributed, in a CUDA sync, or
    asleep (S) inside a library; never when stopped (STOPPED)."""
    if state in STOPPED:
        return False
    if any(in_collective(where) for _f, where in frames) or bool(frames) and is_cuda_wait(*frames[0]):
        return True
    return state == ASLEEP and bool(frames) and in_library(frames[0][1])


def wait_share(t):
    return t.waiting / t.read if t.read else 0.0


def tally(samples):
    """Each rank's Tally over the samples (a sample: the Readings of every rank read at about one moment)."""
    counts = {}
    for sample in samples:
        waiting = {(r.host, r.rank) for r in sample if r.waiting}
        others = len(sample) - 1
        for r in sample:
            key = (r.host, r.rank)
            row = counts.setdefault(key, [0, 0, 0])
            row[0] += 1
            row[1] += key in waiting
            row[2] += key not in waiting and others > 0 and len(waiting) == others
    return {key: Tally(key[0], key[1], *row) for key, row in counts.items()}


def chance(top, total, ranks):
    """How likely ranks alike give some one of `ranks` ranks at least `top` of `total` singled-out samples:
    k x P(Binomial(total, 1/k) >= top), at most 1."""
    if ranks < 2 or total <= 0:
        return 1.0
    p = 1.0 / ranks
    tail = sum(math.comb(total, i) * p ** i * (1.0 - p) ** (total - i) for i in range(max(0, top), total + 1))
    return min(1.0, ranks * tail)


def judge(samples):
    """The Verdict over the latest WINDOW samples, or None when every rank keeps pace."""
    window = list(samples)[-WINDOW:]
    ranked = sorted(tally(window).values(), key=lambda t: (-t.singled_out, t.rank))
    if len(ranked) < 2:
        return None
    top, runner_up = ranked[0], ranked[1]
    if top.singled_out < max(MIN_SAMPLES, MIN_SHARE * len(window)) or top.singled_out < DOMINANCE * runner_up.singled_out:
        return None
    if chance(top.singled_out, sum(t.singled_out for t in ranked), len(ranked)) > ALPHA:
        return None  # a lead that ranks alike give by chance (two ranks: one is always last)
    others = [wait_share(t) for t in ranked[1:] if t.read]
    lag_share = statistics.median(others) if others else 0.0
    if lag_share >= STALLED_SHARE:
        return None  # the others never get past the collective: a hang, the stall watch's to judge
    ratio = (1.0 - wait_share(top)) / max(1.0 - lag_share, 0.05)
    return Verdict(top.host, top.rank, lag_share, ratio, top.singled_out, len(window), len(ranked) - 1)


def recovered(samples, host, rank):
    """The named rank is singled out in under RECOVERED_SHARE of the latest RECENT samples."""
    recent = list(samples)[-RECENT:]
    if len(recent) < RECENT // 2:
        return False
    row = tally(recent).get((host, rank))
    return row is None or row.singled_out < RECOVERED_SHARE * len(recent)


def evidence(singled_out, samples, others):
    return (f"{singled_out} of the last {samples} samples working while the other "
            f"{others} rank{'s' if others != 1 else ''} waited in a collective")


def document(verdict, since, lag_s=None, gpu=None):
    """A straggler as run.json has it (docs/schemas: Straggler), rounded; `until` null while it is late."""
    said = waits_evidence(verdict) if isinstance(verdict, WaitsVerdict) else \
        evidence(verdict.singled_out, verdict.samples, verdict.others_waiting)
    return {"host": verdict.host, "rank": verdict.rank, "gpu": gpu,
            "lag_s": round(lag_s, 3) if lag_s is not None else None, "ratio": round(verdict.ratio, 2),
            "since": round(since, 3), "evidence": said,
            "lag_share": round(verdict.lag_share, 3), "until": None}


class Watch:
    """The supervisor's straggler watch of a detached run: each keeper's samples ([tick, [[rank, waits],
    ...]], tick the whole INTERVAL_S of the keepers' clocks), the nodes' samples of one tick side by side,
    judged once SETTLE_TICKS old (every keeper has sent it); `found` as the attached watch's."""

    SETTLE_TICKS = 3  # x INTERVAL_S (1 s): beats come every second, each with the keeper's latest samples
    KEPT_TICKS = WINDOW * 2

    def __init__(self):
        self.ticks = {}  # tick -> {host: [Reading]}
        self.window, self.judged = [], -1
        self.named, self.history, self.problems = None, [], {}
        self.waits, self.waits_rounds, self.waits_judged = {}, WaitsRounds(), 0.0  # the keepers' rounds (NCCL)

    def heard(self, host, summary):
        """A keeper's summary (node_stragglers.Sampler.summary): its samples, or why it has none."""
        if not isinstance(summary, dict):
            return
        if isinstance(summary.get("problem"), str) and summary["problem"]:
            self.problems[host] = summary["problem"][:300]
        samples = summary.get("samples")
        for item in (samples if isinstance(samples, list) else [])[-WINDOW:]:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int) and isinstance(item[1], list)):
                continue
            if item[0] <= self.judged:
                continue
            self.ticks.setdefault(item[0], {})[host] = [
                Reading(host, r[0], bool(r[1])) for r in item[1][:256]
                if isinstance(r, list) and len(r) == 2 and isinstance(r[0], int)]
        for old in sorted(self.ticks)[:-self.KEPT_TICKS]:
            del self.ticks[old]
        waits = summary.get("waits")
        if isinstance(waits, dict) and seconds_value(waits.get("at")) and isinstance(waits.get("ranks"), list):
            self.waits[host] = (float(waits["at"]), {
                r[0]: tuple(float(v) for v in r[1:upto]) for r in waits["ranks"][:256]
                if isinstance(r, list) for upto in [read_upto(r)] if upto})

    def judge(self, now):
        """Judge the ticks settled by `now` (unix time, seconds), and the latest flight-recorder round: True when
        `found` changed."""
        return self._judge_waits(now) | self._judge_samples(now)

    def _judge_waits(self, now):
        """Every WAITS_ROUND_S, the keepers' latest rounds (at most two rounds old) side by side: a rank named by
        WAITS_ROUNDS judgements in a row, let go after as many without it."""
        if now - self.waits_judged < WAITS_ROUND_S:
            return False
        self.waits_judged = now
        fresh = {(host, rank): m for host, (at, ranks) in self.waits.items() if now - at <= 2 * WAITS_ROUND_S
                 for rank, m in ranks.items()}
        if not fresh:
            return False
        self.waits_rounds.add(fresh)
        if isinstance(self.named, WaitsVerdict):
            if not self.waits_rounds.let_go(self.named.host, self.named.rank):
                return False
            self.history[-1] = {**self.history[-1], "until": round(now, 3)}
            self.named = None
            return True
        found = self.waits_rounds.named() if self.named is None else None
        if found is None:
            return False
        self.named = found
        self.history.append(document(found, now))
        return True

    def _judge_samples(self, now):
        settled = [t for t in sorted(self.ticks) if t <= now - self.SETTLE_TICKS]
        for tick in settled:
            self.window.append([r for readings in self.ticks.pop(tick).values() for r in readings])
            self.judged = tick
        del self.window[:-WINDOW]
        if not settled or isinstance(self.named, WaitsVerdict):  # the flight recorder's rounds say when it keeps pace
            return False
        if self.named is not None:
            if not recovered(self.window, self.named.host, self.named.rank):
                fresh = judge(self.window)
                if fresh is None or (fresh.host, fresh.rank) != (self.named.host, self.named.rank):
                    return False
                self.named, self.history[-1] = fresh, document(fresh, self.history[-1]["since"])
                return True
            self.history[-1] = {**self.history[-1], "until": round(now, 3)}
            self.named, self.window = None, []  # judge the ranks afresh
            return True
        found = judge(self.window)
        if found is None:
            return False
        self.named = found
        self.history.append(document(found, now))
        return True

    def found(self):
        return [dict(item) for item in self.history]
