"""The straggler watch of `run`: every rank sampled all along, the rank the others wait for named live.

Rounds of SAMPLES py-spy samples, INTERVAL_S apart, of every rank on every node (watch/sampler.py: one
round trip per node per round, `dump --nonblocking`, so no rank is paused; a rank not run since its last
dump is not dumped again), run in the background while the controller polls; once the window is full
and a round singled nobody out, rounds of STEADY_SAMPLES samples STEADY_INTERVAL_S apart (issue 52: the
node's CPU). Before any of that, looks: one sample, until a look reads a rank past its imports (ranks
importing torch are no stragglers, and nobody waits for them yet); after each look that read every rank
importing (or none at all) the next comes later (straggler_verdict.import_pause_s: 5 s, doubled, up to
20 s), and IMPORTING_PAUSE_S after the last once a rank printed a line since (likely past its imports).
A look's samples are not judged. Each finished round is added to the window that watch/stragglers.py judges, and the next
round starts at the next poll. The step time comes from the ranks' progress
lines in the live log (the lowest rank that prints one). One `[straggler]` line when a rank is
named, one when it keeps pace again; `found()` is every rank named during the run, for the record.
While the stall watch takes its own stacks (it pauses the ranks), no round starts.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable, Optional

from clusterctl.executor import Background, Connections, Event, OnEvent
from clusterctl.node import straggler_verdict as verdict
from clusterctl.node.straggler_verdict import FIRST_AFTER_S, IMPORT_PAUSE_S, INTERVAL_S
from clusterctl.watch import stragglers
from clusterctl.watch.collective_watch import CollectiveWatch
from clusterctl.watch.pyspy_kept import ROUND_SETTLE_S, KeptPySpy
from clusterctl.watch.sampler import merged_samples, node_stacks, sample_action
from clusterctl.watch.stragglers import Progress, Straggler
from clusterctl.models import Host, Inventory

# Per round, a round trip per node (py-spy, ~3 MB, shipped in a node's first round only): short rounds until the window
# holds enough samples to name a rank soon after the start, then longer ones.
FIRST_SAMPLES, SAMPLES = 5, 15
# Once the window is full and the latest round singled nobody out (and nobody is named), the run is steady: rounds
# of STEADY_SAMPLES, STEADY_INTERVAL_S apart (as long as a round at 1 s), a fifth of the dumps (issue 52: a busy
# rank's dump is ~15 ms of its node's CPU). The first round that singles a rank out brings back 1 s.
STEADY_SAMPLES, STEADY_INTERVAL_S = 4, 5.0
INTERVAL_S, FIRST_ROUND_AFTER_S = INTERVAL_S, FIRST_AFTER_S  # the pace the detached keepers sample at too
PROGRESS_KEPT = 30  # progress lines kept for the step time (the latest)
# A look: a round of one sample, while no rank was read past its imports (a `_find_and_load` frame). After one
# that read every rank importing, the next waits verdict.import_pause_s; IMPORTING_PAUSE_S once a rank printed since.
LOOK_SAMPLES, IMPORTING_PAUSE_S = 1, IMPORT_PAUSE_S


class StragglerWatch:
    def __init__(self, inventory: Inventory, run_id: str, connections: Connections, on_event: OnEvent,
                 gpu_of: Optional[dict] = None, samples: tuple[int, int] = (FIRST_SAMPLES, SAMPLES),
                 interval_s: float = INTERVAL_S, enabled: bool = True, kept: Optional[KeptPySpy] = None):
        self.kept = kept or KeptPySpy(inventory.name, run_id)  # py-spy shipped once per node (watch/pyspy_kept.py)
        self.inventory, self.run_id, self.connections, self.on_event = inventory, run_id, connections, on_event
        self.samples, self.interval_s, self.enabled = samples, interval_s, enabled
        self.gpu_of = dict(gpu_of or {})
        self.window: deque = deque(maxlen=stragglers.WINDOW)
        self.named: Optional[Straggler] = None
        self.history: list[dict] = []  # every rank named during the run (to_json, and `until` once it kept pace)
        self.on_change: Callable[[list[dict]], None] = lambda found: None  # the run record, kept up to date
        self._round: Optional[Background] = None
        self._next_at = time.monotonic() + FIRST_ROUND_AFTER_S
        self._progress: deque = deque(maxlen=PROGRESS_KEPT)
        self._progress_rank: Optional[int] = None
        self._rates: deque = deque(maxlen=PROGRESS_KEPT)
        self._lock = threading.Lock()  # heard() runs in the log streams' threads
        self._quiet = False  # the latest round singled nobody out
        self._looking = True  # no rank read past its imports yet: the next round is a look
        self._looks = 0  # looks in a row that read every rank importing, or none
        self._looked_at = 0.0
        self._heard = False  # a rank's line since the latest look
        self.collective = CollectiveWatch(inventory, run_id, connections)  # the flight recorder's evidence (NCCL)
        self._unread_said = False

    @classmethod
    def of_topology(cls, inventory: Inventory, topology, run_id: str, connections: Connections,
                    on_event: OnEvent) -> "StragglerWatch":
        gpus = {(plan.host.name, rank): plan.gpu_ids[i] for plan in topology.nodes if plan.gpu_ids
                for i, rank in enumerate(plan.ranks) if i < len(plan.gpu_ids)}
        return cls(inventory, run_id, connections, on_event, gpus, enabled=topology.world_size > 1)

    def heard(self, rank: Optional[int], text: str, complete: bool = True) -> None:
        """A line of a rank (from the log stream threads): its progress, if it says any. Of a line still
        being written (a tqdm bar), only a whole `[..., 4.01it/s]` counts: `step 12` may yet be `step 123`."""
        if rank is not None and self._looking:
            self._heard = True
        if rank is None or (self._progress_rank is not None and rank > self._progress_rank):
            return
        step, seconds = stragglers.progress_of(text)
        step = step if complete or seconds is not None else None
        if step is None and seconds is None:
            return
        with self._lock:
            self._keep_progress(rank, step, seconds)

    def _keep_progress(self, rank: int, step: Optional[int], seconds: Optional[float]) -> None:
        if self._progress_rank is None or rank < self._progress_rank:
            self._progress_rank = rank
            self._progress.clear()
            self._rates.clear()
        if step is not None:
            self._progress.append(Progress(time.monotonic(), step))
        if seconds is not None:
            self._rates.append(seconds)

    def step_s(self) -> Optional[float]:
        with self._lock:
            return stragglers.step_time(list(self._progress), list(self._rates))

    def check(self, hosts: list[Host], paused: bool = False) -> None:
        """Called on every poll with the hosts whose ranks still run: a round started or judged."""
        if not self.enabled:
            return
        if self.collective.check(hosts):
            self._judge_collective()
        if self._round is None:
            if hosts and not paused and time.monotonic() >= self._due():
                count, interval = self._pace()
                self._round = Background(hosts, sample_action(self.inventory, self.run_id, count, interval,
                                                              nonblocking=True, kept=self.kept), self.connections)
            return
        if not self._round.wait(0):
            return
        nodes = node_stacks(self._round.results)
        self._round = None
        samples = merged_samples(nodes)
        self._give_up_without_pyspy([n.problem for n in nodes.values() if not n.asks])
        now = time.monotonic()
        if not past_imports(samples):
            self._looking, self._looks, self._heard, self._looked_at = True, self._looks + 1, False, now
            self._next_at = now + verdict.import_pause_s(self._looks)
            return
        self._looking, self._looks, self._next_at = False, 0, now
        self._quiet = quiet(samples)
        self.window.extend(samples)
        self._judge()

    def settle(self, timeout_s: float = ROUND_SETTLE_S) -> None:
        """Wait up to `timeout_s` for a round still under way (the run's end): what it kept on its nodes is then
        known to the KeptPySpy that removes it (pyspy_kept.ROUND_SETTLE_S)."""
        if self._round is not None:
            self._round.wait(timeout_s)

    def _due(self) -> float:
        """When the next round may start: a look waits its pause, shortened to IMPORTING_PAUSE_S after the last
        look once a rank printed a line since."""
        if self._looking and self._looks and self._heard:
            return min(self._next_at, self._looked_at + IMPORTING_PAUSE_S)
        return self._next_at

    def _pace(self) -> tuple[int, float]:
        """(samples, seconds apart) of the next round: a look until a rank is read past its imports, short
        rounds while the window fills, steady ones once it is full and quiet."""
        if self._looking:
            return LOOK_SAMPLES, self.interval_s
        if len(self.window) < stragglers.WINDOW // 2:
            return self.samples[0], self.interval_s
        if self._quiet and self.named is None and len(self.window) >= stragglers.WINDOW:
            return STEADY_SAMPLES, max(self.interval_s, STEADY_INTERVAL_S)
        return self.samples[1], self.interval_s

    def _judge(self) -> None:
        samples = list(self.window)
        if self.named is not None:
            if self.named.by_flight_recorder:
                return  # its rounds say when it keeps pace: these samples never saw it (its wait is on the GPU)
            if not stragglers.recovered(samples, self.named):
                self._refresh(samples)
                return
            self._let_go()
            return
        found = stragglers.find(samples, self.step_s(), time.time(), self.gpu_of)
        if found is not None:
            self._name(found)

    def _judge_collective(self) -> None:
        """After a flight-recorder round: a rank named by WAITS_ROUNDS rounds in a row (where the samples named
        nobody), or the one it named let go. A rank whose dumps say nothing is said once, with why."""
        unread = self.collective.unread()
        if unread and not self._unread_said:
            self._unread_said = True
            self.on_event(Event("note", text=f"[straggler] the flight recorder's dumps say nothing of {unread}"))
        if self.named is not None:
            if self.named.by_flight_recorder and self.collective.recovered(self.named.host, self.named.rank):
                self._let_go()
            return
        found = self.collective.found()
        if found is not None:
            self._name(stragglers.of_waits(found, self.step_s(), time.time(), self.gpu_of))

    def _name(self, found: Straggler) -> None:
        self.named = found
        self.history.append({**found.to_json(), "until": None})
        self.on_event(Event("note", text=f"[straggler] {found.line()}"))
        self.on_change(self.found())

    def _let_go(self) -> None:
        self.on_event(Event("note", text=f"[straggler] {self.named.host} r{self.named.rank} keeps pace again "
                                         f"(named {time.time() - self.named.since:.0f}s ago)"))
        self.history[-1] = {**self.history[-1], "until": round(time.time(), 3)}
        self.named = None
        self.window.clear()  # judge the ranks afresh
        self.on_change(self.found())

    def _refresh(self, samples: list) -> None:
        """The named rank's lag and ratio from the latest window (the first estimate may hold the
        start, when no rank waited yet): the record has the newest, its `since` stays."""
        fresh = stragglers.find(samples, self.step_s(), self.named.since, self.gpu_of)
        if fresh is not None and (fresh.host, fresh.rank) == (self.named.host, self.named.rank) and fresh != self.named:
            self.named = fresh
            self.history[-1] = {**fresh.to_json(), "until": None}
            self.on_change(self.found())

    def _give_up_without_pyspy(self, problems: list[str]) -> None:
        if problems and all("py-spy" in p for p in problems):
            self.enabled = False
            self.on_event(Event("note", text=f"no straggler watch: {problems[0]}"))

    def found(self) -> list[dict]:
        """Every rank named during the run, the one still late last (for run.json and `run --json`)."""
        return [dict(item) for item in self.history]


def quiet(samples) -> bool:
    """A round read and no rank in it singled out (working while every other rank waited)."""
    return bool(samples) and not any(t.singled_out for t in stragglers.tally(samples).values())


def all_importing(samples) -> bool:
    """Every rank read in a round was importing (its main thread inside importlib's `_find_and_load`)."""
    ranks = [rank for sample in samples for rank in sample if rank.frames]
    return bool(ranks) and all(verdict.importing(f.function for f in rank.frames) for rank in ranks)


def past_imports(samples) -> bool:
    """A round read some rank, and not every rank it read was importing: the ranks may wait for each other."""
    return any(rank.frames for sample in samples for rank in sample) and not all_importing(samples)
