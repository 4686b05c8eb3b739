"""Which nodes the watch loop asks this turn (issue 40: what clusterctl costs a node while the job runs).

Every question to a node (plan/wrapper.py's poll: renew the lease, read agent.exit) is one SSH exec
there: sshd forks a session and a shell. Asked every second, that was most of the node-side
machinery's CPU. A node's end does not wait for a poll (its output stream ends the moment its
agent.exit appears and wakes the loop), so a running node is asked every `every_s` seconds: still
several times per lease (plan/wrapper.py LEASE_S), and well inside `lost_after_s`. A node is asked at
once, every turn, after a stream ended (`everyone`), while the run settles after a failure, and
after an unanswered question (so that a node cut off counts as lost as soon as before).

A node's output stream carries the question too (issue 52: a poll was ~40 ms of the node's CPU in a
chain of processes, most of what clusterctl cost a node while the job ran): the controller asks for the
lease's renewal on the stream's stdin whenever the node is due, and the node's follower answers on its
stderr (plan/wrapper.follow_command). A node whose stream answered within `every_s` + STREAM_SLACK_S
(`renewal_sent`), or took its first renewal, is not polled; one whose stream fell silent, ended or left
its first renewal unanswered is polled as before. A stream's last answer is the node's end, as a poll would
read it (`exited`): the node is not polled after it.
"""
from __future__ import annotations

import threading
from typing import Optional

from clusterctl.node.follow_files import EXITED as EXITED_TEXT, RENEWED as RENEWED_TEXT

EVERY_S = 4.0
RENEWED, EXITED = RENEWED_TEXT.encode(), EXITED_TEXT.encode()
LINE_MAX = 64  # the longest stderr line of a stream read as an answer (a longer one is the job's, or noise)
STREAM_SLACK_S = 2.0  # past `every_s`, how late a stream's answer may come before the node is polled


class Pace:
    def __init__(self, every_s: float = EVERY_S):
        self.every_s = every_s
        self._asked: dict[str, float] = {}
        self._unanswered: set[str] = set()
        self._everyone = threading.Event()  # set from the streams' threads
        self._streamed: dict[str, float] = {}  # each node's latest answer on its stream (set from their thread)
        self._partial: dict[str, bytes] = {}
        self._sent: set[str] = set()  # the nodes whose stream took a renewal
        self._exited: dict[str, str] = {}  # the poll's answer a node's stream ended with ("exit N[ stopped]")

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

    def said(self, name: str, data: bytes, now: float) -> None:
        """What `name`'s stream said on its stderr (from the streams' thread): an answer counts at `now`."""
        lines = (self._partial.get(name, b"") + data).split(b"\n")
        tail = lines.pop()  # a line cut between two reads; a longer one is no answer ("\0" never matches)
        self._partial[name] = tail if len(tail) < LINE_MAX else b"\0"
        if any(line + b"\n" == RENEWED for line in lines):
            self._streamed[name] = now
        for line in lines:
            if line.startswith(EXITED) and len(line) < LINE_MAX:
                self._exited[name] = line[len(EXITED):].decode("ascii", "replace")

    def exited(self, name: str) -> Optional[str]:
        """What `name`'s stream said of its end, in a poll's words ("exit N", "exit N stopped"), or None."""
        return self._exited.get(name)

    def stream_ended(self, name: str) -> None:
        """`name`'s stream ended: its answers no longer stand for a poll (its end is what a poll reads)."""
        self._streamed.pop(name, None)

    def streamed_at(self, name: str) -> Optional[float]:
        return self._streamed.get(name)

    def renewal_sent(self, name: str, now: float) -> bool:
        """A renewal went to `name` on its stream: whether it stands for the node's poll. It does where the
        stream answered recently enough, and for the first one a stream took (its answer awaited until the
        node is next due; the wrapper's lease is fresh from its start): no poll at a run's start either."""
        first = name not in self._sent
        self._sent.add(name)
        return first or now - self._streamed.get(name, float("-inf")) <= self.every_s + STREAM_SLACK_S
