"""The passive health watch of a detached run, on the controller's side (issue 36). The keepers
sample their node every 30 s (node/node_health.py); the supervisor keeps each node's newest sample
in supervisor.json (its `nodes.<host>.health`); whenever a command reads the run's state back
(`status`, `attach`, `logs`, `stop`: supervision.refresh_record), the samples are parsed here with
the attached watch's parsers (health/watch.py) and recorded, each event once per run.

A sample carries the node's first nvidia-smi text beside its newest: the counters are compared
with the run's start (what went up during the run), as the attached watch compares sample with
sample. Xid lines are recorded without the kernel's timestamp, so the same line read again is the
same event. The samples come from the job's side (issue 47): only the run's own hosts, marked job-side,
which alone never quarantine a node (health/rules.py)."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Mapping, Optional, Sequence

from clusterctl.health import watch
from clusterctl.health.events import Event, GpuId
from clusterctl.models import Inventory

_STAMP = re.compile(r"^\[[^\]]*\]\s*")


def sample_events(host: str, sample: Mapping) -> tuple[list[Event], list[GpuId]]:
    """The events of one node's sample (node_health.sample's texts), and the GPUs it reported."""
    newest = _gpus(sample.get("smi"))
    first = _gpus(sample.get("smi_first")) or newest
    events = watch.sample_events(host, first) + watch.sample_events(host, newest, first)
    xids = [replace(xid, line=_STAMP.sub("", xid.line)) for xid in watch.parse_xid_lines(str(sample.get("kernel") or ""))]
    events += watch.xid_events(host, xids, newest)
    health = watch.parse_dcgm_health(str(sample.get("dcgm") or ""))
    if health.unreadable is None:
        events += watch.dcgm_events(host, health, newest)
    return _distinct(events), [s.gpu for s in newest]


def _gpus(text) -> tuple:
    reading = watch.parse_smi_csv(str(text or ""))
    return reading.gpus if reading.unreadable is None else ()


def _distinct(events: list[Event]) -> list[Event]:
    seen, kept = set(), []
    for event in events:
        key = (event.kind, event.gpu, event.evidence)
        if key not in seen:
            seen.add(key)
            kept.append(event)
    return kept


def record_samples(store, inventory: Inventory, run_id: str, state: Mapping, hosts: Sequence[str]) -> Optional[str]:
    """The events of the run's nodes' samples in a supervisor state, recorded once per run (`store`: the
    State); None, or why the record was not updated. The state is the job's side (its nodes can write
    it): only `hosts` (the controller's record of the run) are read, their events marked job-side
    (health/fleet.job_side), and no other host's GPUs are taken from it."""
    from clusterctl.health.fleet import job_side, record_events

    events, gpus = [], {}
    nodes = state.get("nodes") if isinstance(state.get("nodes"), dict) else {}
    for host in hosts:
        node = nodes.get(host)
        sample = node.get("health") if isinstance(node, dict) else None
        if not isinstance(sample, dict):
            continue
        found, ids = sample_events(str(host), sample)
        at = sample.get("at") if isinstance(sample.get("at"), (int, float)) else None
        events += [replace(event, run_id=run_id, at=at) for event in found]
        if ids:
            gpus[str(host)] = ids
    if not events and not gpus:
        return None
    return record_events(store.health_db, inventory, job_side(events, hosts), gpus, once=True)
