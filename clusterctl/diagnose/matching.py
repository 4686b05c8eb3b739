"""Weigh the evidence of every cause in the rule table and rank the causes, top 3 with a confidence.

`diagnose_text` reads one log's text; engine.py puts a log file or a run directory (rundir.py) in
front of it, and the nearest known cases behind it.

How a log becomes findings:
1. lines are parsed (logformat): prefixes, timestamps, rank and host, torchrun's root-cause block;
2. every signal of every rule is searched in every line (a cheap literal pre-filter first), and in a
   line joined with its wrapped continuation;
3. per cause (and host), the distinct signals combine by noisy-OR: 1 - prod(1 - weight). A line of
   the rank torchrun names as the first failure weighs more, a line that only reports a lost peer
   less, and evidence marked `consequence` (a collective timeout) is discounted when another cause
   or an unexplained exception explains the failure;
4. an exception nothing explains beats weak or consequential evidence: the finding is `unknown` and
   quotes the three most suspicious lines (never nothing).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

from clusterctl.diagnose import evidence as ev
from clusterctl.diagnose import families
from clusterctl.diagnose import logformat as fmt
from clusterctl.diagnose.confidence import calibrated
from clusterctl.diagnose.logformat import LogLine, RootCause
from clusterctl.diagnose.rules_code import code_fault_of
from clusterctl.diagnose.rules import HOST_MEMORY_SHORT, OOM_RECORD, RULE_OF, RULES, Rule, Signal
from clusterctl.diagnose.textmatch import (CASCADE_PATTERNS, CONTEXT_PATTERNS, EXCEPTION_LINE, PEER_LOST_PATTERNS,
                                           SUSPICIOUS, UNKNOWN_FIX, any_line_matches, compiled, in_lowered,
                                           lines_holding, render_fix, required_literals, template_values)
from clusterctl.models import Finding

EVIDENCE_MAX = 600
TOP = 3
# A line its writer logged as a warning (glog `W`, Python warnings, WARNING:) is a weaker shape: the run
# went on after it. NCCL's `WARN` is NCCL's error level and is not one of these.
WARNING_LINE = re.compile(r"^\[?W\d{4} |^\[W |\bWARNING\b|\w+Warning\b|\bWarning:")
WARNING_FACTOR = 0.5
ROOT_RANK_FACTOR = 1.12  # a line of the rank torchrun saw fail first
PEER_LOST_FACTOR = 0.6  # a line that says a peer went away
CONSEQUENCE_FACTOR = 0.45  # timeouts while something else explains the failure
STRONG = 0.6  # evidence at which a cause beats an unexplained exception
UNKNOWN_BAR = 0.45  # an unexplained exception leads over evidence weaker than this
WEAK = 0.2  # below this a cause is not worth naming
CAP = 0.99
WRAPPER_EXCEPTIONS = ("ChildFailedError", "DistBackendError", "CalledProcessError", "SignalException",
                      "ProcessRaisedException", "ProcessExitedException", "RayTaskError", "TaskFailedException")
INDEXED_SIGNALS = tuple((rule, signal, signal.keywords) for rule in RULES for signal in rule.signals)
KEYWORDS = tuple(sorted({key for _, _, keys in INDEXED_SIGNALS if keys for key in keys}))
ALWAYS_TRIED = tuple(item for item in INDEXED_SIGNALS if item[2] is None)


@dataclass
class Event:
    """One signal seen on one line."""

    rule: Rule
    signal: Signal
    line: LogLine
    evidence: str
    values: dict = field(default_factory=dict)
    source: str = ""
    factor: float = 1.0  # node diagnostics and joins adjust it

    @property
    def cause(self) -> str:
        return self.rule.cause

    @property
    def weight(self) -> float:
        return min(CAP, self.signal.weight * self.factor)


@dataclass
class Scan:
    """Everything read from one log or one run directory."""

    lines: list[LogLine] = field(default_factory=list)
    roots: list[RootCause] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    context: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)  # host -> what its diag/ files say
    lowered: str = ""  # all lines, lower-case, for `requires`
    records: list = field(default_factory=list)  # the typed evidence of `lines` (evidence.py), extracted once

    def add_text(self, text: str, host: Optional[str], rank: Optional[int], source: str, year: int) -> None:
        lines, roots = fmt.parse_lines(text, host, rank, year)
        if host is not None:  # torchrun's summary names the machine as it calls itself (an FQDN,
            for root in roots:  # `localhost`); the log is this host's, so the failure is too
                root.fields["host"] = host
        self.lines.extend(lines)
        self.roots.extend(roots)
        self.events.extend(match_lines(lines, source))
        records = ev.extract(lines)
        self.records.extend(records)
        self.events.extend(family_events(lines, records, source))
        for key, value in context_from_text(text).items():
            self.context.setdefault(key, value)


# --------------------------------------------------------------------------- public API


def diagnose_text(text: str, host: Optional[str] = None, rank: Optional[int] = None,
                  source: Optional[str] = None) -> list[Finding]:
    """Findings for one log's text, most likely root cause first (never empty)."""
    host, rank = fmt.identity_from_name(source, host, rank)
    scan = Scan()
    scan.add_text(text, host, rank, source or "", fmt.guess_year(text))
    return rank_findings(scan)


def context_from_text(text: str) -> dict:
    found, lowered = {}, text.lower()
    for key, patterns in CONTEXT_PATTERNS.items():
        for pattern in patterns:
            keys = required_literals(pattern.pattern)
            match = None if keys and not any(k in lowered for k in keys) else pattern.search(text)
            if match:
                found[key] = match.group(1)
                break
    return found


# --------------------------------------------------------------------------- matching


def match_lines(lines: list[LogLine], source: str) -> list[Event]:
    events = []
    present = keywords_by_line(lines)
    for index, line in enumerate(lines):
        found = match_one(line, line.text, source, present=present.get(index, frozenset()))
        if index + 1 < len(lines) and _continues(line, lines[index + 1]):
            for glue in (" ", ""):  # a wrapped word ("capab" + "ilities") or a wrapped sentence
                seen = {event.signal for event in found}
                joined = line.text.rstrip() + glue + lines[index + 1].text.strip()
                boundary = len(line.text.rstrip()) + len(glue)
                found += [e for e in match_one(line, joined, source, boundary) if e.signal not in seen]
        events.extend(found)
    return events


def family_events(lines: list[LogLine], records: list, source: str) -> list[Event]:
    """The typed evidence `records` of `lines` (evidence.extract) as events of the causes its families support
    (families.py): one Signal per family, so the noisy-OR counts a family once."""
    events = []
    killed = any(isinstance(r, ev.ExitStatus) and r.signal == 9 for r in records)
    texts = [line.text[:ev.MAX_LINE] for line in lines] if killed else []
    lowered = "\n".join(texts).lower()
    oom_recorded = killed and any_line_matches(OOM_RECORD, texts, lowered)
    memory_short = killed and not oom_recorded and any_line_matches(HOST_MEMORY_SHORT, texts, lowered)
    placement = ev.evidence_config.rank_placement(lines)
    for support in families.supports(records, oom_recorded, memory_short) + \
            families.placement_supports(placement, records):
        rule = RULE_OF.get(support.cause)
        if rule is None:
            continue
        line = support.record.line
        weight = support.weight * (WARNING_FACTOR if WARNING_LINE.search(line.raw[:200]) else 1.0)
        signal = _family_signal(support.family, round(weight, 3), support.consequence, support.fix)
        events.append(Event(rule, signal, line, line.text.strip()[:EVIDENCE_MAX], {}, source))
    return events


@lru_cache(maxsize=None)
def _family_signal(family: str, weight: float, consequence: bool, fix: str = "") -> Signal:
    return Signal(f"family:{family}", weight, consequence=consequence, fix=fix)


def _continues(line: LogLine, following: LogLine) -> bool:
    """The next line is this message wrapped by a terminal or logger (indented, or lower-case after a long line)."""
    bare = following.raw.strip() == following.text
    return bare and (following.raw[:1].isspace() or (following.text[:1].islower() and len(line.raw) >= 60))


def keywords_by_line(lines: list[LogLine]) -> dict[int, set]:
    """line index -> the pre-filter keywords it holds."""
    return lines_holding([line.text.lower() for line in lines], KEYWORDS)


def match_one(line: LogLine, text: str, source: str, boundary: int = -1, present=None) -> list[Event]:
    """The signals found in `text`; with a boundary (a joined wrapped line), only those spanning it.
    `present`: the keywords `text` holds when the caller knows them (match_lines)."""
    lowered = text.lower()
    events = []
    if present is None:
        present = {key for key in KEYWORDS if key in lowered}
    candidates = [item for item in INDEXED_SIGNALS if item[2] is not None and not present.isdisjoint(item[2])] \
        if present else []
    for rule, signal, _ in candidates + list(ALWAYS_TRIED):
        match = signal.regex.search(text)
        if match is None or (signal.unless and _search(signal.unless, text)) or \
                (boundary >= 0 and not match.start() < boundary < match.end()):
            continue
        values = {k.rstrip("0123456789"): v for k, v in match.groupdict().items() if v}
        rank = int(values["rank"]) if "rank" in values and rule.cause != "duplicate_gpu" else None
        events.append(Event(rule, signal, fmt.with_rank(line, rank), text.strip()[:EVIDENCE_MAX], values, source))
    return events


def _search(pattern: str, text: str) -> bool:
    return compiled(pattern).search(text) is not None


# --------------------------------------------------------------------------- scoring


SPECIFIC = 0.8  # a signature this strong owns its line: shapes on it name no other cause


def families_after_rules(events: list[Event]) -> list[Event]:
    """Family evidence only where the signatures leave room: one line counts once per cause (the
    stronger of its signatures and its shapes), and a line a specific signature explains (weight >=
    SPECIFIC) supports no other cause through its shape."""
    by_line: dict[tuple, list[Event]] = {}
    for event in events:
        by_line.setdefault((event.source, event.line.number, event.line.text), []).append(event)
    kept = []
    for group in by_line.values():
        rules = [e for e in group if not e.signal.pattern.startswith("family:")]
        owner = max(rules, key=lambda e: e.weight, default=None)
        owned = owner is not None and owner.weight >= SPECIFIC
        best: dict[str, Event] = {}
        for event in group:
            if event not in rules and not (owned and event.cause != owner.cause):
                if event.cause not in best or event.weight > best[event.cause].weight:
                    best[event.cause] = event
        for event in rules:
            family = best.get(event.cause)
            if family is None or family.weight <= max(e.weight for e in rules if e.cause == event.cause):
                kept.append(event)
                best.pop(event.cause, None)
        kept.extend(best.values())
    return kept


@dataclass
class Candidate:
    cause: str
    host: Optional[str]
    events: list[Event]
    score: float = 0.0
    consequence_only: bool = False


def rank_findings(scan: Scan) -> list[Finding]:
    scan.lowered = "\n".join(line.text for line in scan.lines).lower()
    found: dict = {}  # each log-wide pattern searched once, however many lines it decides (a 10 MB log of EADDRINUSE)

    def anywhere(pattern: str) -> bool:
        if pattern not in found:
            found[pattern] = in_lowered(pattern, scan.lowered)
        return found[pattern]

    events = [e for e in scan.events if (not e.signal.requires or anywhere(e.signal.requires))
              and not (e.signal.unless_log and anywhere(e.signal.unless_log))]
    events = families_after_rules(events)
    candidates = _candidates(scan, events)
    unexplained = _unexplained_exceptions(scan, events)
    strong_roots = [c for c in candidates if not c.consequence_only and c.score >= STRONG]
    for candidate in candidates:
        if candidate.consequence_only and (strong_roots or unexplained):
            candidate.score *= CONSEQUENCE_FACTOR
    candidates = sorted((c for c in candidates if c.score >= WEAK), key=_order(scan))
    best = candidates[0].score if candidates else 0.0
    findings = [_finding(c, scan) for c in candidates]
    raised = None
    if not candidates or (unexplained and (best < UNKNOWN_BAR or candidates[0].consequence_only)):
        lead, raised = _unknown(scan, unexplained, best)
        findings.insert(0, lead)
    findings = _dedupe(findings)[:TOP]
    findings = _with_confidence(findings, [f.score for f in findings])
    if raised is not None:  # named only after its confidence, which stays an `unknown`'s: the evidence is the same
        findings[0] = _job_code_error(findings[0], raised, scan)
    return findings


def _candidates(scan: Scan, events: list[Event]) -> list[Candidate]:
    root_ranks = {root.rank for root in scan.roots if root.rank is not None}
    groups: dict[tuple, list[Event]] = {}
    hosts: dict[str, set] = {}
    for event in events:
        if event.line.host is not None:
            hosts.setdefault(event.cause, set()).add(event.line.host)
    for event in events:  # host-less evidence joins the cause's hosts (one log names a host only here and there)
        joined = [event.line.host] if event.line.host is not None else sorted(hosts.get(event.cause, ())) or [None]
        for host in joined:
            groups.setdefault((event.cause, host), []).append(event)
    candidates = []
    for (cause, host), group in groups.items():
        best: dict[Signal, float] = {}
        for event in group:
            weight = event.weight
            if event.line.rank is not None and event.line.rank in root_ranks:
                weight = min(CAP, weight * ROOT_RANK_FACTOR)
            if any(p.search(event.line.text) for p in PEER_LOST_PATTERNS):
                weight *= PEER_LOST_FACTOR
            best[event.signal] = max(best.get(event.signal, 0.0), weight)
        miss = 1.0
        for weight in best.values():
            miss *= 1.0 - weight
        candidates.append(Candidate(cause, host, group, min(CAP, 1.0 - miss),
                                    all(signal.consequence for signal in best)))
    return candidates


def _order(scan: Scan):
    """Stronger evidence first; among near-equals the earlier failure, then the root-cause rank."""
    root_ranks = {root.rank for root in scan.roots}

    def key(candidate: Candidate):
        stamps = [e.line.ts for e in candidate.events if e.line.ts is not None]
        named = any(e.line.rank in root_ranks for e in candidate.events if e.line.rank is not None)
        return (-round(candidate.score, 2), min(stamps) if stamps else float("inf"), not named,
                min(e.line.number for e in candidate.events))
    return key


def _finding(candidate: Candidate, scan: Scan) -> Finding:
    best = max(candidate.events, key=lambda e: (round(e.weight, 2), bool(EXCEPTION_LINE.match(e.evidence)),
                                                  -(e.line.ts or 0), -e.line.number))
    root_ranks = {root.rank for root in scan.roots}
    ranks = [e.line.rank for e in candidate.events if e.line.rank is not None]
    named = [r for r in ranks if r in root_ranks]
    rank = named[0] if named else (min(ranks) if ranks else None)
    if rank is None and len({r.rank for r in scan.roots if r.rank is not None}) == 1:
        rank = scan.roots[0].rank if scan.roots[0].rank is not None else None
    values = {**scan.context, **node_values(scan.nodes.get(candidate.host))}
    for event in sorted(candidate.events, key=lambda e: e.weight):
        values.update(event.values)
    values.update(host=candidate.host, rank=rank)
    fix = render_fix(best.signal.fix or best.rule.fix, template_values(values))
    return Finding(candidate.cause, best.evidence, fix, host=candidate.host, rank=rank, score=candidate.score)


def node_values(node: Optional[dict]) -> dict:
    if not node:
        return {}
    return {k: node[k] for k in ("gpus", "driver", "shm_size") if node.get(k)}


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for finding in findings:
        key = (finding.cause, finding.host)
        if key not in seen:
            seen.add(key)
            out.append(finding)
    return out


def _with_confidence(findings: list[Finding], scores: list[float]) -> list[Finding]:
    """Evidence strength times its share among the ranked answers (one strong cause alone keeps its
    strength, two equally strong ones split it), then calibrated (confidence.py) so that the number
    printed is the share of such answers that were right on logs never seen before."""
    from dataclasses import replace

    total = sum(scores) or 1.0
    return [replace(f, confidence=calibrated(min(1.0, s * s / total), f.cause)) for f, s in zip(findings, scores)]


# --------------------------------------------------------------------------- unknown


def _unexplained_exceptions(scan: Scan, events: list[Event]) -> list[LogLine]:
    explained = {(e.line.number, e.line.text) for e in events}  # (number, text): files share line numbers
    out = []
    for line in scan.lines:
        if not EXCEPTION_LINE.match(line.text) or (line.number, line.text) in explained:
            continue
        if any(w in line.text for w in WRAPPER_EXCEPTIONS) or any(p.search(line.text) for p in CASCADE_PATTERNS):
            continue
        out.append(line)
    return out


def _unknown(scan: Scan, unexplained: list[LogLine], best: float) -> tuple[Finding, Optional[ev.PyException]]:
    """The three most suspicious lines, of the root-cause rank if named: exceptions nothing
    explains first, then other error-looking lines, consequences last; and the first of them where it is an
    exception of the job's own kind (rules_code.code_fault_of), which names the finding job_code_error."""
    root = min(scan.roots, key=lambda r: (r.fields.get("time", ""), _lost_a_peer(scan, r)), default=None)
    own = [line for line in unexplained if root is None or root.rank is None or line.rank == root.rank]
    picked = _suspicious(own or unexplained)
    if len(picked) < 3:
        more = _suspicious([line for line in scan.lines if line not in picked])
        picked += more[:3 - len(picked)]
    evidence = " | ".join(line.text for line in picked)[:EVIDENCE_MAX] or _last_lines(scan)
    first = picked[0] if picked else None
    rank = first.rank if first is not None and first.rank is not None else (root.rank if root else None)
    host = first.host if first is not None and first.host else (root.host if root else None)
    score = (0.55 if unexplained else 0.35) * (1.0 - best)
    records = scan.records
    raised = next((r for r in records if isinstance(r, ev.PyException) and r.line == first), None)
    own = raised if raised is not None and first in unexplained and code_fault_of(raised.type, raised.message) else None
    step = families.next_step(records, first)
    return Finding("unknown", evidence, f"{step} {UNKNOWN_FIX}" if step else UNKNOWN_FIX, host=host, rank=rank,
                   score=max(score, 0.05)), own


def _job_code_error(lead: Finding, raised: ev.PyException, scan: Scan) -> Finding:
    """The `unknown` lead renamed for the exception of the job's own kind it quotes, with where it was raised."""
    from dataclasses import replace

    where = f"`{raised.qualified}`" + (f" raised in `{raised.module}`" if raised.module else "")
    fix = render_fix(RULE_OF["job_code_error"].fix, template_values({**scan.context, "host": lead.host,
                                                                     "rank": lead.rank}))
    return replace(lead, cause="job_code_error", fix=f"{where}: {fix}")


def _last_lines(scan: Scan) -> str:
    tail = [line.text for line in scan.lines[-3:] if line.text.strip()]
    return " | ".join(tail)[:EVIDENCE_MAX] or "(the log is empty)"


def _lost_a_peer(scan: Scan, root: RootCause) -> bool:
    return any(p.search(line.text) for line in scan.lines if line.rank == root.rank and line.host == root.host
               for p in PEER_LOST_PATTERNS)


def _suspicious(lines: list[LogLine], limit: int = 3) -> list[LogLine]:
    """Exception lines (a traceback's last line) first, then other error-looking lines, cascades last."""
    def weight(line: LogLine) -> tuple:
        exception = bool(EXCEPTION_LINE.match(line.text))
        cascade = any(p.search(line.text) for p in CASCADE_PATTERNS)
        return (cascade, not exception, line.ts or 0, line.number)
    candidates = [line for line in lines if SUSPICIOUS.search(line.text) and not line.text.startswith("File ")]
    unique = {line.text: line for line in sorted(candidates, key=weight, reverse=True)}
    return sorted(unique.values(), key=weight)[:limit]
