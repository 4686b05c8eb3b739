"""Flight-recorder dumps: which rank did not join the collective the others wait in.

torch.distributed records each rank's last collectives (the flight recorder); `run` turns it on and
points its dump at the node's run dir (plan/torchrun.py), so a collective that times out leaves
`nccl_trace_rank_<global rank>` per rank there, which collect-logs brings back. A dump is a pickle
of plain data (dicts, lists, strings, numbers) written by torch's C++ pickler (`_dump_fr_trace`).

The files come from nodes, so they are read with an unpickler that refuses every class and global
(a pickle can otherwise run any code on this machine) and at most MAX_DUMP_BYTES each. torch's own
analyser (`torch.distributed.flight_recorder`, fr_trace) is used when torch is importable here, on
what this reader loaded (its own loader unpickles blindly, and `eval`s the group's rank list); it
matches collectives across ranks and reports the ranks missing from one. Where torch is absent or
gives no answer, this module's own matching does: per process group, the highest collective
sequence number any rank entered; the members whose last collective is lower did not join it.
Gloo records into the flight recorder but writes no dump on a timeout (torch 2.13); NCCL does.
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from clusterctl.models import Finding
from clusterctl.node import collective_waits
from clusterctl.node.collective_waits import MAX_DUMP_BYTES
DUMP_NAME = re.compile(r"^nccl_trace_rank_(\d{1,7})$")
FIX = ("the rank that did not join is where to look (a slow load, a rank-dependent branch that skips the "
       "collective, a crash that left no traceback); its stack is in the run's stacks-*.json when clusterctl "
       "stopped the run (`clusterctl stacks` while it hangs)")


@dataclass(frozen=True)
class Entry:
    seq: int  # collective_seq_id: the collective's number within its group
    op: str  # profiling_name, e.g. nccl:all_reduce
    group: str  # the process group's name
    state: str  # scheduled | started | completed (gloo: always scheduled)
    where: str  # the job's own innermost frame, `main (train.py:57)`, or ""
    p2p: bool


@dataclass(frozen=True)
class Dump:
    rank: int
    host: Optional[str]
    path: str
    entries: tuple[Entry, ...]
    groups: dict  # group name -> tuple of global ranks (pg_config)


@dataclass(frozen=True)
class Stuck:
    """A collective some members of a group entered and others did not (or none finished)."""

    group: str
    seq: int
    op: str
    joined: tuple[int, ...]
    missing: tuple[int, ...]  # members with a dump whose last collective is earlier
    no_dump: tuple[int, ...]  # members without a dump
    where: str  # where the joined ranks entered it
    last_of: dict  # missing rank -> its last Entry (or None)
    analyser: str


def load_dump(data: bytes, rank: int, host: Optional[str] = None, path: str = "") -> Optional[Dump]:
    """A dump's bytes -> Dump, or None for anything else (truncated, another format, a refused class): read
    by the nodes' reader (node/collective_waits.py), which refuses every class and global."""
    raw = collective_waits.load(data)
    if raw is None:
        return None
    entries = tuple(e for e in (_entry(item) for item in raw["entries"]) if e is not None)
    return Dump(rank, host, path, entries, _groups(raw.get("pg_config"), entries))


def _entry(item) -> Optional[Entry]:
    if not isinstance(item, dict):
        return None
    seq, group = item.get("collective_seq_id"), item.get("process_group")
    if not isinstance(seq, int) or isinstance(seq, bool):
        return None
    name = group[0] if isinstance(group, (tuple, list)) and group and isinstance(group[0], str) else ""
    op, state = item.get("profiling_name"), item.get("state")
    return Entry(seq, op if isinstance(op, str) else "?", name, state if isinstance(state, str) else "",
                 _own_frame(item.get("frames")), bool(item.get("is_p2p")))


def _own_frame(frames) -> str:
    """The innermost frame outside torch and the standard library: where the job called the collective."""
    for frame in frames if isinstance(frames, list) else ():
        if not isinstance(frame, dict):
            continue
        name, file, line = frame.get("name"), frame.get("filename"), frame.get("line")
        if isinstance(file, str) and isinstance(name, str) and not re.search(r"/(site|dist)-packages/|/lib/python3", file):
            return f"{name} ({file.rsplit('/', 1)[-1]}:{line if isinstance(line, int) else '?'})"
    return ""


def _groups(config, entries: tuple[Entry, ...]) -> dict:
    """pg_config -> {group name: ranks}. Gloo writes its group under the name "": it is the entries' group."""
    groups = {}
    for name, value in (config.items() if isinstance(config, dict) else ()):
        ranks = value.get("ranks") if isinstance(value, dict) else None
        numbers = tuple(int(n) for n in re.findall(r"\d{1,7}", ranks)) if isinstance(ranks, str) else ()
        if isinstance(name, str) and numbers:
            groups[name] = numbers
    if "" in groups and len(groups) == 1:
        named = {e.group for e in entries if e.group}
        if len(named) == 1:
            groups = {named.pop(): groups[""]}
    return groups


def find_dumps(root: Path) -> list[Dump]:
    """Every dump under a collected run directory; the host is the directory holding it (the node's run dir)."""
    dumps = []
    for path in sorted(root.rglob("nccl_trace_rank_*")):
        match = DUMP_NAME.match(path.name)
        if not match or not path.is_file() or path.is_symlink():
            continue
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_DUMP_BYTES + 1)
        except OSError:
            continue
        dump = load_dump(data, int(match.group(1)), path.parent.name, str(path.relative_to(root)))
        if dump is not None:
            dumps.append(dump)
    return dumps


# --------------------------------------------------------------------------- matching


def stuck_collectives(dumps: list[Dump]) -> list[Stuck]:
    """Per process group, the last collective some member entered, and the members that did not."""
    by_rank = {d.rank: d for d in dumps}
    members: dict[str, set] = {}
    for dump in dumps:
        for name, ranks in dump.groups.items():
            members.setdefault(name, set()).update(ranks)
        for entry in dump.entries:
            members.setdefault(entry.group, set()).add(dump.rank)
    stuck = []
    for group, ranks in sorted(members.items()):
        last = {rank: max((e for e in by_rank[rank].entries if e.group == group and not e.p2p), key=lambda e: e.seq,
                          default=None) for rank in ranks if rank in by_rank}
        if not any(last.values()):
            continue
        top = max(e.seq for e in last.values() if e)
        joined = sorted(r for r, e in last.items() if e and e.seq == top)
        missing = sorted(r for r, e in last.items() if not e or e.seq < top)
        no_dump = sorted(r for r in ranks if r not in by_rank)
        entry = last[joined[0]]
        unfinished = any(last[r].state not in ("completed", "") for r in joined) and entry.state != "scheduled"
        if missing or no_dump or unfinished:
            stuck.append(Stuck(group, top, entry.op, tuple(joined), tuple(missing), tuple(no_dump), entry.where,
                               {r: last[r] for r in missing}, "clusterctl's reader"))
    return stuck


def torch_missing_ranks(dumps: list[Dump]) -> Optional[dict]:
    """{(group, seq): missing ranks} from torch's analyser, or None where it is not importable or fails."""
    import contextlib
    import logging
    import warnings

    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.distributed.flight_recorder.components.builder import build_db
            from torch.distributed.flight_recorder.components.config_manager import JobConfig

            logger = logging.getLogger("Flight Recorder")
            level, logger.disabled = logger.disabled, True
            try:
                details = {f"nccl_trace_rank_{d.rank}": _torch_details(d) for d in dumps}
                db = build_db(details, JobConfig().parse_args(["-", "--allow-incomplete-ranks"]), "2.10")
            finally:
                logger.disabled = level
    except Exception:  # ImportError, or the analyser's own assertions on partial data
        return None
    return {(c.group_id, c.collective_seq_id): set(c.missing_ranks) for c in db.collectives if c.missing_ranks}


def _torch_details(dump: Dump) -> dict:
    """What torch's loader makes of a file, rebuilt from this reader's plain values (no eval of node text)."""
    entries = [{"record_id": i, "pg_id": 0, "process_group": (e.group, ""), "collective_seq_id": e.seq,
                "p2p_seq_id": 0, "op_id": e.seq, "profiling_name": e.op, "time_created_ns": 0, "input_sizes": [],
                "output_sizes": [], "input_dtypes": [], "output_dtypes": [], "state": e.state or "scheduled",
                "time_discovered_started_ns": None, "time_discovered_completed_ns": None, "retired": True,
                "timeout_ms": 0, "is_p2p": e.p2p, "frames": []} for i, e in enumerate(dump.entries)]
    config = {name: {"name": name, "desc": "", "ranks": str(list(ranks))} for name, ranks in dump.groups.items()}
    return {"host_name": f"host_rank{dump.rank}", "rank": dump.rank, "entries": entries, "version": "2.10",
            "pg_config": config}


# --------------------------------------------------------------------------- findings


def flight_recorder_findings(root: Path) -> list[Finding]:
    """rank_hang findings from the dumps under `root` (none when there are no dumps or nothing is stuck)."""
    return [finding for _, finding in flight_recorder_results(root)]


def flight_recorder_results(root: Path) -> list[tuple[Stuck, Finding]]:
    """Each stuck collective under `root` with its rank_hang finding."""
    return results_of(find_dumps(root))


def results_of(dumps: list[Dump]) -> list[tuple[Stuck, Finding]]:
    """Each stuck collective of these dumps (a collected run's, or read off the nodes by `run`) with its finding."""
    if not dumps:
        return []
    stuck = stuck_collectives(dumps)
    from_torch = torch_missing_ranks(dumps) if stuck else None
    hosts = {d.rank: d.host for d in dumps}
    results = []
    for item in stuck:
        confirmed = next((ranks for (group, seq), ranks in (from_torch or {}).items()
                          if seq == item.seq and group.startswith(item.group)), None)
        analyser = "torch.distributed.flight_recorder" if confirmed is not None else item.analyser
        results.append((item, _finding(item, hosts, analyser)))
    return results


def _finding(item: Stuck, hosts: dict, analyser: str) -> Finding:
    where = f" ({item.where})" if item.where else ""
    said = f"flight recorder ({analyser}): {_ranks(item.joined)} entered {item.op} #{item.seq} of group {item.group!r}{where}"
    culprit = item.missing[0] if item.missing else (item.no_dump[0] if item.no_dump else None)
    for rank in item.missing[:3]:
        last = item.last_of.get(rank)
        before = f"; its last: {last.op} #{last.seq}" + (f" at {last.where}" if last.where else "") if last else ""
        said += f"; rank {rank} on {hosts.get(rank) or '?'} did not{before}"
    if item.no_dump:
        said += f"; no dump from {_ranks(item.no_dump)}"
    if not item.missing and not item.no_dump:
        said += "; every member joined and it did not finish: the network, or a peer outside the job"
    return Finding("rank_hang", said[:600], FIX, host=hosts.get(culprit) if culprit is not None else None, rank=culprit,
                   score=0.95 if item.missing else 0.7, confidence=0.95 if item.missing else 0.7)


def _ranks(ranks) -> str:
    ranks = list(ranks)
    return f"rank{'s' if len(ranks) != 1 else ''} {', '.join(map(str, ranks[:8]))}" + ("..." if len(ranks) > 8 else "")
