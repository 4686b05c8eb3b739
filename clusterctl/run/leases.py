"""A run takes its GPU leases on every node before any rank starts (issue 48; node/leases.py holds them):
all of them or none, refused at once naming the holder, or with `run --wait` queued in arrival order
until the holders end. A relaunch (healing) takes its nodes' leases the same way, under the same run id.

Waiting: a ticket on each node, stamped with the clock of the waiter's first node (by name) and the run
id, so that every node orders two waiters the same way (a total order: no two waiters each wait for the
other); the ticket is rewritten each poll (a waiter killed -9 leaves a ticket that lapses) and removed
on Ctrl-C. The position printed is the longest queue ahead of this run on any of its nodes.

Releasing is part of a run's end: the attached run flow releases before its record says ended (a next
run started as `run` returns is never refused by it), a run that heals itself holds its leases across
attempts (`holding`: survivors keep theirs, a joining spare takes its own, the loop renews them while it
waits) and releases them before it returns. A lease nobody could release (the node was cut off) is
taken back by the controller whose own record says that run ended, once the node proves its ranks gone
(node/leases.py `reap`).
"""
from __future__ import annotations

import contextvars
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

from clusterctl.errors import StateError
from clusterctl.executor import for_each_host, ticks
from clusterctl.models import HostResult, HostStatus
from clusterctl.plan import leasing

POLL_S = 2.0
RENEW_S = 5.0  # between two attempts the loop renews its leases this often (a lease lives window_s, >= 22 s)


@dataclass
class Leases:
    """The leases a run holds (host -> keys), to release as it ends (once: a second release is a no-op)."""

    inventory: object
    connections: object
    run_id: str
    keys: dict[str, list[str]] = field(default_factory=dict)
    renewed: float = 0.0

    def release(self, hosts: Optional[list[str]] = None) -> dict[str, leasing.Answer]:
        """The leases of `hosts` (all held) released (`release`): {host: answer}."""
        names = [h for h in (self.keys if hosts is None else hosts) if h in self.keys]
        answers = release(self.inventory, self.connections, names, self.run_id) if names else {}
        for name in names:  # after: a release cut short (a second Ctrl-C) is made again by the caller's finally
            del self.keys[name]
        return answers

    def hold(self, inventory, connections, keys: dict[str, list[str]], wait: bool = False,
             say: Callable[[str], None] = lambda text: None, ended: Callable[[str], bool] = lambda run_id: False
             ) -> None:
        """Exactly `keys` held for the next attempt: a host left out releases its leases, a spare joining
        takes its own (refused naming the holder, or queued with `wait`), a survivor keeps what it holds
        (renewed: never released and taken again, so no other run slips in between)."""
        gone = [h for h in self.keys if self.keys[h] != keys.get(h)]
        self.release_saying(say, gone)
        self.inventory, self.connections = inventory, connections
        self.renew(force=True)
        joining = {h: k for h, k in keys.items() if h not in self.keys}
        if joining:
            self.keys.update(take(inventory, connections, self.run_id, joining, wait, say, ended).keys)

    def renew(self, force: bool = False) -> None:
        """The held leases written again (a take of one's own keys): alive while no attempt runs."""
        if self.keys and (force or time.monotonic() - self.renewed >= RENEW_S):
            _on_nodes(self.inventory, self.connections, list(self.keys), "take", lambda name: {"keys": self.keys[name]},
                      run_id=self.run_id, operator=leasing.operator(), window_s=leasing.window_s(self.inventory))
            self.renewed = time.monotonic()


    def release_saying(self, say: Callable[[str], None], hosts: Optional[list[str]] = None) -> None:
        """`release`, and a line said for each node that kept its leases (`unreleased`)."""
        for line in self.unreleased(self.release(hosts)):
            say(line)

    def unreleased(self, answers: dict[str, leasing.Answer]) -> list[str]:
        return unreleased(self.inventory, answers)


HELD: contextvars.ContextVar[Optional[Leases]] = contextvars.ContextVar("clusterctl_held_leases", default=None)


@contextmanager
def holding(run_id: str, say: Callable[[str], None] = lambda text: None) -> Iterator[Leases]:
    """The leases of `run_id` held across its attempts (backends/healing.py): each attempt's run flow
    `hold`s what its plan needs instead of taking and releasing; released as the loop ends, however, and a node
    that kept them said (`say`)."""
    held = Leases(None, None, run_id)
    token = HELD.set(held)
    try:
        yield held
    finally:
        HELD.reset(token)
        held.release_saying(say)


def held_for(run_id: str) -> Optional[Leases]:
    """The leases a healing loop holds for `run_id` in this context, or None."""
    held = HELD.get()
    return held if held is not None and held.run_id == run_id else None


def ended_in(state) -> Callable[[str], bool]:
    """Whether this controller's own record says the run ended (neither running nor unknown)."""
    from clusterctl.ground.records import RunStore, state_of
    from clusterctl.ground.run_record import RunState

    def ended(run_id: str) -> bool:
        try:
            record = RunStore(state).read(run_id)
        except (OSError, ValueError):
            return False
        return state_of(record, run_id, state.lock_holder) not in (RunState.RUNNING, RunState.UNKNOWN)

    return ended


def release(inventory, connections, hosts: list[str], run_id: str) -> dict[str, leasing.Answer]:
    """The leases (and a waiter's tickets) of `run_id` on `hosts`, removed: its end, `stop`, Ctrl-C, a take
    refused elsewhere. A node that did not answer is asked once more (a connection dropped mid-run is opened
    again); one that still fails keeps them until they lapse (Leases.unreleased says so)."""
    answers = _on_nodes(inventory, connections, hosts, "release", run_id=run_id)
    again = [name for name, answer in answers.items() if not answer.ok]
    if again:
        answers.update(_on_nodes(inventory, connections, again, "release", run_id=run_id))
    return answers


def release_saying(inventory, connections, hosts: list[str], run_id: str, say: Callable[[str], None]) -> None:
    """`release`, and a line said for each node that kept its leases: every release whose answers matter to the
    user goes through here (a run's end, a host left out, a take refused elsewhere, a waiter leaving)."""
    for line in unreleased(inventory, release(inventory, connections, hosts, run_id)):
        say(line)


def unreleased(inventory, answers: dict[str, leasing.Answer]) -> list[str]:
    """One line per node whose leases stay after a release (each lapses a lost-node window after the run's last
    beat): never silent."""
    if not answers:
        return []
    window = leasing.window_s(inventory)
    return [f"{a.error}: its GPU leases there lapse {window:.0f}s after the run's last beat"
            for a in answers.values() if not a.ok]


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
         say: Callable[[str], None] = lambda text: None, ended: Callable[[str], bool] = lambda run_id: False) -> Leases:
    """Every node's `keys` for `run_id`; StateError naming the holders unless `wait`. `ended(run id)`: this
    controller's record says that run ended: its leases that no one could release are taken back where the
    node proves its ranks gone (ended_in)."""
    window, me = leasing.window_s(inventory), leasing.operator()
    common = {"run_id": run_id, "operator": me, "window_s": window}
    stamp, reap = None, []
    try:
        if wait:
            stamp = _queue(inventory, connections, keys, common, None)
        last = ""
        for turn, _left in enumerate(ticks(math.inf, POLL_S)):
            if turn:
                _queue(inventory, connections, keys, common, stamp)  # renews the tickets
            answers = _ask_take(inventory, connections, keys, common, stamp, reap)
            ours = _ours_ended([a.document for a in answers.values()], me, ended) - set(reap)
            if ours:  # a lost run of ours holds some: asked again at once, to take them back where they may
                reap += sorted(ours)
                answers = _ask_take(inventory, connections, keys, common, stamp, reap)
            for answer in answers.values():
                for note in answer.document.get("notes") or ():
                    say(note)
            if all(a.document["taken"] for a in answers.values()):
                return Leases(inventory, connections, run_id, dict(keys))
            _release_partial(inventory, connections, run_id, answers, say)
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
            release_saying(inventory, connections, list(keys), run_id, say)
        raise


def _ask_take(inventory, connections, keys, common, stamp, reap) -> dict[str, leasing.Answer]:
    answers = _on_nodes(inventory, connections, list(keys), "take", lambda name: {"keys": keys[name]},
                        **common, **({"stamp": stamp} if stamp is not None else {}), reap=list(reap))
    _raise_failed(answers)
    return answers


def _ours_ended(documents: list[dict], me: str, ended: Callable[[str], bool]) -> set[str]:
    """The holders in the way that this operator started and whose record here says they ended."""
    return {lease["run_id"] for d in documents for lease in d.get("held") or ()
            if lease.get("run_id") and lease.get("operator") == me and ended(lease["run_id"])}


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


def _release_partial(inventory, connections, run_id, answers, say) -> None:
    """All or none: what some nodes granted goes back when another refused."""
    granted = [name for name, a in answers.items() if a.document["taken"]]
    if granted:
        release_saying(inventory, connections, granted, run_id, say)


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
