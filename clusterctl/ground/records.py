"""The local run records (`.clusterctl/runs/<run id>/run.json`, written by `clusterctl run`): find
one by id, and list them for `clusterctl status`.

A record says "running" from the launch until its controller (the attached `clusterctl run`)
writes the end; a detached run's record ("detached", "supervisor") gets its end from the run's
supervisor on the cluster when a command next asks (run/supervision.py: refresh_record). A controller killed outright never does: whether one still watches the run is
told by the cluster's run lock (held by the controller for the whole run, naming its run id), not
guessed from the record. Without it the record's run is "unknown": the nodes stop its ranks by
themselves once their lease runs out (15 s), and `clusterctl stop RUN` makes sure.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

from clusterctl.documents import parts
from clusterctl.documents.convert import as_document
from clusterctl.errors import StateError, UsageError
from clusterctl.ground.run_record import ABSENT, RunHandle, RunRecord, RunState

RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
LISTED = 20
RECORD_NAME = "run.json"


class NotARecord(ValueError):
    """A run.json whose JSON is no record (not an object)."""


class RunStore:
    """The one reader and writer of the run records under `state`'s root (runs/<run id>/run.json).
    Every write is atomic (State.write_json: a temporary file renamed over the record)."""

    def __init__(self, state):
        self.state = state

    @property
    def runs(self) -> Path:
        return self.state.root / "runs"

    def dir(self, run_id: str) -> Path:
        """The run's local directory (created 0700): its record, its stacks, its controller's log."""
        return self.state.run_dir(run_id)

    def stacks_dir(self, run_id: str) -> Path:
        """Where the stacks of the run's hangs are kept (`clusterctl stacks`, the run's stall watch)."""
        return self.runs / run_id / "stacks"

    def path(self, run_id: str) -> Path:
        return self.runs / run_id / RECORD_NAME

    def write(self, record: RunRecord) -> RunRecord:
        """Create the record, or replace it whole."""
        self.state.write_json(self.dir(record.run_id) / RECORD_NAME, record.to_json())
        return record

    def update(self, run_id: str, **changes) -> RunRecord:
        """The record with `changes` merged in (ABSENT removes a key); a record that cannot be read is
        started from the run id."""
        return self.write(self.read_or_new(run_id).with_(**changes))

    def read(self, run_id: str) -> RunRecord:
        """The record; OSError or ValueError when there is none to read."""
        document = self.state.read_json(self.path(run_id))
        if not isinstance(document, dict):
            raise NotARecord(f"{self.path(run_id)} is not a run record")
        return RunRecord.from_json(document, run_id)

    def read_or_new(self, run_id: str) -> RunRecord:
        try:
            return self.read(run_id)
        except (OSError, ValueError):
            return RunRecord(run_id)

    def ids(self) -> list[str]:
        """The recorded run ids, newest first (a run id starts with its start time)."""
        if not self.runs.is_dir():
            return []
        return sorted((p.name for p in self.runs.iterdir() if (p / RECORD_NAME).is_file()), reverse=True)

    def list(self, limit: int = LISTED) -> list[RunRecord]:
        """The latest `limit` records that can be read, newest first."""
        out = []
        for run_id in self.ids()[:limit]:
            try:
                out.append(self.read(run_id))
            except (OSError, ValueError):
                continue
        return out

    def last_id(self) -> str:
        ids = self.ids()
        if not ids:
            raise StateError("no run recorded yet", where=str(self.runs),
                             fix="start one with `clusterctl run PROMPT_FILE`")
        return ids[0]


def run_lock(cluster: str) -> str:
    """The name of the lock a `clusterctl run` of this cluster holds (state.lock)."""
    return f"run-{cluster}"


def resolve(state, given: Optional[str], where: str = "RUN") -> tuple[str, dict]:
    """(run id, record as run.json has it) of the run named (default: the last one); exit 2 when there is none."""
    run_id = parse_run_id(state, given, where)
    store = RunStore(state)
    try:
        return run_id, store.read(run_id).to_json()
    except NotARecord:
        raise StateError(f"the record of run {run_id} is not a run record", where=str(store.path(run_id)),
                         fix="give another run id (`clusterctl status` lists them)") from None
    except (OSError, ValueError):
        raise StateError(f"no record of run {run_id}", where=str(store.path(run_id)),
                         fix="`clusterctl status` lists the runs of this directory; give one of their ids, "
                             "or none for the last run") from None


def parse_run_id(state, given: Optional[str], where: str = "RUN") -> str:
    """The run a follow-up command names, a run id or a handle (ground/run_record.py RunHandle; default:
    the last run recorded): the one parser of a run reference."""
    fix = "`clusterctl status` lists the runs (ids like 20250101-120000-a1b2c3)"
    try:
        run_id = RunHandle.parse(given).run_id if given else RunStore(state).last_id()
    except ValueError as exc:
        raise UsageError(str(exc), where=where, fix=fix) from None
    if not RUN_ID_RE.fullmatch(run_id):
        raise UsageError(f"not a run id: {run_id!r}", where=where, fix=fix)
    return run_id


def handle_of(record: Union[RunRecord, dict], run_id: str) -> RunHandle:
    """The handle of a recorded run (a record of an older clusterctl: Slurm where it has a `slurm`
    entry, else the nodes)."""
    if isinstance(record, dict):
        record = RunRecord.from_json(record, run_id)
    return RunHandle(run_id, record.get("backend") or ("slurm" if record.get("slurm") else "nodes"),
                     record.get("cluster"))


@dataclass(frozen=True)
class RunEntry:
    run_id: str
    state: RunState  # run_record.REPORTED
    started: Optional[float]
    ended: Optional[float]
    exit_code: Optional[int]
    first_failure: Optional[dict]
    world_size: Optional[int]
    nodes: list
    cluster: Optional[str]
    stalled_s: Optional[float] = None  # a detached run whose ranks all went silent this long (its supervisor says)
    stragglers: tuple = ()  # ranks the others waited for (watch/stragglers.py), as run.json has them
    attempts: list = field(default_factory=list)  # a run that healed itself: one entry per launch (issue 35)

    def to_json(self) -> dict:
        return as_document(parts.RunEntry, self)


def state_of(record: Union[RunRecord, dict], run_id: str, holder_of: Callable[[str], Optional[dict]]) -> RunState:
    """What became of a run (run_record.REPORTED), from its record; `holder_of(lock name)`: state.lock_holder."""
    if isinstance(record, dict):
        record = RunRecord.from_json(record, run_id)
    if record.state is RunState.RUNNING:
        if record.detached:  # watched on the cluster (run/supervision.py refreshes the record)
            return RunState.UNKNOWN if record.supervisor_gone else RunState.RUNNING
        holder = holder_of(run_lock(record.cluster)) if record.cluster else None
        return RunState.RUNNING if holder and holder.get("run_id") == run_id else RunState.UNKNOWN
    if record.state is RunState.STOPPED or record.stopped:
        return RunState.STOPPED
    if record.interrupted:
        return RunState.INTERRUPTED
    if record.state is RunState.ENDED or record.exit_code is not ABSENT:
        return RunState.SUCCEEDED if record.exit_code == 0 else RunState.FAILED
    return RunState.UNKNOWN


def list_runs(state, limit: int = LISTED) -> list[RunEntry]:
    """The most recent `limit` runs, newest first (run ids start with their start time)."""
    return [entry(record, record.run_id, state.lock_holder) for record in RunStore(state).list(limit)]


def entry(record: Union[RunRecord, dict], run_id: str, holder_of: Callable[[str], Optional[dict]]) -> RunEntry:
    if isinstance(record, dict):
        record = RunRecord.from_json(record, run_id)
    nodes = [n.get("host") for n in record.get("topology") or [] if isinstance(n, dict)]
    return RunEntry(run_id, state_of(record, run_id, holder_of), record.get("started"), record.get("ended"),
                    record.get("exit_code"), _failure(record.get("first_failure")), record.get("world_size"),
                    nodes, record.get("cluster"), record.get("stalled_s") if record.state is RunState.RUNNING else None,
                    tuple(s for s in record.get("stragglers") or () if isinstance(s, dict)),
                    record.get("attempts") or [])


def _failure(first: Optional[dict]) -> Optional[dict]:
    """The first failure in short: where, and the top cause (the record has all of it)."""
    if not isinstance(first, dict):
        return None
    top = (first.get("diagnosis") or [{}])[0]
    return {"host": first.get("host"), "rank": first.get("rank"), "cause": top.get("cause"),
            "evidence": top.get("evidence")}
