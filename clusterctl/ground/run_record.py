"""A run's record as a value: `RunRecord` (what .clusterctl/runs/<run id>/run.json holds) and `RunState`,
the one vocabulary of a run's state. Pure: ground/records.py's RunStore reads and writes it.

The published shape of run.json is documents/commands.py's RunRecord (docs/schemas/run-record.json);
this is the value the code builds and merges, and it writes exactly the keys it was given: a key never
set is absent from the JSON (ABSENT), not null, as the records of every earlier clusterctl were.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Optional


class RunState(str, Enum):
    """A run's state, one vocabulary for its three speakers:
    - the record (run.json's "state"): RUNNING, ENDED (its exit code says how) or STOPPED (RECORDED);
    - the node's supervisor (its state file): RUNNING, SUCCEEDED, FAILED or STOPPED (SUPERVISED;
      recorded_end maps its final one onto the record's);
    - what became of the run (`status`, `describe`, `attach`, `stop`): RUNNING, UNKNOWN (no controller
      and no supervisor watches it any more), STOPPED, SUCCEEDED, FAILED or INTERRUPTED (REPORTED)."""

    RUNNING = "running"
    ENDED = "ended"
    STOPPED = "stopped"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    UNKNOWN = "unknown"

    def __str__(self) -> str:  # a str mixin would print "RunState.RUNNING" in f-strings
        return self.value

    __format__ = str.__format__

    @classmethod
    def of(cls, value) -> Optional["RunState"]:
        """`value` as a state, or None when it is none of them (a record from elsewhere)."""
        try:
            return cls(value)
        except ValueError:
            return None


RECORDED = (RunState.RUNNING, RunState.ENDED, RunState.STOPPED)
SUPERVISED = (RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED, RunState.STOPPED)
REPORTED = (RunState.RUNNING, RunState.UNKNOWN, RunState.STOPPED, RunState.SUCCEEDED, RunState.FAILED,
            RunState.INTERRUPTED)


def recorded_end(supervisor_state) -> RunState:
    """The record's state of a run whose supervisor's state is final (SUPERVISED -> RECORDED)."""
    return RunState.STOPPED if RunState.of(supervisor_state) is RunState.STOPPED else RunState.ENDED


class _Absent:
    """A key the record does not have (different from one holding null)."""

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class RunRecord:
    """One run's record. The fields are the keys the code decides on; every other key the record holds
    (the run's summary, its place, a healing run's spares, collect-logs' metrics...) rides in `more`,
    so that a record read and written again keeps all it had."""

    run_id: str
    state: Optional[RunState] = ABSENT  # RECORDED; None for an nccl-test's record
    kind: Optional[str] = ABSENT  # "nccl-test" for an nccl-test's record
    cluster: Optional[str] = ABSENT
    backend: Optional[str] = ABSENT
    started: Optional[float] = ABSENT
    ended: Optional[float] = ABSENT
    exit_code: Optional[int] = ABSENT
    detached: bool = ABSENT
    stopped: bool = ABSENT
    interrupted: bool = ABSENT
    supervisor_gone: bool = ABSENT
    stalled_s: Optional[float] = ABSENT
    world_size: Optional[int] = ABSENT
    nproc_per_node: Optional[int] = ABSENT
    master: Optional[dict] = ABSENT
    topology: list = ABSENT
    commands: dict = ABSENT
    nodes: dict = ABSENT
    first_failure: Optional[dict] = ABSENT
    stragglers: list = ABSENT
    attempts: list = ABSENT
    phases: dict = ABSENT
    phases_cpu: dict = ABSENT
    supervisor: Optional[dict] = ABSENT
    more: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, document: Mapping[str, Any], run_id: Optional[str] = None) -> "RunRecord":
        """A record as read from run.json (`run_id`: where it was found, when the record names none)."""
        return cls(run_id=document.get("run_id", run_id) or "").with_(**{k: v for k, v in document.items()
                                                                         if k != "run_id"})

    def with_(self, **changes) -> "RunRecord":
        """This record with `changes` (ABSENT removes a key): what replaces every `{**record, ...}`."""
        declared = {k: v for k, v in changes.items() if k in _FIELDS or k == "run_id"}
        more = {k: v for k, v in changes.items() if k not in declared}
        if "state" in declared:
            state = declared["state"]
            if state is None or state is ABSENT or RunState.of(state) is not None:
                declared["state"] = state if state is None or state is ABSENT else RunState(state)
                more["state"] = ABSENT
            else:  # a state no clusterctl writes (a record from elsewhere): kept as it was read
                more["state"] = declared.pop("state")
        merged = {k: v for k, v in {**self.more, **more}.items() if v is not ABSENT}
        return dataclasses.replace(self, **declared, more=merged)

    def get(self, key: str, default=None):
        """The value of `key` as run.json has it (a field or one of `more`), `default` when absent."""
        value = getattr(self, key, ABSENT) if key in _FIELDS else self.more.get(key, ABSENT)
        return default if value is ABSENT else value

    def to_json(self) -> dict:
        """run.json's document: exactly the keys this record has."""
        out = dict(self.more)
        for name in _FIELDS:
            value = getattr(self, name)
            if value is not ABSENT:
                out[name] = value.value if isinstance(value, RunState) else value
        return out


_FIELDS = tuple(f.name for f in dataclasses.fields(RunRecord) if f.name != "more")



@dataclass(frozen=True)
class RunHandle:
    """Which run, where: what a launch returns (`Run.handle`) and what a follow-up command (status,
    logs, stop, attach, collect-logs) parses once from its RUN argument: `<backend>://<cluster>/<run id>`,
    or the bare run id (backend and cluster then come from the run's record)."""

    run_id: str
    backend: Optional[str] = None
    cluster: Optional[str] = None

    def __str__(self) -> str:
        return f"{self.backend or 'nodes'}://{self.cluster or ''}/{self.run_id}" if self.backend or self.cluster \
            else self.run_id

    @classmethod
    def parse(cls, text: str) -> "RunHandle":
        """A handle or a bare run id (ValueError when it is neither; the run id is checked by its user)."""
        scheme, sep, rest = text.partition("://")
        if not sep:
            return cls(text)
        cluster, slash, run_id = rest.rpartition("/")
        if not slash or not scheme or not run_id:
            raise ValueError(f"not a run handle: {text!r} (backend://cluster/run-id)")
        return cls(run_id, scheme, cluster or None)
