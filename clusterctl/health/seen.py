"""Events from what clusterctl already sees (issue #36): the preflight's verdicts (`up`, `check`,
`health check`) and the end of a run (its first failure's diagnosis, its lost nodes). Pure: a
command's output in, events out; `recording.py` writes them.

A failed run blames its first failure's host only where the diagnosis names a cause that is the
node's (a GPU, its memory, its driver or disk), never the job's own (an exception, a CUDA OOM,
a bad argument): a buggy job must not quarantine a fleet."""
from __future__ import annotations

from typing import Iterable, Mapping

from clusterctl.health.events import Event

# diagnosis causes (diagnose/rules.py) that are the node's fault, not the job's
NODE_CAUSES = frozenset({"gpu_xid", "ecc_error", "container_lost_gpu", "fabricmanager", "driver_too_old",
                         "disk_full", "docker_no_gpu_runtime", "nccl_timeout_slow_rank"})
LOST = "node_unreachable"


def check_events(checks: Iterable[Mapping], source: str, hosts: Iterable[str]) -> list[Event]:
    """Per host of `hosts`: its failed checks -> one preflight_failed (evidence: each `check: detail`);
    none failed -> check_passed. `checks`: CheckResult.to_json() documents (host None: the cluster's,
    which judge no one node)."""
    events = []
    for host in hosts:
        mine = [c for c in checks if c.get("host") == host]
        if not mine:
            continue
        failed = [c for c in mine if c.get("status") == "fail"]
        if failed:
            evidence = "; ".join(f"{c.get('check')}: {c.get('detail')}" for c in failed)[:800]
            events.append(Event(host, "preflight_failed", source, evidence=evidence,
                                cause=",".join(str(c.get("check")) for c in failed)))
        else:
            events.append(Event(host, "check_passed", source, evidence=f"{len(mine)} checks pass"))
    return events


def run_events(record: Mapping) -> list[Event]:
    """What a run's final record says about its nodes: each node lost -> node_lost; the first
    failure's host, where the diagnosis blames the node -> run_blamed. A stopped run blames no one."""
    if record.get("stopped") or record.get("state") == "stopped" or record.get("exit_code") in (0, None):
        return []
    run_id = record.get("run_id")
    first = record.get("first_failure") if isinstance(record.get("first_failure"), dict) else {}
    top = _top_finding(first)
    events = []
    nodes = record.get("nodes") if isinstance(record.get("nodes"), dict) else {}
    lost = [host for host, node in nodes.items() if isinstance(node, dict) and node.get("lost")]
    if top.get("cause") == LOST and first.get("host") and first["host"] not in lost:
        lost.insert(0, first["host"])
    for host in lost:
        evidence = top.get("evidence") if host == first.get("host") else f"{host} was lost during run {run_id}"
        events.append(Event(host, "node_lost", "run", evidence=str(evidence or "")[:800], cause=LOST, run_id=run_id))
    host = top.get("host") or first.get("host")
    if top.get("cause") in NODE_CAUSES and host and host not in lost:
        events.append(Event(host, "run_blamed", "run", evidence=str(top.get("evidence") or "")[:800],
                            cause=str(top["cause"]), run_id=run_id))
    return events


def _top_finding(first: Mapping) -> dict:
    diagnosis = first.get("diagnosis") if isinstance(first.get("diagnosis"), list) else []
    top = diagnosis[0] if diagnosis and isinstance(diagnosis[0], dict) else {}
    return dict(top)


def pair_events(document: Mapping) -> list[Event]:
    """`nccl-test --pairs`: the slowest node where it stands out (nccltest/plan.py slowest_node)."""
    slow = document.get("slowest") if isinstance(document.get("slowest"), dict) else {}
    if not slow.get("outlier") or not slow.get("host"):
        return []
    return [Event(str(slow["host"]), "nccl_outlier", "nccl-test",
                  evidence=f"median pair busbw {slow.get('score_gbps')} GB/s, others {slow.get('others_median_gbps')}")]
