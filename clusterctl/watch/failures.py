"""Which node's failure is the run's first failure, and why: the same answer whether the attached
controller watched the run (run/runner.py, on SSH nodes or a Slurm allocation) or the cluster's
supervisor did (run/supervision.py).

The first failure is the process that failed first by its own fault: each failed node's torchrun
names the worker it saw fail first (watch/torchrun_report.py); a worker that only saw a peer go away
(connection closed, a collective that timed out waiting) or that was stopped (SIGTERM, after
another node failed) is a survivor, named only when no node shows a failure of its own. Among own
failures the earliest by torchrun's own clock wins (to the microsecond), not the order in which the
controller's polls happened to notice the nodes end. The global rank is the node's first rank in
the plan plus the local rank."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Optional

from clusterctl.watch.torchrun_report import FailedProcess, first_failed_process
from clusterctl.models import Inventory

STOPPED_CODES = (-15, -1)  # SIGTERM, SIGHUP: torchrun (or clusterctl) ended the worker, it did not fail
_RANK_PREFIX = re.compile(r"^\[(?:[^\]\s]+ )?(?:rank)?(\d+)\]:")  # `[rank3]:` (torch), `[node2 rank3]:` (the agent log)
# a worker that waited on a peer: the collective timed out, or the store/peer went away
WAITED_PATTERNS = tuple(re.compile(p) for p in (
    r"Watchdog caught collective operation timeout", r"ProcessGroupNCCL.*[Tt]imeout", r"Socket Timeout",
    r"Timed out waiting \d+ ?ms for (?:send|recv) operation",  # gloo's collective timeout
    r"store.*(?:timed out|Timeout)", r"TCPStore.*(?:Connection reset|Broken pipe|failed to recv)",
))


@dataclass(frozen=True)
class Ended:
    """A node whose torchrun failed, or that was lost: when, and the tail of its log (torchrun's agent.log)."""
    host: str
    at: float
    lost: bool
    exit_code: Optional[int]
    tail: str


@dataclass(frozen=True)
class Culprit:
    """One failed node's own account: the process its torchrun saw fail first, and whether that
    process failed by its own fault."""
    node: Ended
    process: Optional[FailedProcess]
    own_fault: bool

    def rank(self, first_ranks: dict[str, int]) -> Optional[int]:
        if self.process is None:  # no report of torchrun's: the rank whose lines the log shows, if one alone
            return _sole_rank(self.node.tail)
        if self.node.host in first_ranks:
            return first_ranks[self.node.host] + self.process.local_rank
        return self.process.rank

    def order(self) -> tuple:
        """Own failures first, then the earliest by torchrun's clock (the controller's when it has none)."""
        at = self.process.at if self.process is not None and self.process.at is not None else None
        return (not self.own_fault, at is None, at if at is not None else self.node.at)


def first_failure(inventory: Inventory, failed: list[Ended], poll_s: float, lost_after_s: float,
                  exit_codes: Optional[dict[str, Optional[int]]] = None,
                  first_ranks: Optional[dict[str, int]] = None) -> dict:
    """The run's first failure as the run record and `--json` carry it: host, rank (global), the
    node's exit code and the failed rank's, the log's tail and the diagnosis. A node lost among
    the earliest to end is named as lost. `exit_codes`: every node's (a diagnosis may name a node
    that did not fail); default, the failed ones'. `first_ranks`: each host's first global rank
    (the plan's); without it torchrun's own rank numbers are used."""
    earliest = min(n.at for n in failed)
    lost = [n for n in failed if n.lost and n.at <= earliest + poll_s / 2]
    if lost:
        return _lost(lost[0], lost_after_s)
    codes = exit_codes if exit_codes is not None else {n.host: n.exit_code for n in failed}
    culprits = sorted((account(n) for n in failed), key=Culprit.order)
    if culprits[0].own_fault:
        return _named(inventory, culprits[0], culprits, codes, first_ranks or {})
    return _by_diagnosis(inventory, failed, poll_s, codes, first_ranks or {})


def account(node: Ended) -> Culprit:
    process = first_failed_process(node.tail)
    if process is None:
        return Culprit(node, None, own_fault=not lost_a_peer(node.tail) and not waited(node.tail))
    if process.exit_code in STOPPED_CODES:
        return Culprit(node, process, own_fault=False)
    lines = rank_lines(node.tail, process.rank)
    return Culprit(node, process, own_fault=not lost_a_peer(lines) and not waited(lines))


def rank_lines(tail: str, rank: Optional[int]) -> str:
    """The lines a rank printed (`[rank3]: ...`, torch's prefix), or the whole tail where no line carries one."""
    if rank is None:
        return tail
    own = [line for line in tail.splitlines() if (m := _RANK_PREFIX.match(line)) and int(m.group(1)) == rank]
    return "\n".join(own) if own else tail


def _named(inventory: Inventory, culprit: Culprit, culprits: list[Culprit], codes: dict,
           first_ranks: dict[str, int]) -> dict:
    from clusterctl.diagnose import diagnose_text

    host, rank = culprit.node.host, culprit.rank(first_ranks)
    own = [replace(f, host=host, rank=rank) for f in diagnose_text(culprit.node.tail, host=host)]
    others = [replace(f, host=inventory.host_named_by(f.host, c.node.host))
              for c in culprits[1:] for f in diagnose_text(c.node.tail, host=c.node.host)]
    own.sort(key=lambda f: -f.score)
    document = {"host": host, "rank": rank, "exit_code": codes.get(host),
                "log_tail": culprit.node.tail.splitlines()[-15:], "diagnosis": [f.to_json() for f in (own + others)[:5]]}
    if culprit.process is not None:
        document["rank_exit_code"] = culprit.process.exit_code
        if culprit.process.signal_name:
            document["signal"] = culprit.process.signal_name
    return document


def _by_diagnosis(inventory: Inventory, failed: list[Ended], poll_s: float, codes: dict,
                  first_ranks: dict[str, int]) -> dict:
    """No node shows a failure of its own (every worker saw a peer go, or waited on one): the
    strongest diagnosis among the earliest decides (a collective timeout names the slow rank)."""
    from clusterctl.diagnose import diagnose_text

    earliest = min(n.at for n in failed)
    candidates = [n for n in failed if n.at <= earliest + poll_s / 2]
    if all(lost_a_peer(n.tail) for n in candidates):
        candidates = failed  # the first to exit only saw a peer crash: the crash is elsewhere
    by_host = {n.host: n for n in failed}
    findings = [replace(f, host=inventory.host_named_by(f.host, node.host))
                for node in candidates for f in diagnose_text(node.tail, host=node.host)]
    order = {node.host: (lost_a_peer(node.tail), node.at) for node in candidates}
    findings.sort(key=lambda f: (-f.score, order.get(f.host, (True, 0))))
    top = findings[0] if findings else None
    host = top.host if top and top.host in codes else candidates[0].host
    tail = by_host[host].tail if host in by_host else ""
    rank = top.rank if top and top.rank is not None else _sole_rank(tail)
    return {"host": host, "rank": rank, "exit_code": codes.get(host),
            "log_tail": tail.splitlines()[-15:], "diagnosis": [f.to_json() for f in findings[:5]]}


def _sole_rank(tail: str) -> Optional[int]:
    """The rank of every rank-prefixed line of a node's log, when one rank alone printed (a node of
    one rank: `job.launcher: none`); else None."""
    ranks = {int(m.group(1)) for line in tail.splitlines() if (m := _RANK_PREFIX.match(line))}
    return ranks.pop() if len(ranks) == 1 else None


def _lost(node: Ended, lost_after_s: float) -> dict:
    return {"host": node.host, "rank": None, "diagnosis": [{
        "cause": "node_unreachable", "host": node.host, "rank": None,
        "evidence": f"{node.host} stopped answering for more than {lost_after_s:g}s during the run",
        "fix": f"check {node.host}'s network and power; clusterctl stopped the other nodes, "
               "and the node stops its own ranks when its lease expires"}]}


def lost_a_peer(log_tail: str) -> bool:
    """The log shows a rank that failed because a peer went away (gloo/NCCL connection closed)."""
    from clusterctl.diagnose.rules import PEER_LOST_PATTERNS

    return any(pattern.search(log_tail) for pattern in PEER_LOST_PATTERNS)


def waited(log_tail: str) -> bool:
    """The log shows a rank that failed waiting on a peer (a collective or the store timed out)."""
    return any(pattern.search(log_tail) for pattern in WAITED_PATTERNS)


def first_ranks_of(topology: list) -> dict[str, int]:
    """Each host's first global rank, from a plan's nodes or a run record's "topology" list."""
    ranks = {}
    for node in topology or []:
        if isinstance(node, dict) and isinstance(node.get("ranks"), list) and node["ranks"]:
            ranks[str(node.get("host"))] = int(node["ranks"][0])
        elif hasattr(node, "ranks") and hasattr(node, "host"):
            ranks[node.host.name] = node.ranks.start
    return ranks
