"""What a notification says (issue 41), built from a run's record: the event, the run id, the cluster,
its hosts, how long it ran, its state and, where there is one, the diagnosis (cause, host, rank, fix).
Two shapes of the same message: the generic JSON document, and Slack's `text` + `blocks`. Pure."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from clusterctl.documents.commands import Notification, NotificationDiagnosis as Diagnosis
from clusterctl.documents.convert import as_document

EVENTS = ("end", "failure", "relaunch", "straggler", "quarantine")
SCHEMA = "clusterctl.notification/1"


@dataclass(frozen=True)
class Message:
    event: str  # one of EVENTS
    run_id: str
    cluster: str
    hosts: tuple[str, ...]
    state: str  # running | succeeded | failed | stopped
    duration_s: Optional[float]
    summary: str  # one line a person reads first
    diagnosis: Optional[Diagnosis] = None
    detail: dict = field(default_factory=dict)  # the event's own facts (the straggler, the host quarantined...)

    @property
    def schema(self) -> str:
        return SCHEMA


def diagnosis_of(first_failure: Optional[dict]) -> Optional[Diagnosis]:
    """The run record's `first_failure` -> its leading diagnosis (None without a failure)."""
    if not isinstance(first_failure, dict):
        return None
    top = next(iter(first_failure.get("diagnosis") or []), None) or {}
    return Diagnosis(cause=str(top.get("cause") or "unknown"), host=first_failure.get("host"),
                     rank=first_failure.get("rank"), fix=str(top.get("fix") or ""),
                     evidence=str(top.get("evidence") or "")[:500], confidence=top.get("confidence"))


def state_of(record: dict) -> str:
    if record.get("state") == "running" or record.get("relaunching"):
        return "running"
    if record.get("stopped") or record.get("state") == "stopped":
        return "stopped"
    return "succeeded" if record.get("exit_code") == 0 else "failed"


def hosts_of(record: dict) -> tuple[str, ...]:
    named = [n.get("host") for n in record.get("topology") or [] if isinstance(n, dict)]
    return tuple(h for h in named if h) or tuple(str(h.get("name", h)) if isinstance(h, dict) else str(h)
                                                 for h in record.get("hosts") or [])


def started_of(record: dict) -> Optional[float]:
    """When the run started: its first attempt's start (a relaunch rewrites the record's `started`)."""
    starts = [a.get("started") for a in record.get("attempts") or [] if isinstance(a, dict)] + [record.get("started")]
    numbers = [s for s in starts if isinstance(s, (int, float)) and not isinstance(s, bool)]
    return min(numbers) if numbers else None


def duration_of(record: dict, now: float) -> Optional[float]:
    started = started_of(record)
    if started is None:
        return None
    ended = record.get("ended") if state_of(record) != "running" else None
    return round((ended if isinstance(ended, (int, float)) else now) - started, 1)


def message(event: str, record: dict, now: float, summary: str = "", detail: Optional[dict] = None,
            failure: Optional[dict] = None) -> Message:
    """The message of `event` about the run `record` says; `failure`: the first failure it is about
    (default: the record's)."""
    run_id, cluster = str(record.get("run_id") or "?"), str(record.get("cluster") or "?")
    state = state_of(record)
    diagnosis = diagnosis_of(failure if failure is not None else record.get("first_failure"))
    if event == "end" and state == "succeeded":
        diagnosis = None
    return Message(event, run_id, cluster, hosts_of(record), state, duration_of(record, now),
                   summary or default_summary(event, run_id, cluster, state, diagnosis), diagnosis, dict(detail or {}))


def default_summary(event: str, run_id: str, cluster: str, state: str, diagnosis: Optional[Diagnosis]) -> str:
    where = f"run {run_id} on {cluster}"
    if event == "end":
        return f"{where} ended: {state}"
    if event == "failure" and diagnosis is not None:
        rank = f" rank {diagnosis.rank}" if diagnosis.rank is not None else ""
        return f"{where} failed: {diagnosis.cause} on {diagnosis.host or '?'}{rank}"
    return f"{where}: {event}"


def json_payload(msg: Message) -> dict:
    """The generic JSON message (documents' Notification, docs/schemas/notification.json); no diagnosis key without one."""
    document = as_document(Notification, msg)
    if msg.diagnosis is None:
        document.pop("diagnosis")
    return document


def slack_payload(msg: Message) -> dict:
    """Slack's incoming-webhook shape: `text` (the notification's line) and `blocks` (what is shown)."""
    facts = [f"*run* `{msg.run_id}`", f"*cluster* {msg.cluster}", f"*state* {msg.state}",
             f"*hosts* {', '.join(msg.hosts) or '-'}", f"*duration* {_duration(msg.duration_s)}"]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": f"clusterctl: {msg.event}"[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _escape(msg.summary)}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": _escape(f)} for f in facts]},
    ]
    if msg.diagnosis is not None:
        d = msg.diagnosis
        rank = f", rank {d.rank}" if d.rank is not None else ""
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _escape(
            f"*cause* {d.cause} on {d.host or '?'}{rank}\n*fix* {d.fix or '-'}")[:3000]}})
    return {"text": _escape(msg.summary), "blocks": blocks}


def payload(msg: Message, shape: str) -> dict:
    return slack_payload(msg) if shape == "slack" else json_payload(msg)


def _duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _escape(text: str) -> str:
    """Slack's three control characters in mrkdwn text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
