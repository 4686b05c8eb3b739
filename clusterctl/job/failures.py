"""Which node's failure is the run's first failure, and why: the same answer whether the attached
controller watched the run (job/runner.py) or the cluster's supervisor did (job/supervision.py)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from clusterctl.models import Inventory


@dataclass(frozen=True)
class Ended:
    """A node whose torchrun failed, or that was lost: when, and the tail of its log (torchrun's agent.log)."""
    host: str
    at: float
    lost: bool
    exit_code: Optional[int]
    tail: str


def first_failure(inventory: Inventory, failed: list[Ended], poll_s: float, lost_after_s: float,
                  exit_codes: Optional[dict[str, Optional[int]]] = None) -> dict:
    """The run's first failure as the run record and `--json` carry it: host, rank, exit code, the
    log's tail and the diagnosis. Nodes that ended within half a poll of the earliest are candidates
    (polls see them at once); a lost node among them is named as lost; a candidate whose log only
    shows a peer gone (connection closed) hands the naming over to the others. `exit_codes`: every
    node's (a diagnosis may name a node that did not fail); default, the failed ones'."""
    from clusterctl.diagnose import diagnose_text

    earliest = min(n.at for n in failed)
    candidates = [n for n in failed if n.at <= earliest + poll_s / 2]
    lost = [n for n in candidates if n.lost]
    if lost:
        node = lost[0]
        return {"host": node.host, "rank": None, "diagnosis": [{
            "cause": "node_unreachable", "host": node.host, "rank": None,
            "evidence": f"{node.host} stopped answering for more than {lost_after_s:g}s during the run",
            "fix": f"check {node.host}'s network and power; clusterctl stopped the other nodes, "
                   "and the node stops its own ranks when its lease expires"}]}
    if all(lost_a_peer(n.tail) for n in candidates):
        candidates = failed  # the first to exit only saw a peer crash: the crash is elsewhere
    by_host = {n.host: n for n in failed}
    codes = exit_codes if exit_codes is not None else {n.host: n.exit_code for n in failed}
    findings = [replace(f, host=inventory.host_named_by(f.host, node.host))
                for node in candidates for f in diagnose_text(node.tail, host=node.host)]
    order = {node.host: (lost_a_peer(node.tail), node.at) for node in candidates}
    findings.sort(key=lambda f: (-f.score, order.get(f.host, (True, 0))))
    top = findings[0] if findings else None
    host = top.host if top and top.host in codes else candidates[0].host
    tail = by_host[host].tail if host in by_host else ""
    return {"host": host, "rank": top.rank if top else None, "exit_code": codes.get(host),
            "log_tail": tail.splitlines()[-15:], "diagnosis": [f.to_json() for f in findings[:5]]}


def lost_a_peer(log_tail: str) -> bool:
    """The log shows a rank that failed because a peer went away (gloo/NCCL connection closed)."""
    from clusterctl.diagnose.rules import PEER_LOST_PATTERNS

    return any(pattern.search(log_tail) for pattern in PEER_LOST_PATTERNS)
