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
from typing import Callable, Optional

from clusterctl.documents import parts
from clusterctl.documents.convert import as_document
from clusterctl.errors import StateError, UsageError

RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
LISTED = 20


def run_lock(cluster: str) -> str:
    """The name of the lock a `clusterctl run` of this cluster holds (state.lock)."""
    return f"run-{cluster}"


def resolve(state, given: Optional[str], where: str = "RUN") -> tuple[str, dict]:
    """(run id, record) of the run named (default: the last one); exit 2 when there is none."""
    run_id = given or state.last_run_id()
    if not RUN_ID_RE.fullmatch(run_id):
        raise UsageError(f"not a run id: {run_id!r}", where=where,
                         fix="`clusterctl status` lists the runs (ids like 20250101-120000-a1b2c3)")
    path = state.root / "runs" / run_id / "run.json"
    try:
        record = state.read_json(path)
    except (OSError, ValueError):
        raise StateError(f"no record of run {run_id}", where=str(path),
                         fix="`clusterctl status` lists the runs of this directory; give one of their ids, "
                             "or none for the last run") from None
    if not isinstance(record, dict):
        raise StateError(f"the record of run {run_id} is not a run record", where=str(path),
                         fix="give another run id (`clusterctl status` lists them)")
    return run_id, record


@dataclass(frozen=True)
class RunEntry:
    run_id: str
    state: str  # running | unknown | stopped | succeeded | failed | interrupted
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


def state_of(record: dict, run_id: str, holder_of: Callable[[str], Optional[dict]]) -> str:
    """What became of a run, from its record; `holder_of(lock name)`: state.lock_holder."""
    state = record.get("state")
    if state == "running":
        if record.get("detached"):  # watched on the cluster (run/supervision.py refreshes the record)
            return "unknown" if record.get("supervisor_gone") else "running"
        cluster = record.get("cluster")
        holder = holder_of(run_lock(cluster)) if cluster else None
        return "running" if holder and holder.get("run_id") == run_id else "unknown"
    if state == "stopped" or record.get("stopped"):
        return "stopped"
    if record.get("interrupted"):
        return "interrupted"
    if state == "ended" or "exit_code" in record:
        return "succeeded" if record.get("exit_code") == 0 else "failed"
    return "unknown"


def list_runs(state, limit: int = LISTED) -> list[RunEntry]:
    """The most recent `limit` runs, newest first (run ids start with their start time)."""
    runs_dir = state.root / "runs"
    if not runs_dir.is_dir():
        return []
    ids = sorted((p.name for p in runs_dir.iterdir() if (p / "run.json").is_file()), reverse=True)
    entries = []
    for run_id in ids[:limit]:
        try:
            record = state.read_json(runs_dir / run_id / "run.json")
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            entries.append(entry(record, run_id, state.lock_holder))
    return entries


def entry(record: dict, run_id: str, holder_of: Callable[[str], Optional[dict]]) -> RunEntry:
    nodes = [n.get("host") for n in record.get("topology") or [] if isinstance(n, dict)]
    return RunEntry(run_id, state_of(record, run_id, holder_of), record.get("started"), record.get("ended"),
                    record.get("exit_code"), _failure(record.get("first_failure")), record.get("world_size"),
                    nodes, record.get("cluster"), record.get("stalled_s") if record.get("state") == "running" else None,
                    tuple(s for s in record.get("stragglers") or () if isinstance(s, dict)),
                    record.get("attempts") or [])


def _failure(first: Optional[dict]) -> Optional[dict]:
    """The first failure in short: where, and the top cause (the record has all of it)."""
    if not isinstance(first, dict):
        return None
    top = (first.get("diagnosis") or [{}])[0]
    return {"host": first.get("host"), "rank": first.get("rank"), "cause": top.get("cause"),
            "evidence": top.get("evidence")}
