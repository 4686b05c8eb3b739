"""What the run report (issue 41) is made of: the run record, the collected bundle it points at (if
any: collect/gather.py's layout), each rank's log there, the nodes' metrics and the notifications
sent. Read from disk only: the report never reaches the cluster."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from clusterctl.errors import StateError
from clusterctl.observe.metrics_file import NodeMetrics, node_metrics


@dataclass(frozen=True)
class LogLink:
    host: str
    name: str  # rank 3, agent
    href: Optional[str]  # relative to the report; None when the bundle does not hold it


@dataclass(frozen=True)
class RunEvent:
    """An event of the fleet's health record about this run (a node lost, left out, a straggler...)."""
    host: str
    at: float
    kind: str
    evidence: str


@dataclass(frozen=True)
class ReportInput:
    run_id: str
    record: dict
    bundle: Optional[Path]
    metrics: tuple[NodeMetrics, ...]
    logs: tuple[LogLink, ...]
    notify_log: tuple[str, ...]
    output: Path
    events: tuple[RunEvent, ...] = ()


def load(state, given: Optional[str], output: Optional[Path]) -> ReportInput:
    """`given`: a run id (default: the last run) or a directory from collect-logs."""
    from clusterctl.ground.records import resolve

    if given and Path(given).is_dir():
        bundle = Path(given).resolve()
        record = _bundle_record(bundle) or {}
        run_id = str(record.get("run_id") or _manifest_run_id(bundle) or bundle.name)
        if not record.get("topology"):
            record = {**_state_record(state, run_id), **record}
        if not record:
            raise StateError(f"{bundle} holds no run record (run.json) and this directory has none of run {run_id}",
                             where=str(bundle), fix="give a directory made by `clusterctl collect-logs`, or a run id")
    else:
        run_id, record = resolve(state, given)
        default = Path("logs") / run_id  # collect-logs' default destination
        bundle = default.resolve() if (default / "run.json").is_file() or (default / "manifest.json").is_file() else None
    record = {**record, "run_id": record.get("run_id") or run_id}
    out = (output or (bundle / "report.html" if bundle else Path(f"report-{run_id}.html"))).resolve()
    hosts = [str(n.get("host")) for n in record.get("topology") or [] if isinstance(n, dict) and n.get("host")]
    hosts += [str(h) for a in record.get("attempts") or [] if isinstance(a, dict) for h in a.get("hosts") or []
              if str(h) not in hosts]  # a host left out by a relaunch ran the earlier attempts
    return ReportInput(run_id, record, bundle, tuple(node_metrics(bundle, hosts, run_id)),
                       tuple(log_links(record, bundle, out.parent)), tuple(_notify_lines(state, run_id)), out,
                       tuple(run_events(state, str(record.get("cluster") or ""), run_id)))


def log_links(record: dict, bundle: Optional[Path], report_dir: Path) -> list[LogLink]:
    """Each node's agent log and each rank's log, linked relative to the report where the bundle has it."""
    links = []
    for node in record.get("topology") or []:
        if not isinstance(node, dict) or not node.get("host"):
            continue
        host, ranks = str(node["host"]), node.get("ranks") or []
        names = [("agent", f"{host}-agent.log")]
        if len(ranks) == 2 and all(isinstance(r, int) for r in ranks):
            names += [(f"rank {r}", f"{host}-r{r}.log") for r in range(ranks[0], ranks[1] + 1)]
        for name, file_name in names:
            path = bundle / host / "logs" / file_name if bundle else None
            links.append(LogLink(host, name, bundle_href(path, bundle, report_dir) if path is not None else None))
    return links


def bundle_href(path: Path, bundle: Path, report_dir: Path) -> Optional[str]:
    """The one way the report links a file: a relative path to a regular file inside the bundle, each
    segment percent-encoded and led by `./` or `../`, so that no name (a host called `javascript:...`,
    `../../etc`) becomes a scheme or a way out; None (shown as text, not a link) for anything else."""
    from urllib.parse import quote

    try:
        inside = path.resolve().relative_to(bundle.resolve())
    except (OSError, ValueError):
        return None
    if not inside.parts or path.is_symlink() or not path.is_file():
        return None
    relative = os.path.relpath(bundle.resolve() / inside, report_dir.resolve()).split(os.sep)
    href = "/".join(segment if segment == ".." else quote(segment, safe="") for segment in relative)
    return href if href.startswith("../") else "./" + href


def _bundle_record(bundle: Path) -> Optional[dict]:
    try:
        record = json.loads((bundle / "run.json").read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _manifest_run_id(bundle: Path) -> Optional[str]:
    try:
        manifest = json.loads((bundle / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return manifest.get("run_id") if isinstance(manifest, dict) else None


def _state_record(state, run_id: str) -> dict:
    from clusterctl.ground.records import RunStore

    try:
        return RunStore(state).read(run_id).to_json()
    except (OSError, ValueError):
        return {}


def _notify_lines(state, run_id: str) -> list[str]:
    from clusterctl.ground.records import RunStore
    from clusterctl.observe.notify import LOG_NAME

    try:
        return (RunStore(state).runs / run_id / LOG_NAME).read_text(errors="replace").splitlines()[-200:]
    except OSError:
        return []


def run_events(state, cluster: str, run_id: str) -> list[RunEvent]:
    """This run's events in the health record of this directory, if it has one (read only)."""
    from clusterctl.errors import ClusterctlError
    from clusterctl.health.store import HealthStore

    path = getattr(state, "health_db", None)
    if not cluster or path is None or not Path(path).is_file():
        return []
    try:
        with HealthStore(Path(path)) as store:
            stored = store.events(cluster)
    except (ClusterctlError, OSError):  # a record that cannot be read: the report goes without its events
        return []
    return [RunEvent(e.host, e.at, e.kind, e.evidence) for e in stored if e.run_id == run_id]
