"""Which nodes the watch loop asks this turn (issue 40: what clusterctl costs a node while the job runs).

Every question to a node (plan/wrapper.py's poll: renew the lease, read agent.exit) is one SSH exec
there: sshd forks a session and a shell. Asked every second, that was most of the node-side
machinery's CPU. A node's end does not wait for a poll (its output stream ends the moment its
agent.exit appears and wakes the loop), so a running node is asked every `every_s` seconds: still
several times per lease (plan/wrapper.py LEASE_S), and well inside `lost_after_s`. A node is asked at
once, every turn, after a stream ended (`everyone`), while the run settles after a failure, and
after an unanswered question (so that a node cut off counts as lost as soon as before).
"""
from __future__ import annotations

import threading

EVERY_S = 4.0


class Pace:
    def __init__(self, every_s: float = EVERY_S):
        self.every_s = every_s
        self._asked: dict[str, float] = {}
        self._unanswered: set[str] = set()
        self._everyone = threading.Event()  # set from the streams' threads

    def everyone(self) -> None:
        """Ask every node on the next turn (a node's output stream ended)."""
        self._everyone.set()

    def due(self, names: list[str], now: float, everyone: bool = False) -> list[str]:
        """The nodes of `names` to ask now; they count as asked."""
        if self._everyone.is_set():
            self._everyone.clear()
            everyone = True
        chosen = [name for name in names if everyone or name in self._unanswered
                  or now - self._asked.get(name, float("-inf")) >= self.every_s - 0.05]
        for name in chosen:
            self._asked[name] = now
        return chosen

    def answered(self, name: str, ok: bool) -> None:
        (self._unanswered.discard if ok else self._unanswered.add)(name)
