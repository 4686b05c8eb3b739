"""What the Python API returns: values, partial failure as data (as Fabric's GroupResult)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional


@dataclass(frozen=True)
class HostOutcome:
    """One host's part of an operation: status is ok | changed | failed | unreachable | skipped."""

    name: str
    status: str
    detail: str = ""
    exit_code: Optional[int] = None
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "changed", "skipped")


@dataclass(frozen=True)
class ClusterResult:
    """Every host's outcome of one operation (`up`, `down`, `exec`, `stop`), and the JSON document
    `clusterctl ... --json` prints for it."""

    ok: bool
    hosts: Mapping[str, HostOutcome]
    document: Mapping = field(default_factory=dict, repr=False)
    unreachable: bool = False

    def __getitem__(self, host: str) -> HostOutcome:
        return self.hosts[host]

    @property
    def failed(self) -> dict[str, HostOutcome]:
        return {name: outcome for name, outcome in self.hosts.items() if not outcome.ok}


def result_of(outcome, results: Optional[Mapping] = None) -> ClusterResult:
    """A command flow's Outcome (and, where the flow gives them, its HostResults with their output)."""
    hosts = {}
    for name, entry in (outcome.document.get("hosts") or {}).items():
        full = (results or {}).get(name)
        hosts[name] = HostOutcome(name, entry.get("status", ""), entry.get("detail", ""),
                                  entry.get("exit_code") if full is None else full.exit_code,
                                  entry.get("stdout", "") if full is None else full.stdout,
                                  entry.get("stderr", "") if full is None else full.stderr)
    return ClusterResult(outcome.ok, hosts, dict(outcome.document), outcome.unreachable)
