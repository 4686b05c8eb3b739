"""A hang's own evidence in a collected run directory: the stacks clusterctl took, the flight recorder's dumps.

- `stacks-*.json` (watch/stalls.py): written into each node's run dir when `run` stopped a hang (verdict
  "hang", with the finding it reported) or by `clusterctl stacks` (verdict "snapshot": not a
  failure by itself). collect-logs brings them back under `<host>/outputs/logs/<run>/<host>/`.
- `nccl_trace_rank_<rank>`: flight-recorder dumps (flight_recorder.py).

`with_hang_evidence(root, findings)` puts these findings among the log's: a hang clusterctl stopped
comes first (the run ended because of it); a flight-recorder finding takes its place by confidence,
below a stronger cause on the logs (a rank killed by the OOM killer also leaves the others' dumps
naming it as "did not join"). One exception: the log's collective timeout (`nccl_timeout_slow_rank`,
`Watchdog caught collective operation timeout: WorkNCCL(SeqNum=N ...`) is printed by a rank that
*joined* collective N and waited; the dumps name the rank that did not. The two become one finding:
the timeout's cause, on the rank the dumps name, quoting both (seen on 2 x H200: the log named rank 0,
the watchdog's rank, while rank 1 slept; docs/gpu-validation.md, round 2).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

from clusterctl.diagnose.flight_recorder import Stuck, flight_recorder_results
from clusterctl.models import Finding

MAX_STACKS_BYTES = 16 << 20
TOP = 3
FLIGHT_RECORDER_CONFIDENCE = 0.8
COLLECTIVE_TIMEOUT = "nccl_timeout_slow_rank"
_SEQ = re.compile(r"SeqNum=(\d{1,12})")


def stacks_documents(root: Path) -> list[tuple[Path, dict]]:
    """The stack documents under `root`, oldest first (names carry the time)."""
    documents = []
    for path in sorted(root.rglob("stacks-*.json"), key=lambda p: p.name):
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_STACKS_BYTES:
            continue
        try:
            document = json.loads(path.read_text(errors="replace"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(document, dict):
            documents.append((path, document))
    return documents


def stopped_hang(root: Path) -> Optional[Finding]:
    """The rank_hang finding of the hang `run` stopped, from the stacks it saved (every node has a copy)."""
    for path, document in reversed(stacks_documents(root)):
        failure = document.get("first_failure")
        if document.get("verdict") != "hang" or not isinstance(failure, dict):
            continue
        found = next((f for f in failure.get("diagnosis") or [] if isinstance(f, dict) and f.get("cause") == "rank_hang"),
                     None)
        if found is None:
            continue
        rank = found.get("rank")
        evidence = f"{found.get('evidence', '')} [{path.relative_to(root)}]"
        return Finding("rank_hang", evidence[:600], str(found.get("fix") or ""), host=_text(found.get("host")),
                       rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else None, score=1.0,
                       confidence=0.95)
    return None


def with_hang_evidence(root: Path, findings: list[Finding]) -> list[Finding]:
    """The log's findings with the hang's own evidence merged in, top 3."""
    stopped = stopped_hang(root)
    results = flight_recorder_results(root)
    findings, named = _timeouts_on_the_absent_rank(findings, results)
    recorded = [Finding(f.cause, f.evidence, f.fix, f.host, f.rank, f.score, min(f.confidence, FLIGHT_RECORDER_CONFIDENCE))
                for item, f in results if id(item) not in named]
    if stopped is None and not recorded and not named:
        return findings
    same = [f for f in recorded if stopped and (f.host, f.rank) == (stopped.host, stopped.rank)]
    if same:  # the dumps agree with the stacks: one finding quoting both
        stopped = Finding(stopped.cause, f"{stopped.evidence} | {same[0].evidence}"[:600], stopped.fix, stopped.host,
                          stopped.rank, stopped.score, stopped.confidence)
        recorded = [f for f in recorded if f not in same]
    others = [f for f in findings if f.cause != "unknown"]  # the hang explains what the log could not
    merged = ([stopped] if stopped else []) + sorted(recorded + others, key=lambda f: -f.confidence)
    seen, unique = set(), []
    for finding in merged:  # one finding per cause and place: the strongest
        key = (finding.cause, finding.host, finding.rank)
        if key not in seen and not (finding.cause == "rank_hang" and stopped and finding is not stopped
                                    and finding.rank is None):
            seen.add(key)
            unique.append(finding)
    return unique[:TOP]


def _timeouts_on_the_absent_rank(findings: list[Finding], results: list[tuple[Stuck, Finding]]) -> tuple[list[Finding], set]:
    """Each collective timeout of the logs whose collective the dumps show a rank missing from, moved onto
    that rank with the dumps' evidence; and the ids of the stuck collectives so used (not said twice)."""
    used, out = set(), []
    for finding in findings:
        match = next((pair for pair in results if finding.cause == COLLECTIVE_TIMEOUT and pair[0].missing
                      and finding.rank not in pair[0].missing and _same_collective(finding, pair[0])), None)
        if match is None:
            out.append(finding)
            continue
        item, recorded = match
        used.add(id(item))
        waited = f"rank {finding.rank}'s" if finding.rank is not None else "the"
        evidence = f"{recorded.evidence} | {waited} watchdog: {finding.evidence}"
        out.append(Finding(finding.cause, evidence[:600], f"{recorded.fix}; {finding.fix}"[:600], recorded.host,
                           recorded.rank, finding.score, finding.confidence))
    return out, used


def _same_collective(finding: Finding, item: Stuck) -> bool:
    """The timeout's WorkNCCL SeqNum is the dumps' collective number (the default group's); a timeout line
    without one is taken to be about the collective the dumps show stuck."""
    seq = _SEQ.search(finding.evidence)
    return seq is None or int(seq.group(1)) == item.seq


def _text(value) -> Optional[str]:
    return value if isinstance(value, str) else None
