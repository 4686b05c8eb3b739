"""The diagnosis of a log file or a collected run directory: `diagnose_path` (findings) and
`diagnose` (findings and the nearest known public cases, their causes as runner-ups).

The matching itself is matching.py (every name it had here is still importable from here); a run
directory is rundir.py, which uses the matching and is used here: the three in one direction.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from clusterctl.diagnose import fixes as F
from clusterctl.diagnose import reader, rundir
from clusterctl.diagnose.confidence import resembling
from clusterctl.diagnose.evidence import exception_named
from clusterctl.diagnose.families import STOPPED_FROM_OUTSIDE
from clusterctl.diagnose.matching import (ALWAYS_TRIED, CAP, CONSEQUENCE_FACTOR, EVIDENCE_MAX,  # noqa: F401
                                          INDEXED_SIGNALS, KEYWORDS, PEER_LOST_FACTOR, ROOT_RANK_FACTOR, STRONG,
                                          TOP, WEAK, WRAPPER_EXCEPTIONS, Candidate, Event, Scan, context_from_text,
                                          diagnose_text, match_lines, match_one, node_values, rank_findings)
from clusterctl.diagnose.textmatch import SUSPICIOUS
from clusterctl.diagnose.similar import similar_cases
from clusterctl.models import Finding


@dataclass(frozen=True)
class Diagnosis:
    findings: list  # [Finding], most likely first; [] for a run that succeeded
    similar: list  # [similar.Similar], the nearest known public cases


def diagnose(path: Path, record: Optional[dict] = None, k: int = 3) -> Diagnosis:
    """`diagnose_path` plus "looks like a known case": the k nearest corpus entries."""
    path = Path(path)
    if path.is_dir():
        findings = rundir.diagnose_run_dir(path, record)
        query = "\n".join(f.evidence for f in findings if f.cause != "unknown" or len(findings) == 1)
    else:
        query = reader.read_log(path)
        findings = diagnose_text(query, source=str(path))
    similar = similar_cases(query, k) if findings else []
    return Diagnosis(with_similar_causes(findings, similar), similar)


RELEASE_BUG_CONFIDENCE = 0.2
SIMILAR_FACTOR = 0.5  # a cause known only from a resembling case: half its similarity, then calibrated


def with_similar_causes(findings: list[Finding], similar: list) -> list[Finding]:
    """Fewer than TOP findings (the rules explain the log only partly, or not at all): the causes
    of the nearest known cases follow as runner-ups, each quoting the case it comes from, so the
    right cause is more often among the three even where no rule has seen its wording yet. Where no
    cause has any evidence (a lone `unknown`), the nearest case's cause leads at its low confidence and
    `unknown` follows with the quoted lines: on the first-scored batches the nearest case was right for
    about a quarter of such logs, `unknown` never (issue 51: `unknown` first only with nothing at all). With no
    resembling case either, an error line no rank printed that is not the job's own exception (a launcher's, a
    daemon's, a library's words) is named `library_bug` first, `unknown` after it (_release_bug)."""
    if not findings or len(findings) >= TOP:
        return findings
    lead, out, named = findings[0], list(findings), {f.cause for f in findings}
    for case in similar:
        if len(out) >= TOP:
            break
        if case.cause in named or case.cause == "unknown":
            continue
        named.add(case.cause)
        out.append(Finding(cause=case.cause, host=lead.host, rank=lead.rank, fix=case.fix,
                           evidence=f"resembles a known case ({case.source}, similarity {case.score:.2f})",
                           confidence=resembling(round(min(CAP, case.score) * SIMILAR_FACTOR, 2))))
    if len(findings) == 1 and lead.cause == "unknown" and len(out) > 1 and not _jobs_own_exception(lead):
        out[0], out[1] = out[1], out[0]
    if out[0].cause == "unknown" and _a_tools_own_error(lead) and "library_bug" not in named:
        out = [_release_bug(lead)] + out[:TOP - 1]
    for index in range(1, len(out)):  # a runner-up never prints surer than the answer above it
        if out[index].confidence > out[index - 1].confidence:
            out[index] = replace(out[index], confidence=out[index - 1].confidence)
    return out


def _release_bug(lead: Finding) -> Finding:
    """What a lone `unknown` quoting no rank's line and no exception of the job's most often was: a tool's or a
    library's own failure that no rule and no known case names (issue 51: over batches 31-38, 2 of the 4 logs whose
    first answer was still such an `unknown` were labelled library_bug, Hydra's node-list parsing and a platform's
    doubled addresses; no label was `unknown`'s). `unknown` follows with the quoted lines and its next step. Chosen
    on those batches after their first scores: the next batch is its test."""
    return Finding(cause="library_bug", host=lead.host, rank=lead.rank, fix=F.LIBRARY_BUG_UNNAMED,
                   evidence=f"no rule or known case names it: {lead.evidence}", confidence=RELEASE_BUG_CONFIDENCE)


def _a_tools_own_error(lead: Finding) -> bool:
    """The `unknown` quotes an error-looking line that no rank printed (a rank's line is the job's) and that is not
    an exception of the job's own: a launcher's, a daemon's or a library's words. Not the last lines of a log
    with no error in it, nor an empty one."""
    first_quoted = lead.evidence.split(" | ", 1)[0]
    return lead.rank is None and bool(SUSPICIOUS.search(first_quoted)) and not _jobs_own_exception(lead)


def _jobs_own_exception(lead: Finding) -> bool:
    """A lone `unknown` quoting an exception the job raised (`RuntimeError: ...`; not torch's own, such as the
    launcher's `torch.distributed.elastic...SignalException`) keeps the lead: the job's own error says more
    than a case that merely resembles the log (a plain job fault read `killed_by_signal` at similarity 0.37); so does
    a launcher telling it was sent SIGTERM/SIGINT: the cause is the sender's, which no resembling log knows."""
    named = exception_named(lead.evidence.split(" | ", 1)[0])
    return (named is not None and not named.startswith("torch.")) or bool(STOPPED_FROM_OUTSIDE.search(lead.evidence))


def diagnose_path(path: Path, record: Optional[dict] = None) -> list[Finding]:
    """Findings for a log file or a collected run directory, most likely root cause first.
    A run directory whose run record (or agent.exit files) says every node exited 0 has none."""
    path = Path(path)
    if path.is_dir():
        return rundir.diagnose_run_dir(path, record)
    return diagnose_text(reader.read_log(path), source=str(path))
