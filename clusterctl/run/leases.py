"""A run takes its GPU leases on every node before any rank starts (issue 48; node/leases.py holds them):
all of them or none, refused at once naming the holder, or with `run --wait` queued in arrival order
until the holders end. A relaunch (healing) takes its nodes' leases the same way, under the same run id.

Waiting: a ticket on each node, stamped with the clock of the waiter's first node (by name) and the run
id, so that every node orders two waiters the same way (a total order: no two waiters each wait for the
other); the ticket is rewritten each poll (a waiter killed -9 leaves a ticket that lapses) and removed
on Ctrl-C. The position printed is the longest queue ahead of this run on any of its nodes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

from clusterctl.errors import StateError
from clusterctl.executor import for_each_host, ticks
from clusterctl.models import HostResult, HostStatus
from clusterctl.plan import leasing

POLL_S = 2.0


@dataclass
class Leases:
    """The leases a run holds (host -> keys), to release as it ends."""

    inventory: object
    connections: object
    run_id: str
    keys: dict[str, list[str]] = field(default_factory=dict)

    def release(self) -> dict[str, leasing.Answer]:
        return release(self.inventory, self.connections, list(self.keys), self.run_id)


def release(inventory, connections, hosts: list[str], run_id: str) -> dict[str, leasing.Answer]:
    """The leases (and a waiter's tickets) of `run_id` on `hosts`, removed: its end, `stop`, Ctrl-C."""
    return _on_nodes(inventory, connections, hosts, "release", run_id=run_id)


def _on_nodes(inventory, connections, names, op: str, per_host: Optional[Callable[[str], dict]] = None,
              **args) -> dict[str, leasing.Answer]:
    hosts = [h for h in inventory.hosts if h.name in names]

    def action(transport, host) -> HostResult:
        extra = per_host(host.name) if per_host else {}
        result = transport.run(leasing.lease_command(inventory, host, op, **args, **extra))
        answer = leasing.parse(host.name, result.stdout, result.stderr, result.exit_code)
        return HostResult(host.name, HostStatus.OK if answer.ok else HostStatus.FAILED, answer.error,
                          data={"answer": answer})

    results = for_each_host(hosts, action, connections)
    return {name: r.data.get("answer") or leasing.Answer(name, None, f"{name}: {r.detail or r.status.value}")
            for name, r in results.items()}


def wanted(topology) -> dict[str, list[str]]:
    """Each node's keys in the run: its GPUs, else its rank slots."""
    return {n.host.name: leasing.keys_for(n.gpu_ids, len(n.ranks)) for n in topology.nodes}


def take(inventory, connections, run_id: str, keys: dict[str, list[str]], wait: bool = False,
         say: Callable[[str], None] = lambda text: None) -> Leases:
    """Every node's `keys` for `run_id`; StateError naming the holders unless `wait`."""
    window, me = leasing.window_s(inventory), leasing.operator()
    common = {"run_id": run_id, "operator": me, "window_s": window}
    stamp = None
    try:
        if wait:
            stamp = _queue(inventory, connections, keys, common, None)
        last = ""
        for turn, _left in enumerate(ticks(math.inf, POLL_S)):
            if turn:
                _queue(inventory, connections, keys, common, stamp)  # renews the tickets
            answers = _on_nodes(inventory, connections, list(keys), "take", lambda name: {"keys": keys[name]},
                                **common, **({"stamp": stamp} if stamp is not None else {}))
            _raise_failed(answers)
            for answer in answers.values():
                for note in answer.document.get("notes") or ():
                    say(note)
            if all(a.document["taken"] for a in answers.values()):
                return Leases(inventory, connections, run_id, dict(keys))
            _release_partial(inventory, connections, run_id, answers)
            held = [lease for a in answers.values() for lease in a.document["held"]]
            ahead = max((len(a.document["ahead"]) for a in answers.values()), default=0)
            if not wait:
                holders = sorted({lease["run_id"] for lease in held if lease.get("run_id")})
                stop = " or ".join(f"`clusterctl stop {r}`" for r in holders) or "`clusterctl stop RUN`"
                raise StateError(_refusal(held, answers), where=inventory.name,
                                 fix=f"queue for them with `clusterctl run --wait`, or end the holder ({stop} where it "
                                     f"was started); a lease lapses {window:.0f}s after its run's last beat")
            line = _waiting(held, ahead)
            if line != last:
                say(line)
                last = line
        raise AssertionError("ticks(inf) ended")
    except BaseException:
        if wait:  # Ctrl-C (even while joining), a refusal, a node gone: leave the queue
            _on_nodes(inventory, connections, list(keys), "release", run_id=run_id)
        raise


def _queue(inventory, connections, keys, common, stamp) -> int:
    """This run's ticket on every node: stamped by its first node unless `stamp` is known."""
    first = sorted(keys)[0]
    if stamp is None:
        answer = _on_nodes(inventory, connections, [first], "queue", keys=keys[first], **common)[first]
        _raise_failed({first: answer})
        stamp = int(answer.document["stamp"])
    answers = _on_nodes(inventory, connections, list(keys), "queue", lambda name: {"keys": keys[name]},
                        **common, stamp=stamp)
    _raise_failed(answers)
    return stamp


def _raise_failed(answers: dict[str, leasing.Answer]) -> None:
    failed = [a for a in answers.values() if not a.ok]
    if failed:
        raise StateError("; ".join(a.error for a in failed), where=failed[0].host,
                         fix=failed[0].fix or "see the node's lease directory")


def _release_partial(inventory, connections, run_id, answers) -> None:
    """All or none: what some nodes granted goes back when another refused."""
    granted = [name for name, a in answers.items() if a.document["taken"]]
    if granted:
        _on_nodes(inventory, connections, granted, "release", run_id=run_id)


def _refusal(held: list[dict], answers) -> str:
    if held:
        by_run: dict[str, list[str]] = {}
        for lease in held:
            by_run.setdefault(leasing.holder(lease), []).append(f"{lease['host']}:{lease['key']}")
        return "GPUs held: " + "; ".join(f"{', '.join(keys)} by {who}" for who, keys in by_run.items())
    waiters = {t["run_id"]: t for a in answers.values() for t in a.document["ahead"]}
    return "waiters queued first for these GPUs: " + ", ".join(
        f"run {t['run_id']} ({t.get('operator')})" for t in waiters.values())


def _waiting(held: list[dict], ahead: int) -> str:
    holders = sorted({leasing.holder(lease) for lease in held})
    return (f"waiting for GPU leases: position {ahead + 1} in the queue"
            + (f"; held by {', '.join(holders)}" if holders else ""))
