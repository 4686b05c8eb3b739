"""What the live log of a run shows of what the ranks print. Pure: the time is an argument.

A job of 8 ranks x 32 nodes prints every warning 256 times and redraws its progress bars
thousands of times; the live log is for a person. So (the files on the nodes keep every byte):
- A line redrawn with `\\r` (tqdm, on a pipe as on a terminal) shows as its latest state: the
  first state at once, then at most one state every `progress_every` seconds per rank, and the
  final state when the line ends (its `\\n`, or the rank's end).
- A line seen again within `repeat_window` seconds of its first showing (any rank, any node,
  the same stream) is not shown again: when the window closes, one line says how often and where,
  `[r1-3,8] text [repeated 4x across 4 ranks]`, the way Ray says `[repeated 7x across cluster]`.
- `RankFilter`: only the lines of some ranks (`run --ranks 0,8`, `--local-ranks 0`); lines of no
  rank (torchrun's own, clusterctl's notes) always show.
Every line shown is a whole line of one rank: `watch/follow.py` cuts each rank's stream on its own.
"""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from clusterctl.executor import Event, OnEvent
from clusterctl.watch.follow import latest_state, line_prefix

PROGRESS_EVERY_S = 10.0
REPEAT_WINDOW_S = 5.0
_RANGE_RE = re.compile(r"\s*([0-9]{1,9})\s*(?:-\s*([0-9]{1,9})\s*)?")

Ranges = tuple[tuple[int, int], ...]


# --------------------------------------------------------------------------- which ranks


def parse_ranks(text: str) -> Ranges:
    """`0,8` or `0-3,8` (inclusive ranges) as ((0, 3), (8, 8)); ValueError saying what is wrong."""
    ranges = []
    for part in text.split(","):
        match = _RANGE_RE.fullmatch(part)
        if not match:
            raise ValueError(f"not a rank or a range of ranks: {part.strip()!r} (write e.g. 0,8 or 0-3,8)")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low:
            raise ValueError(f"an empty range of ranks: {part.strip()!r} (write the lower rank first)")
        ranges.append((low, high))
    return tuple(ranges)


def format_ranks(ranks) -> str:
    """{0, 1, 2, 5, 8, 9} as `0-2,5,8-9`."""
    spans: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _within(ranges: Ranges, value: int) -> bool:
    return any(low <= value <= high for low, high in ranges)


@dataclass(frozen=True)
class RankFilter:
    """Global ranks (`--ranks`) and local ranks on every node (`--local-ranks`, torchrun's
    `--local-ranks-filter`): a rank shows when either selects it; with neither, every rank shows."""

    ranks: Ranges = ()
    local_ranks: Ranges = ()

    def shows(self, rank: int | None, local_rank: int | None = None) -> bool:
        if rank is None or not (self.ranks or self.local_ranks):
            return True
        return _within(self.ranks, rank) or (local_rank is not None and _within(self.local_ranks, local_rank))

    def selects_any(self, ranks_of_nodes) -> bool:
        """Whether any rank of the job shows; `ranks_of_nodes`: each node's range of global ranks."""
        return any(self.shows(rank, local) for node in ranks_of_nodes for local, rank in enumerate(node))

    def __str__(self) -> str:
        parts = [f"ranks {_spans(self.ranks)}"] if self.ranks else []
        if self.local_ranks:
            parts.append(f"local ranks {_spans(self.local_ranks)}")
        return " and ".join(parts) or "every rank"


def _spans(ranges: Ranges) -> str:
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in ranges)


# --------------------------------------------------------------------------- what shows


@dataclass(frozen=True)
class Shown:
    """One line for the live log. `repeated`: on the line that closes a window of repeats."""

    host: str | None
    text: str
    prefix: str
    stream: str = "stdout"
    rank: int | None = None
    repeated: str = ""


@dataclass
class _Window:
    opened: float
    first: Shown
    count: int = 0
    ranks: set = field(default_factory=set)
    hosts: set = field(default_factory=set)  # hosts of the repeats that carried no rank

    @property
    def alone(self) -> bool:
        """Only the first line's own rank has said it so far."""
        return not self.count


@dataclass
class _Bar:
    """A rank's line being redrawn: its latest state, and what was shown of it when."""

    host: str | None
    rank: int | None
    stream: str
    prefix: str
    state: str = ""  # "": nothing drawn since the line last ended
    shown: str | None = None
    shown_at: float = float("-inf")


class LiveLog:
    def __init__(self, ranks: RankFilter = RankFilter(), progress_every: float = PROGRESS_EVERY_S,
                 repeat_window: float = REPEAT_WINDOW_S):
        self.filter, self.progress_every, self.repeat_window = ranks, progress_every, repeat_window
        self._windows: OrderedDict[tuple[str, str], _Window] = OrderedDict()  # in the order they opened
        self._bars: dict[tuple, _Bar] = {}

    def line(self, now: float, host: str | None, text: str, *, rank: int | None = None,
             local_rank: int | None = None, stream: str = "stdout", prefix: str | None = None) -> list[Shown]:
        """A whole line (without its `\\n`); a redrawn one (with `\\r`) shows as its final state."""
        out = self._close_windows(now)
        if not self.filter.shows(rank, local_rank):
            return out
        prefix = prefix or line_prefix(host, rank)
        bar = self._bars.get((host, rank, stream))
        if "\r" in text:
            text = latest_state(text)
            if bar is not None and text == bar.shown:  # the final state is on screen already
                bar.state = ""
                bar.shown = None
                return out
        if bar is not None:  # the line it was redrawing ended; when it showed last still counts
            bar.state = ""
            bar.shown = None
        return out + self._once(now, Shown(host, text, prefix, stream, rank))

    def partial(self, now: float, host: str | None, text: str, *, rank: int | None = None,
                local_rank: int | None = None, stream: str = "stdout", prefix: str | None = None) -> list[Shown]:
        """The line a rank is writing, so far. Only a redrawn one (`\\r`) shows before its end."""
        out = self._close_windows(now)
        state = latest_state(text) if "\r" in text else ""
        if not state or not self.filter.shows(rank, local_rank):
            return out
        key = (host, rank, stream)
        bar = self._bars.get(key)
        if bar is None:
            bar = self._bars[key] = _Bar(host, rank, stream, prefix or line_prefix(host, rank))
        bar.state = state
        return out + self._bar_due(now, bar)

    def tick(self, now: float) -> list[Shown]:
        """Windows of repeats that closed, and progress states that are due (of bars that stopped
        being redrawn too: a line or a partial only looks at its own bar, this at every bar)."""
        out = self._close_windows(now)
        for bar in self._bars.values():
            out += self._bar_due(now, bar)
        return out

    def close(self, now: float) -> list[Shown]:
        """The run ended: every bar's latest state not shown yet, and every open window's count."""
        out = self._close_windows(now)
        for bar in self._bars.values():
            if bar.state and bar.state != bar.shown:
                out += self._show_bar(now, bar)
        self._bars.clear()
        return out + self._close_windows(float("inf"))

    # ---- inside
    def _bar_due(self, now: float, bar: _Bar) -> list[Shown]:
        if not bar.state or bar.state == bar.shown or now - bar.shown_at < self.progress_every:
            return []
        return self._show_bar(now, bar)

    def _show_bar(self, now: float, bar: _Bar) -> list[Shown]:
        bar.shown, bar.shown_at = bar.state, now
        return self._once(now, Shown(bar.host, bar.state, bar.prefix, bar.stream, bar.rank))

    def _once(self, now: float, shown: Shown) -> list[Shown]:
        """`shown`, unless the same text on the same stream showed within the window from another
        rank (or node): then it is counted. One rank repeating itself alone (a table's rules, a
        loop's marker) is that rank's output and shows as it is."""
        key = (shown.stream, shown.text)
        window = self._windows.get(key)
        if window is not None and now - window.opened < self.repeat_window:
            if window.alone and (shown.host, shown.rank) == (window.first.host, window.first.rank):
                return [shown]
            window.count += 1
            if shown.rank is not None:
                window.ranks.add(shown.rank)
            else:
                window.hosts.add(shown.host)
            return []
        out = self._summary(self._windows.pop(key)) if window is not None else []
        self._windows[key] = _Window(now, shown)
        return out + [shown]

    def _close_windows(self, now: float) -> list[Shown]:
        out = []
        while self._windows:
            key, window = next(iter(self._windows.items()))
            if now - window.opened < self.repeat_window:
                break
            del self._windows[key]
            out += self._summary(window)
        return out

    def _summary(self, window: _Window) -> list[Shown]:
        if not window.count or not window.first.text.strip():
            return []  # shown once; or blank lines, whose count says nothing
        first = window.first
        where = []
        if window.ranks:
            where.append(f"r{format_ranks(window.ranks)}")
        if window.hosts:
            hosts = sorted(h or "?" for h in window.hosts)
            where.append(", ".join(hosts[:3]) + (f" +{len(hosts) - 3} more" if len(hosts) > 3 else ""))
        across = [_count(len(window.ranks), "rank")] if window.ranks else []
        if window.hosts:
            across.append(_count(len(window.hosts), "node"))
        repeated = f"[repeated {window.count}x across {' and '.join(across)}]"
        return [Shown(None, first.text, f"[{' '.join(where)}]", first.stream, None, repeated)]


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


# --------------------------------------------------------------------------- between the runner and the renderer


class LiveLogEvents:
    """Passes a run's events on to `forward`, its `line` and `partial` events through a `LiveLog`.

    The runner's events come from one thread per node and the watch loop: one lock keeps each
    line whole and in order. Any event is a tick (the runner's status event comes every poll),
    so windows close and progress shows even while no rank prints. `clock`: e.g. time.monotonic.
    """

    def __init__(self, live: LiveLog, forward: OnEvent, clock: Callable[[], float]):
        self.live, self.forward, self.clock = live, forward, clock
        self._lock = threading.Lock()

    def on_event(self, event: Event) -> None:
        with self._lock:
            now = self.clock()
            if event.kind in ("line", "partial"):
                data = event.data or {}
                fields = {"rank": data.get("rank"), "local_rank": data.get("local_rank"),
                          "stream": data.get("stream") or "stdout", "prefix": data.get("prefix")}
                shown = (self.live.line if event.kind == "line" else self.live.partial)(now, event.host, event.text,
                                                                                         **fields)
                self._show(shown)
                return
            self._show(self.live.tick(now))
            self.forward(event)

    def close(self) -> None:
        with self._lock:
            self._show(self.live.close(self.clock()))

    def _show(self, shown: list[Shown]) -> None:
        for line in shown:
            data = {"prefix": line.prefix, "stream": line.stream, "rank": line.rank}
            if line.repeated:
                data["repeated"] = line.repeated
            self.forward(Event("line", line.host, line.text, data))
