"""What `clusterctl logs` reads on which node, and its lines back as (host, rank, stream, text). Pure.

A run record's topology (`run.json`: `[{"host", "node_rank", "ranks": [first, last]}, ...]`) says
which node holds which global ranks; a node's files are read by plan/wrapper.py's logs command and
cut into lines by watch/follow.py's FollowStream, the same way the live log of `run` reads them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from clusterctl.documents import parts
from clusterctl.documents.convert import as_document
from clusterctl.watch.follow import FollowStream, Piece, latest_state, line_prefix
from clusterctl.plan.torchrun import RANK_PREFIX_RE


@dataclass(frozen=True)
class NodeSlice:
    """One node of a run and what to read there: these local ranks' files, and agent.log or not."""

    host: str
    first_rank: int
    nproc: int
    local_ranks: tuple[int, ...]
    agent_log: bool
    only_rank: Optional[int] = None  # --rank: lines of other ranks (agent.log's copies) are dropped


@dataclass(frozen=True)
class LogLine:
    host: str
    rank: Optional[int]
    stream: str
    text: str

    @property
    def prefix(self) -> str:
        """As the live log of `run` writes it: `[node2 r3]`, or `[node2]` for torchrun's own lines."""
        return line_prefix(self.host, self.rank)

    def to_json(self) -> dict:
        return as_document(parts.LogLine, self)


def node_ranks(topology: Sequence[dict]) -> dict[str, tuple[int, int]]:
    """{host: (first rank, last rank)} from a run record's topology, in node order."""
    nodes = sorted(topology, key=lambda n: n.get("node_rank", 0))
    return {n["host"]: (int(n["ranks"][0]), int(n["ranks"][1])) for n in nodes}


def node_of_rank(topology: Sequence[dict], rank: int) -> Optional[tuple[str, int]]:
    """(host, local rank) of a global rank, or None when the run has no such rank."""
    for host, (first, last) in node_ranks(topology).items():
        if first <= rank <= last:
            return host, rank - first
    return None


def select(topology: Sequence[dict], node: Optional[str] = None, rank: Optional[int] = None) -> list[NodeSlice]:
    """What to read for `logs [--node N] [--rank R]`; ValueError saying what is wrong.

    No flag: every node, each rank's files and torchrun's own lines (agent.log). `--node N`: that
    node alone, the same. `--rank R`: that rank's stdout and stderr on its node (with --node, the
    node must hold it)."""
    ranks = node_ranks(topology)
    if not ranks:
        raise ValueError("the run record has no topology (was the run launched?)")
    if node is not None and node not in ranks:
        raise ValueError(f"the run has no node {node!r}; its nodes: {', '.join(ranks)}")
    if rank is not None:
        where = node_of_rank(topology, rank)
        if where is None:
            last = max(last for _first, last in ranks.values())
            raise ValueError(f"the run has no rank {rank}; its ranks are 0-{last}")
        host, local = where
        if node is not None and node != host:
            first, last = ranks[node]
            raise ValueError(f"rank {rank} ran on {host}, not on {node} (ranks {first}-{last})")
        first, last = ranks[host]
        return [NodeSlice(host, first, last - first + 1, (local,), False, only_rank=rank)]
    return [NodeSlice(host, first, last - first + 1, tuple(range(last - first + 1)), True)
            for host, (first, last) in ranks.items() if node is None or host == node]


class NodeLines:
    """One node's logs stream, fed chunk by chunk, as whole `LogLine`s (a `\\r`-redrawn line as its
    latest state, what a terminal shows). Partial lines wait for their end, or for `finish()`."""

    def __init__(self, part: NodeSlice, mask=lambda text: text):
        self.part = part
        self._stream = FollowStream(part.nproc)
        self._mask = mask

    def feed(self, data: bytes) -> list[LogLine]:
        return self._lines(self._stream.feed(data))

    def finish(self) -> list[LogLine]:
        return self._lines(self._stream.finish())

    def _lines(self, pieces: list[Piece]) -> list[LogLine]:
        out = []
        for piece in pieces:
            if not piece.complete:
                continue
            line = self._line(piece)
            if self.part.only_rank is None or line.rank == self.part.only_rank:
                out.append(line)
        return out

    def _line(self, piece: Piece) -> LogLine:
        text = latest_state(piece.text) if "\r" in piece.text else piece.text
        if piece.source.local_rank is not None:
            rank, stream = self.part.first_rank + piece.source.local_rank, piece.source.stream
        else:  # torchrun's own line, or (no per-rank files) its copy of a rank's line
            match = RANK_PREFIX_RE.match(text)
            rank = int(match.group("rank")) if match else None
            text, stream = (text[match.end():] if match else text), "stdout"
        return LogLine(self.part.host, rank, stream, self._mask(text))
