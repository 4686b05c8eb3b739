"""The health rules: one table, one row per kind of event, saying when it moves a node.

    healthy --(suspect_after events of a kind within window)--> suspect
    healthy/suspect --(quarantine_after events of a kind within window)--> quarantined

- `suspect_after` / `quarantine_after`: how many events of this kind (on the host or any GPU it
  still has) move it; None: never (this kind alone never quarantines).
- `window_s`: only events this recent count (None: every event since the last release). A
  suspect node whose soft events have all aged out of their window is healthy again.
- Quarantine is sticky: only `clusterctl health release` ends it (a `released` event).
- Evidence from the job's side (source `job`: a detached run's keepers and supervisor document, which
  the job can forge) alone makes a node suspect, never quarantined: the events counted for a
  quarantine must include one of another source (a check, the controller's own watch) (issue 47).
- A `check_passed` event clears a suspect node (not a quarantined one) and is what a release
  without --force waits for.
- Order is the record's `seq`, never wall time; windows measure from the latest wall time seen
  so far, so a clock that jumps backwards neither reorders events nor revives old ones.
Overridable per inventory: `health: {rules: {node_lost: {quarantine_after: 3}}}` (README).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Optional, Sequence

from clusterctl.health.events import JOB, StoredEvent
from clusterctl.models import HealthSettings

DAY = 86400.0
HEALTHY, SUSPECT, QUARANTINED = "healthy", "suspect", "quarantined"
STATES = (HEALTHY, SUSPECT, QUARANTINED)
CHECK_PASSED, RELEASED = "check_passed", "released"
JOB_ONLY = ("; reported by the job's side only (a detached run's keepers or supervisor document): quarantined "
            "once a check or the controller's own watch sees it too")


@dataclass(frozen=True)
class Rule:
    kind: str
    summary: str  # the README's "what moves it" column, and the start of a quarantine's reason
    suspect_after: Optional[int] = 1
    quarantine_after: Optional[int] = None
    window_s: Optional[float] = None

    @property
    def severity(self) -> str:
        return "hard" if self.quarantine_after == 1 else "soft"


R = Rule
RULES: tuple[Rule, ...] = (
    R("xid_fatal", "a fatal Xid (48 DBE, 62, 64 row-remap failure, 74 NVLink, 79 fallen off the bus, 94/95 ECC, "
      "119/120 GSP, 140)", 1, 1),
    R("xid", "another Xid (not an application's fault)", 1, None, 1 * DAY),
    R("ecc_uncorrectable", "a new uncorrectable ECC error (volatile or aggregate count went up)", 1, 1),
    R("row_remap_failure", "row remapping failed: the memory cannot be repaired in place", 1, 1),
    R("row_remap_pending", "a remapped row or retired page waits for a GPU reset", 1, None, 7 * DAY),
    R("thermal", "hardware or thermal slowdown, or a GPU over its temperature limit", 1, None, 1 * DAY),
    R("dcgm_failure", "DCGM health reports Failure", 1, 1),
    R("dcgm_warning", "DCGM health reports Warning", 1, None, 1 * DAY),
    R("node_lost", "the node was lost during a run (unreachable, its agent gone)", 1, 2, 7 * DAY),
    R("run_blamed", "a failed run's diagnosis blamed this node", 1, 2, 7 * DAY),
    R("heal_excluded", "the self-healing run left this node out", 1, 2, 7 * DAY),
    R("nccl_outlier", "nccl-test --pairs named this node the outlier", 1, 1),
    R("straggler", "a run named this node a straggler", 1, 3, 7 * DAY),
    R("preflight_failed", "a preflight check failed on this node (up, check)", 1, None, 1 * DAY),
)
RULE_OF: dict[str, Rule] = {rule.kind: rule for rule in RULES}
INFO_KINDS = (CHECK_PASSED, RELEASED)
OVERRIDABLE = ("suspect_after", "quarantine_after", "window_days")


def rules_for(settings: Optional[HealthSettings]) -> dict[str, Rule]:
    """The table with the inventory's `health.rules` overrides applied (validated at load)."""
    rules = dict(RULE_OF)
    for override in (settings.rules if settings else ()):
        changes = {}
        for key, value in override.values:
            if key == "window_days":
                changes["window_s"] = None if value is None else float(value) * DAY
            else:
                changes[key] = None if value is None else int(value)
        rules[override.kind] = replace(rules[override.kind], **changes)
    return rules


def severity_of(kind: str, rules: Mapping[str, Rule]) -> str:
    return rules[kind].severity if kind in rules else "info"


@dataclass(frozen=True)
class Verdict:
    state: str
    since: Optional[float]  # wall time of the event that moved it there (None: never anything)
    since_seq: int
    reason: str
    last_check_seq: int = 0  # the latest check_passed, for a release without --force


def judge(events: Sequence[StoredEvent], rules: Mapping[str, Rule], now: Optional[float] = None) -> Verdict:
    """The state these events (in any order; read by seq) put a node or GPU in."""
    verdict = Verdict(HEALTHY, None, 0, "")
    counted: dict[str, list[StoredEvent]] = {}
    latest = 0.0
    for event in sorted(events, key=lambda e: e.seq):
        latest = max(latest, event.at)
        if event.kind == RELEASED:
            counted, verdict = {}, Verdict(HEALTHY, event.at, event.seq, f"released: {event.evidence}".rstrip(": "))
        elif event.kind == CHECK_PASSED:
            if verdict.state == SUSPECT:
                counted, verdict = {}, Verdict(HEALTHY, event.at, event.seq, "a check passed")
            verdict = replace(verdict, last_check_seq=event.seq)
        elif event.kind in rules:
            rule = rules[event.kind]
            kept = [e for e in counted.get(rule.kind, []) if _in_window(e, rule, latest)] + [event]
            counted[rule.kind] = kept
            verdict = _step(verdict, rule, event, kept)
    if verdict.state == SUSPECT and not _still_suspect(counted, rules, max(latest, now or 0.0)):
        return Verdict(HEALTHY, verdict.since, verdict.since_seq, "", verdict.last_check_seq)
    return verdict


def _still_suspect(counted: Mapping[str, list[StoredEvent]], rules: Mapping[str, Rule], horizon: float) -> bool:
    """Whether some kind still has its suspect_after events within its window at `horizon`."""
    for kind, kept in counted.items():
        rule = rules[kind]
        recent = [e for e in kept if _in_window(e, rule, horizon)]
        if rule.suspect_after is not None and len(recent) >= rule.suspect_after:
            return True
    return False


def _in_window(event: StoredEvent, rule: Rule, latest: float) -> bool:
    return rule.window_s is None or latest - event.at <= rule.window_s


def _step(verdict: Verdict, rule: Rule, event: StoredEvent, kept: Sequence[StoredEvent]) -> Verdict:
    if verdict.state == QUARANTINED:
        return verdict
    count = len(kept)
    reason = _reason(rule, event, count)
    if rule.quarantine_after is not None and count >= rule.quarantine_after:
        if all(e.source == JOB for e in kept):  # the job's side alone: a second source must see it too
            reason += JOB_ONLY
            return verdict if verdict.state == SUSPECT else Verdict(SUSPECT, event.at, event.seq, reason,
                                                                    verdict.last_check_seq)
        return Verdict(QUARANTINED, event.at, event.seq, reason, verdict.last_check_seq)
    if verdict.state == HEALTHY and rule.suspect_after is not None and count >= rule.suspect_after:
        return Verdict(SUSPECT, event.at, event.seq, reason, verdict.last_check_seq)
    return verdict


def _reason(rule: Rule, event: StoredEvent, count: int) -> str:
    times = f" ({count} times)" if count > 1 else ""
    where = f" on {event.gpu}" if event.gpu else ""
    evidence = f": {event.evidence}" if event.evidence else ""
    return f"{rule.kind}{times}{where}{evidence} [{event.source}]"


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The most serious of several verdicts (a node and its GPUs); the earliest of equals."""
    ranked = sorted(verdicts, key=lambda v: (-STATES.index(v.state), v.since_seq))
    return ranked[0] if ranked else Verdict(HEALTHY, None, 0, "")


def readme_table() -> str:
    """The README's table of the rules (tests/unit/test_health_rules.py keeps the two equal)."""
    def count(value: Optional[int]) -> str:
        return "never" if value is None else str(value)

    rows = ["| rule | what moves the node | suspect after | quarantined after | window |", "|---|---|---|---|---|"]
    for rule in RULES:
        window = "since the last release" if rule.window_s is None else f"{rule.window_s / DAY:g} d"
        rows.append(f"| `{rule.kind}` | {rule.summary} | {count(rule.suspect_after)} | "
                    f"{count(rule.quarantine_after)} | {window} |")
    return "\n".join(rows)
