"""What the health record keeps: events about a host or one of its GPUs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from clusterctl.documents import parts
from clusterctl.documents.convert import as_document

# Where an event came from: the command or watcher that saw it. JOB: the job's side of a detached run
# (its keepers' samples and the supervisor's document, which a job can forge on its nodes): evidence
# for that run's own hosts only, which alone never quarantines (rules.py).
JOB = "job"
SOURCES = ("up", "check", "run", "heal", "nccl-test", "straggler", "watch", "operator", JOB)


@dataclass(frozen=True)
class GpuId:
    """A GPU as the node reports it. Keyed by UUID, else serial, else index: a swapped board has a
    new UUID and starts clean; a node that reports neither falls back to the index (said so)."""

    index: Optional[int] = None
    uuid: Optional[str] = None
    serial: Optional[str] = None

    @property
    def key(self) -> str:
        if self.uuid:
            return f"uuid:{self.uuid}"
        if self.serial:
            return f"serial:{self.serial}"
        return f"index:{self.index if self.index is not None else '?'}"

    @property
    def keyed_by_index(self) -> bool:
        return not self.uuid and not self.serial

    def describe(self) -> str:
        where = f"GPU {self.index}" if self.index is not None else "a GPU"
        if self.keyed_by_index:
            return f"{where} (no UUID or serial reported: keyed by index, so a swapped board keeps its history)"
        return f"{where} ({self.uuid or self.serial})"


@dataclass(frozen=True)
class Event:
    """One thing seen about a host (gpu None) or one of its GPUs. `kind` is a row of rules.RULES
    (or `check_passed` / `released`); `at` defaults to now when recorded."""

    host: str
    kind: str
    source: str
    evidence: str = ""
    cause: str = ""
    gpu: Optional[GpuId] = None
    at: Optional[float] = None
    run_id: Optional[str] = None


@dataclass(frozen=True)
class StoredEvent:
    """An event as read back: `seq` orders events (it only grows, whatever the clock does)."""

    seq: int
    cluster: str
    host: str
    gpu: Optional[str]  # GpuId.key, or None for the host itself
    at: float
    source: str
    kind: str
    severity: str
    cause: str
    evidence: str
    run_id: Optional[str]

    def to_json(self) -> dict:
        return as_document(parts.HealthEvent, self)


@dataclass(frozen=True)
class GpuRow:
    """A GPU the record has seen on a host; `gone_at` set once the node stopped reporting it."""

    host: str
    key: str
    index: Optional[int]
    uuid: Optional[str]
    serial: Optional[str]
    first_seen: float
    last_seen: float
    gone_at: Optional[float]

    @property
    def keyed_by_index(self) -> bool:
        return self.key.startswith("index:")
