"""What a command returns: `Outcome`. Below the commands (which build it) and cli.py (which maps it to an
exit code), so that neither imports the other."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from clusterctl.models import HostResult, HostStatus


@dataclass
class Outcome:
    """What a command returns: the JSON document (always has "ok") and how it ended."""

    document: dict
    unreachable: bool = False
    interrupted: bool = False
    bad_input: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.document.get("ok"))


def hosts_document(results: Mapping[str, HostResult], **extra) -> dict:
    """The CONTRACT.md shape shared by up/exec/down/status: {"ok", "hosts": {name: {...}}}."""
    hosts = {}
    for name, result in results.items():
        entry = {"status": result.status.value, "detail": result.detail, "duration_s": round(result.duration, 3)}
        entry.update({k: v for k, v in result.data.items() if _jsonable(v)})
        if result.log_path:
            entry["log"] = result.log_path
        hosts[name] = entry
    ok = all(r.succeeded for r in results.values())
    return {"ok": ok, "hosts": hosts, **extra}


def any_unreachable(results: Mapping[str, HostResult]) -> bool:
    return any(r.status is HostStatus.UNREACHABLE for r in results.values())


def _jsonable(value) -> bool:
    return isinstance(value, (str, int, float, bool, list, dict, type(None)))
