"""A live log people can read (Issue 27, part 3): `\\r` progress collapsed to each rank's latest
state, identical lines of many ranks shown once with a count, `run --ranks`, and lines that
never mix two ranks. The stream is the one the node's follow command writes (`tail -v -F` over
each rank's own files and agent.log, watch/follow.py), the time is injected (watch/livelog.py)."""
from __future__ import annotations

import contextlib
import io
import re

import pytest
from hypothesis import given, settings
from clusterctl_helpers import examples
from hypothesis import strategies as st

from clusterctl.executor import Event
from clusterctl.plan import wrapper as agent
from clusterctl.watch.follow import MAX_LINE, FollowStream, latest_state
from clusterctl.watch.livelog import (
    LiveLog,
    LiveLogEvents,
    RankFilter,
    Shown,
    format_ranks,
    parse_ranks,
)

ATT = "20261125-101010-abcdef_k36jk50i/attempt_0"
HOST = "node1"


def rank_file(local_rank: int, stream: str = "stdout") -> str:
    return f"{ATT}/{local_rank}/{stream}.log"


def tail_output(writes, attempt: str = ATT) -> bytes:
    """What the follow command prints for `writes` [(file name, bytes)], as GNU tail -v -F writes
    it: the control line, then a header `==> NAME <==` at every switch of file (a newline before
    every header but the first), the bytes of each file as they were written."""
    out = [f"clusterctl-follow {attempt}\n".encode()]
    last = None
    for name, data in writes:
        if name != last:
            out.append(("" if last is None else "\n").encode() + f"==> {name} <==\n".encode())
            last = name
        out.append(data)
    return b"".join(out)


def chunks(data: bytes, sizes) -> list[bytes]:
    sizes = list(sizes) or [len(data) or 1]
    out, at, i = [], 0, 0
    while at < len(data):
        out.append(data[at:at + sizes[i % len(sizes)]])
        at += sizes[i % len(sizes)]
        i += 1
    return out


class Pipeline:
    """FollowStream -> LiveLog, the way JobRunner._follow and LiveLogEvents join them."""

    def __init__(self, nproc: int, first_rank: int = 0, host: str = HOST, live: LiveLog | None = None):
        self.stream, self.first_rank, self.host = FollowStream(nproc), first_rank, host
        self.live = live or LiveLog()
        self.pieces, self.shown = [], []

    def feed(self, now: float, data: bytes) -> None:
        self._show(now, self.stream.feed(data))

    def end(self, now: float) -> list[Shown]:
        self._show(now, self.stream.finish())
        self.shown += self.live.close(now)
        return self.shown

    def _show(self, now: float, pieces) -> None:
        self.pieces += pieces
        for piece in pieces:
            local = piece.source.local_rank
            rank = None if local is None else self.first_rank + local
            call = self.live.line if piece.complete else self.live.partial
            self.shown += call(now, self.host, piece.text, rank=rank, local_rank=local, stream=piece.source.stream)


def tqdm_writes(ranks: int = 4, steps: int = 200):
    """Each rank's tqdm-like bar, update by update (`\\r` and the state, no `\\n`), then its `\\n`:
    [(step, local rank, bytes)] in the order the ranks wrote them."""
    for step in range(steps + 1):
        for rank in range(ranks):
            yield step, rank, f"\rrank {rank}: {100 * step // steps:3d}%|{'#' * (20 * step // steps):<20}| {step}/{steps}".encode()
    for rank in range(ranks):
        yield steps + 1, rank, b"\n"


def final_state(rank: int, steps: int = 200) -> str:
    return f"rank {rank}: 100%|{'#' * 20}| {steps}/{steps}"


# --------------------------------------------------------------------------- the issue's test


def test_a_tqdm_workload_on_4_ranks_shows_at_most_40_progress_lines_and_each_ranks_final_state():
    """4 ranks x 200 `\\r` updates over 20 s: torchrun's copy made 797 lines of it, halves of one
    rank's line glued to another's prefix. Here: the first state, one every 10 s, the final one."""
    pipe = Pipeline(nproc=4)
    writes = []
    for step, rank, data in tqdm_writes():
        writes.append((rank_file(rank), data))
        # torchrun's copy of the same bytes in agent.log, `\r` turned into line ends and a partial
        # line glued to the next rank's prefix: dropped, the ranks' own files are read
        writes.append(("agent.log", f"[{HOST} rank{rank}]: {data.decode().strip()}".encode()))
    stream = tail_output(writes)
    for i, chunk in enumerate(chunks(stream, [4096, 17, 333])):
        pipe.feed(i * 20.0 * 4096 / len(stream), chunk)  # 20 s for the whole run
    shown = pipe.end(21.0)
    progress = [s for s in shown if re.search(r"\d+/200", s.text)]
    assert len(progress) <= 40, [s.text for s in progress]
    for rank in range(4):
        assert [s for s in shown if s.rank == rank and s.text == final_state(rank)], f"rank {rank}'s final state"
    assert all(s.prefix == f"[{HOST} r{s.rank}]" and f"rank {s.rank}:" in s.text for s in progress)
    assert not [s for s in shown if "rank" in s.prefix or "]: " in s.text]  # no torchrun copy, no glue


def test_a_bar_that_runs_on_shows_a_state_every_n_seconds_even_when_nothing_else_happens():
    live = LiveLog(progress_every=10.0)
    shown = live.partial(0.0, HOST, "\r  0%| 0/9", rank=3, stream="stderr")
    assert [s.text for s in shown] == ["  0%| 0/9"]
    assert live.partial(4.0, HOST, "\r  0%| 0/9\r 40%| 4/9", rank=3, stream="stderr") == []
    assert live.tick(9.9) == []
    assert [(s.text, s.prefix, s.stream) for s in live.tick(10.0)] == [(" 40%| 4/9", f"[{HOST} r3]", "stderr")]
    assert live.tick(30.0) == []  # nothing new was drawn
    shown = live.line(31.0, HOST, "\r 40%| 4/9\r100%| 9/9", rank=3, stream="stderr")
    assert [s.text for s in shown] == ["100%| 9/9"]  # the final state at once, whatever the interval
    assert live.close(40.0) == []


def test_the_final_state_of_a_rank_that_died_mid_bar_shows_at_the_end():
    pipe = Pipeline(nproc=2, first_rank=6)
    pipe.feed(0.0, tail_output([(rank_file(1), b"\rstep 1\rstep 2\rstep 3")]))
    shown = pipe.end(1.0)
    assert [(s.rank, s.text) for s in shown] == [(7, "step 3")]  # drawn at once, not again at the end
    live = LiveLog()
    live.partial(0.0, HOST, "\ra", rank=0)
    assert live.partial(1.0, HOST, "\ra\rb", rank=0) == []
    assert [s.text for s in live.close(2.0)] == ["b"]  # the stream never ended: the latest state


def test_a_line_tqdm_writes_over_its_bar_shows_as_the_line():
    live = LiveLog()
    live.partial(0.0, HOST, "\r 50%|#####", rank=0)
    shown = live.line(1.0, HOST, "\r 50%|#####\r          \repoch 1 done", rank=0)  # tqdm.write clears the bar
    assert [s.text for s in shown] == ["epoch 1 done"]
    assert latest_state("\rab\r   \r") == "ab" and latest_state("plain") == "plain" and latest_state("\r\r") == ""


# --------------------------------------------------------------------------- repeats


def test_identical_warnings_from_many_ranks_show_once_then_a_count_when_the_window_closes():
    live = LiveLog(repeat_window=5.0)
    shown = []
    for rank in range(8):
        host = "node1" if rank < 4 else "node2"
        shown += live.line(0.1 * rank, host, "UserWarning: TypedStorage is deprecated", rank=rank, stream="stderr")
    assert [(s.prefix, s.text) for s in shown] == [("[node1 r0]", "UserWarning: TypedStorage is deprecated")]
    assert live.tick(4.9) == []
    summary = live.tick(5.0)
    assert [(s.prefix, s.text, s.repeated, s.stream) for s in summary] == [
        ("[r1-7]", "UserWarning: TypedStorage is deprecated", "[repeated 7x across 7 ranks]", "stderr")]
    again = live.line(6.0, "node2", "UserWarning: TypedStorage is deprecated", rank=5, stream="stderr")
    assert [s.prefix for s in again] == ["[node2 r5]"]  # a new window: shown at once again


def test_the_count_of_an_open_window_shows_at_the_end_and_a_line_on_another_stream_is_another_line():
    live = LiveLog()
    shown = live.line(0.0, HOST, "same", rank=0) + live.line(0.0, HOST, "same", rank=1, stream="stderr")
    shown += live.line(0.1, HOST, "same", rank=2)
    assert [(s.prefix, s.stream) for s in shown] == [(f"[{HOST} r0]", "stdout"), (f"[{HOST} r1]", "stderr")]
    assert [(s.prefix, s.repeated) for s in live.close(1.0)] == [("[r2]", "[repeated 1x across 1 rank]")]


def test_a_rank_repeating_itself_alone_shows_every_line():
    live = LiveLog()
    shown = []
    for i in range(3):
        shown += live.line(float(i), HOST, "-" * 20, rank=0)  # a table's rules
    assert len(shown) == 3 and live.close(9.0) == []


def test_torchruns_own_lines_from_many_nodes_are_counted_across_nodes():
    live = LiveLog()
    shown = []
    for node in range(5):
        shown += live.line(0.0, f"node{node}", "WARNING: OMP_NUM_THREADS set to 1", stream="stdout")
    assert [s.prefix for s in shown] == ["[node0]"]
    (summary,) = live.close(1.0)
    assert (summary.prefix, summary.repeated) == ("[node1, node2, node3 +1 more]", "[repeated 4x across 4 nodes]")


def test_repeated_blank_lines_say_no_count():
    live = LiveLog()
    shown = live.line(0.0, HOST, "", rank=0) + live.line(0.0, HOST, "", rank=1)
    assert len(shown) == 1 and live.close(1.0) == []


# --------------------------------------------------------------------------- --ranks


def test_ranks_parse_as_lists_and_inclusive_ranges():
    assert parse_ranks("0,8") == ((0, 0), (8, 8))
    assert parse_ranks(" 0-3 , 8") == ((0, 3), (8, 8))
    for bad in ("", "a", "3-1", "1,,2", "-1", "0-"):
        with pytest.raises(ValueError):
            parse_ranks(bad)
    assert format_ranks([9, 0, 1, 2, 5, 8]) == "0-2,5,8-9"


def test_the_rank_filter_shows_the_ranks_asked_for_and_every_line_of_no_rank():
    live = LiveLog(RankFilter(parse_ranks("0,8")))
    shown = []
    for rank in range(16):
        shown += live.line(0.0, f"node{rank // 8}", f"hello from {rank}", rank=rank, local_rank=rank % 8)
        shown += live.partial(0.0, f"node{rank // 8}", f"\rstep {rank}", rank=rank, local_rank=rank % 8)
    shown += live.line(0.0, "node1", "torchrun: worker group started")
    assert [s.text for s in shown] == ["hello from 0", "step 0", "hello from 8", "step 8", "torchrun: worker group started"]
    local = RankFilter(local_ranks=parse_ranks("0"))
    assert [r for r in range(16) if local.shows(r, r % 8)] == [0, 8]
    both = RankFilter(parse_ranks("3"), parse_ranks("0"))
    assert [r for r in range(16) if both.shows(r, r % 8)] == [0, 3, 8]  # either selects
    assert RankFilter().shows(5, 5) and RankFilter(parse_ranks("1")).shows(None)
    assert not RankFilter(parse_ranks("99")).selects_any([range(8), range(8, 16)])
    assert str(both) == "ranks 3 and local ranks 0"


def test_run_takes_ranks_and_local_ranks_like_torchruns_filter():
    from clusterctl.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["run", "--ranks", "0-3,8", "--local-ranks-filter", "0", "p.txt"])
    assert (args.ranks, args.local_ranks) == (((0, 3), (8, 8)), ((0, 0),))
    args = parser.parse_args(["run", "p.txt"])
    assert (args.ranks, args.local_ranks) == ((), ())
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        parser.parse_args(["run", "--ranks", "8-0", "p.txt"])


# --------------------------------------------------------------------------- the stream


def test_torchruns_copies_in_agent_log_are_dropped_and_its_own_lines_stay():
    pipe = Pipeline(nproc=2)
    pipe.feed(0.0, tail_output([
        ("agent.log", b"WARNING:torch.distributed.run: OMP_NUM_THREADS...\n"),
        (rank_file(0), b"\rhalf"),
        ("agent.log", b"[node1 rank0]: half[node1 rank1]: a line\n"),
        (rank_file(1), b"a line\n"),
        (rank_file(0), b" done\n"),
        ("agent.log", b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n")]))
    pipe.end(1.0)
    assert [(p.source.local_rank, p.text) for p in pipe.pieces if p.complete] == [
        (None, "WARNING:torch.distributed.run: OMP_NUM_THREADS..."), (1, "a line"), (0, "\rhalf done"),
        (None, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:")]


def test_without_the_ranks_files_agent_log_is_all_there_is_and_keeps_its_ranks():
    stream = FollowStream(2)
    pieces = stream.feed(b"clusterctl-follow \n==> agent.log <==\n[node1 rank1]: only copy\nrendezvous timed out\n")
    assert [p.text for p in pieces + stream.finish()] == ["[node1 rank1]: only copy", "rendezvous timed out"]
    assert not stream.follows_ranks
    other = FollowStream(1)  # not our follow command at all: every byte is torchrun's
    assert [p.text for p in other.feed(b"hello\nworld\n") + other.finish()] == ["hello", "world"]


def test_a_header_that_names_no_file_of_ours_is_a_ranks_text():
    stream = FollowStream(1)
    spoof = b"\n==> elsewhere/0/stdout.log <==\nstill rank 0\n"
    pieces = stream.feed(tail_output([(rank_file(0), b"before" + spoof)])) + stream.finish()
    assert {p.source.local_rank for p in pieces} == {0}
    assert [p.text for p in pieces if p.complete] == ["before", "==> elsewhere/0/stdout.log <==", "still rank 0"]


def test_utf8_cut_between_chunks_and_a_line_that_never_ends_stay_readable():
    stream = FollowStream(1)
    data = tail_output([(rank_file(0), "猫が草の上を歩く\n".encode())])
    pieces = [p for chunk in chunks(data, [1]) for p in stream.feed(chunk)]
    assert [p.text for p in pieces if p.complete] == ["猫が草の上を歩く"]
    pieces = stream.feed(tail_output([(rank_file(0), b"." * (3 * MAX_LINE))])[60:])
    assert all(len(p.text) <= MAX_LINE for p in pieces) and sum(len(p.text) for p in pieces if p.complete) >= 2 * MAX_LINE


def test_a_header_cut_right_after_its_newline_does_not_end_the_line_before_it():
    stream = FollowStream(2)
    data = tail_output([(rank_file(0), b"\rstep 1"), (rank_file(1), b"x\n"), (rank_file(0), b"\rstep 2\n")])
    cut = data.index(b"\n==> " + rank_file(1).encode()) + 1
    pieces = stream.feed(data[:cut]) + stream.feed(data[cut:]) + stream.finish()
    lines = [(p.source.local_rank, p.text) for p in pieces if p.complete]
    assert lines[-1] == (0, "\rstep 1\rstep 2") and (1, "x") in lines


# Each rank writes with letters of its own (rank 2's are two bytes in UTF-8), so a line that
# mixed two ranks would show it.
LETTERS = {0: "ab", 1: "cd", 2: "γδ", 3: "ef"}


def _writes():
    def of_rank(rank: int):
        return st.tuples(st.just(rank), st.sampled_from(["stdout", "stderr"]),
                         st.text(alphabet=LETTERS[rank] + " \r\n", min_size=1, max_size=14))

    return st.lists(st.integers(0, 3).flatmap(of_rank), min_size=1, max_size=40)


@settings(max_examples=examples(300), deadline=None)
@given(_writes(), st.lists(st.integers(1, 64), min_size=1, max_size=8), st.booleans())
def test_any_interleaving_and_any_cut_never_mixes_two_ranks_and_keeps_every_ranks_final_line(writes, sizes, copies):
    named = []
    for rank, stream, text in writes:
        named.append((rank_file(rank, stream), text.encode()))
        if copies:  # torchrun's copy in agent.log: `\r` made a line end, each readline() prefixed
            for line in re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+", text):
                named.append(("agent.log", f"[{HOST} rank{rank}]: {line.rstrip(chr(13) + chr(10))}\n".encode()
                              if line[-1:] in ("\r", "\n") else f"[{HOST} rank{rank}]: {line}".encode()))
    pipe = Pipeline(nproc=4)
    for i, chunk in enumerate(chunks(tail_output(named), sizes)):
        pipe.feed(float(i), chunk)
    shown = pipe.end(1e6)

    for piece in pipe.pieces:
        rank = piece.source.local_rank
        assert rank is not None, piece  # every copy in agent.log was dropped
        assert set(piece.text) <= set(LETTERS[rank] + " \r"), piece
    for shown_line in shown:
        if shown_line.rank is not None:
            assert set(shown_line.text) <= set(LETTERS[shown_line.rank] + " "), shown_line
    for (rank, stream) in {(r, s) for r, s, _ in writes}:
        data = "".join(t for r, s, t in writes if (r, s) == (rank, stream))
        lines = data.split("\n")
        final = lines[-1] if lines[-1] or len(lines) == 1 else lines[-2]
        last = [p.text for p in pipe.pieces if p.complete and (p.source.local_rank, p.source.stream) == (rank, stream)]
        assert last and latest_state(last[-1]) == latest_state(final), (rank, stream, final, last[-3:])
        if latest_state(final):
            assert [s for s in shown if s.rank == rank and s.stream == stream and s.text == latest_state(final)]


# --------------------------------------------------------------------------- the renderer side


def test_events_pass_through_the_live_log_in_order_and_any_event_is_a_tick():
    forwarded = []
    clock = iter([0.0, 0.1, 0.2, 6.0, 7.0]).__next__
    events = LiveLogEvents(LiveLog(), forwarded.append, clock)
    events.on_event(Event("line", HOST, "same", {"prefix": "[node1 r0]", "stream": "stderr", "rank": 0, "local_rank": 0}))
    events.on_event(Event("line", HOST, "same", {"prefix": "[node1 r1]", "stream": "stderr", "rank": 1, "local_rank": 1}))
    events.on_event(Event("partial", HOST, "\rhalf", {"prefix": "[node1 r1]", "stream": "stdout", "rank": 1}))
    events.on_event(Event("status", data={"nodes": {}}))
    events.close()
    assert [(e.kind, e.text, e.data.get("repeated")) for e in forwarded] == [
        ("line", "same", None), ("line", "half", None), ("line", "same", "[repeated 1x across 1 rank]"),
        ("status", "", None)]


def test_the_renderer_shows_a_count_after_the_line_and_keeps_remote_text_terminal_safe():
    from clusterctl.render import Renderer

    out = io.StringIO()
    renderer = Renderer(stream=out)
    renderer.on_event(Event("line", None, "warn \x1b[2J", {"prefix": "[r1-3]", "stream": "stderr",
                                                         "repeated": "[repeated 3x across 3 ranks]"}))
    assert out.getvalue() == "[r1-3] warn \\x1b[2J [repeated 3x across 3 ranks]\n"
