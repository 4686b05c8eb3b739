"""`HealthRecord`: the health record of one cluster, the API the commands use.

    record = HealthRecord.open(app.state.health_db, inventory.name, inventory.health)
    record.record(Event(host, "node_lost", "run", evidence=..., run_id=...))
    record.quarantined()          -> {host: reason}   (up/run leave these out)
    record.states()               -> [NodeHealth]     (check shows them beside its verdicts)
    record.release(host, force)   -> NodeHealth       (refused without a passing check after it)

A node's state is the worst of its own events and those of the GPUs it still reports (a GPU the
node stopped reporting, a swapped board, no longer counts); each GPU also has its own state.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

from clusterctl.documents import parts
from clusterctl.documents.convert import as_document, plain
from clusterctl.errors import StateError, UsageError
from clusterctl.health.events import SOURCES, Event, GpuId, GpuRow, StoredEvent
from clusterctl.health.rules import (CHECK_PASSED, INFO_KINDS, QUARANTINED, RELEASED, Rule, Verdict, judge, rules_for,
                                     severity_of)
from clusterctl.health.store import HealthStore
from clusterctl.models import HealthSettings

LAST_EVENTS = 3


@dataclass(frozen=True)
class GpuHealth:
    key: str
    index: Optional[int]
    verdict: Verdict
    keyed_by_index: bool

    @property
    def state(self) -> str:
        return self.verdict.state

    @property
    def since(self) -> Optional[float]:
        return self.verdict.since

    @property
    def reason(self) -> Optional[str]:
        return self.verdict.reason

    def to_json(self) -> dict:
        return as_document(parts.GpuHealth, self)


@dataclass(frozen=True)
class NodeHealth:
    host: str
    verdict: Verdict
    gpus: tuple[GpuHealth, ...]
    events: tuple[StoredEvent, ...]  # every event of the host, oldest first

    @property
    def state(self) -> str:
        return self.verdict.state

    def to_json(self, last: Optional[int] = LAST_EVENTS) -> dict:
        """Its document with the last `last` events (None: all of them)."""
        shown = self.events if last is None else self.events[-last:]
        return plain(parts.NodeHealth(host=self.host, state=self.state, since=self.verdict.since,
                                      reason=self.verdict.reason, gpus=[gpu.to_json() for gpu in self.gpus],
                                      events=[e.to_json() for e in shown]))


class HealthRecord:
    def __init__(self, store: HealthStore, cluster: str, rules: Mapping[str, Rule]):
        self.store, self.cluster, self.rules = store, cluster, dict(rules)

    @classmethod
    def open(cls, db_path: Path, cluster: str, settings: Optional[HealthSettings] = None) -> "HealthRecord":
        """`db_path`: State.health_db; `settings`: the inventory's `health:` (its rules' overrides)."""
        return cls(HealthStore(Path(db_path)), cluster, rules_for(settings))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "HealthRecord":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- writing
    def record(self, *events: Event, once: bool = False) -> list[int]:
        """Keep events (one transaction); their seqs. Unknown sources or kinds are a bug of the caller.
        `once`: those the record already has for their run are not kept again (HealthStore.add)."""
        for event in events:
            if event.source not in SOURCES:
                raise ValueError(f"unknown health event source {event.source!r}")
            if event.kind not in self.rules and event.kind not in INFO_KINDS:
                raise ValueError(f"unknown health event kind {event.kind!r}")
        return self.store.add(self.cluster, [(e, severity_of(e.kind, self.rules)) for e in events], once=once)

    def observe_gpus(self, host: str, gpus: Sequence[GpuId], complete: bool = True) -> list[str]:
        """The GPUs `host` reports now (the watch, up's facts); returns the keys no longer there
        (none where not `complete`: HealthStore.observe_gpus)."""
        return self.store.observe_gpus(self.cluster, host, gpus, complete=complete)

    def release(self, host: str, force: bool = False, by: str = "") -> NodeHealth:
        """Back to healthy: with a passing check recorded after the quarantine, or --force."""
        node = self.state(host)
        if node.state == "healthy" and not node.events:
            raise UsageError(f"the health record has nothing about {host}", where=host,
                             fix="see the recorded hosts with `clusterctl health`")
        if not force and node.state == QUARANTINED and node.verdict.last_check_seq <= node.verdict.since_seq:
            raise StateError(f"{host} is quarantined ({node.verdict.reason}) and no check has passed since",
                             where=host, fix=f"repair it, then `clusterctl health check {host}`; or "
                                             f"`clusterctl health release {host} --force` if you know it is fine")
        evidence = ("forced" if force else "after a passing check") + (f" by {by}" if by else "")
        self.record(Event(host, RELEASED, "operator", evidence=evidence))
        return self.state(host)

    # ---- reading
    def states(self, hosts: Iterable[str] = ()) -> list[NodeHealth]:
        """Every host the record knows, plus `hosts` (the inventory's: healthy when never seen)."""
        names = sorted(set(self.store.hosts(self.cluster)) | set(hosts))
        events = self.store.events(self.cluster)
        gpus = self.store.gpus(self.cluster)
        return [self._node(name, [e for e in events if e.host == name], [g for g in gpus if g.host == name])
                for name in names]

    def state(self, host: str) -> NodeHealth:
        return self._node(host, self.store.events(self.cluster, host), self.store.gpus(self.cluster, host))

    def quarantined(self, hosts: Iterable[str] = ()) -> dict[str, str]:
        return {node.host: node.verdict.reason for node in self.states(hosts) if node.state == QUARANTINED}

    def history(self, host: str) -> list[StoredEvent]:
        return self.store.events(self.cluster, host)

    def _node(self, host: str, events: list[StoredEvent], gpus: list[GpuRow]) -> NodeHealth:
        now = time.time()
        present = [g for g in gpus if g.gone_at is None]
        gone = {g.key for g in gpus} - {g.key for g in present}
        node_verdict = judge([e for e in events if e.gpu is None or e.gpu not in gone], self.rules, now)
        gpu_states = tuple(GpuHealth(g.key, g.index, judge(_of_gpu(events, g.key), self.rules, now), g.keyed_by_index)
                           for g in present)
        return NodeHealth(host, node_verdict, gpu_states, tuple(events))


def _of_gpu(events: list[StoredEvent], key: str) -> list[StoredEvent]:
    """A GPU's own events, and its host's releases and passing checks (which apply to every GPU)."""
    return [e for e in events if e.gpu == key or (e.gpu is None and e.kind in (RELEASED, CHECK_PASSED))]
