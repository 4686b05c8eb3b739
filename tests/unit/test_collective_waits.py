"""The straggler watch's evidence over NCCL (issue 49): each rank's collectives' GPU time from torch's flight
recorder, dumped on demand through its FIFO (node/collective_waits.py), judged by the nodes' verdict
(straggler_verdict.judge_waits), carried by the attached watch (watch/collective_watch.py).

The dumps are real (tests/fixtures/flight_recorder/SOURCES.md): the public DDP tutorial over NCCL on 2 x H200,
rank 1 held 60% of the time from outside, each rank's dump asked through its FIFO mid-run."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from hypothesis import given, settings, strategies as st

from clusterctl.node import collective_waits as cw, rank_output
from clusterctl.node import straggler_verdict, waits_verdict as verdict
from clusterctl.node.safe_files import Dir
from clusterctl.watch.collective_watch import CollectiveWatch, parse_round
from clusterctl.watch import stragglers

HELD = Path(__file__).resolve().parents[1] / "fixtures" / "flight_recorder" / "nccl_h200_ddp_tutorial_rank1_held"


def _raw(rank: int) -> dict:
    return cw.load((HELD / f"nccl_trace_rank_{rank}").read_bytes())


def test_the_rank_held_from_outside_waits_least_in_its_collectives_and_is_named():
    measured = {}
    for rank in (0, 1):
        wait_s, window_s, count = cw.waits(_raw(rank))
        assert count > 1900 and 7.0 < window_s < 8.0
        measured[(f"g{rank}", rank)] = (wait_s, window_s)
    assert measured[("g0", 0)][0] / measured[("g0", 0)][1] > 0.6  # the waiting rank: 66% of its time
    assert measured[("g1", 1)][0] / measured[("g1", 1)][1] < 0.15  # the held rank: 10%
    found = verdict.judge_waits(measured)
    assert (found.host, found.rank) == ("g1", 1) and 0.5 < found.lag_share < 0.6
    assert verdict.waits_evidence(found) == ("its collectives waited 10% of its last 7 s on the GPU, the other "
                                             "ranks' 66% (flight recorder)")


def test_ranks_alike_name_nobody_whatever_they_wait():
    assert verdict.judge_waits({("a", 0): (0.5, 10.0), ("b", 1): (0.8, 10.0)}) is None  # both wait little
    assert verdict.judge_waits({("a", 0): (6.0, 10.0), ("b", 1): (4.0, 10.0)}) is None  # communication-bound, alike
    # two ranks alike low are not one rank's doing
    assert verdict.judge_waits({("a", 0): (1.0, 10), ("a", 1): (1.2, 10), ("b", 2): (7.0, 10), ("b", 3): (7.0, 10)}) is None
    assert verdict.judge_waits({("a", 0): (1.0, 10.0)}) is None
    found = verdict.judge_waits({("a", 0): (7.0, 10), ("a", 1): (1.0, 10), ("b", 2): (7.2, 10), ("b", 3): (6.8, 10)})
    assert (found.host, found.rank) == ("a", 1)


def test_a_dump_without_timing_or_too_short_says_nothing():
    raw = _raw(1)
    untimed = {**raw, "entries": [{**e, "duration_ms": None} for e in raw["entries"]]}
    assert cw.waits(untimed) is None
    assert cw.waits({**raw, "entries": raw["entries"][-5:]}) is None
    assert cw.waits({"entries": ["junk", {"time_created_ns": "x", "duration_ms": 1.0}]}) is None


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=4000), st.binary(max_size=64))
def test_a_truncated_or_garbled_dump_is_none_never_a_crash(cut, tail):
    data = (HELD / "nccl_trace_rank_1").read_bytes()
    raw = cw.load(data[:cut] + tail)
    assert raw is None or isinstance(raw, dict)
    if raw is not None:
        cw.waits(raw)
        cw.holds_a_hang(raw, 0.0)


def test_a_dump_that_names_a_class_is_refused():
    import pickle

    assert cw.load(pickle.dumps({"entries": [Path("/")]})) is None


def _run_dir(tmp_path: Path, written_after_s: float) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    dump = run / "nccl_trace_rank_0"
    shutil.copy(HELD / "nccl_trace_rank_0", dump)
    newest = max(e["time_created_ns"] for e in _raw(0)["entries"]) / 1e9
    os.utime(dump, (newest + written_after_s, newest + written_after_s))
    os.mkfifo(run / "fr_pipe_0.pipe")
    return run


def test_a_round_reads_the_dump_sets_it_aside_and_asks_for_the_next(tmp_path):
    run = _run_dir(tmp_path, 0.5)
    reader = os.open(run / "fr_pipe_0.pipe", os.O_RDONLY | os.O_NONBLOCK)  # the rank's watchdog, as torch opens it
    try:
        with Dir.open(str(run)) as d:
            [line] = cw.node_round(d)
        assert os.read(reader, 16) == b"1"
    finally:
        os.close(reader)
    assert line["rank"] == 0 and line["poked"] and line["collectives"] > 1900
    assert 0.6 < line["wait_s"] / line["window_s"] < 0.7
    assert sorted(p.name for p in run.iterdir()) == ["fr_marks.json", "fr_pipe_0.pipe", "fr_round_rank_0"]  # not a timeout's dump now


def test_a_dump_holding_a_collective_past_its_timeout_is_left_for_the_hang(tmp_path):
    # written 11 minutes after its last collective started (the tutorial's timeout: 10 minutes): a timeout's dump
    run = _run_dir(tmp_path, 660.0)
    with Dir.open(str(run)) as d:
        [line] = cw.node_round(d)
    assert "past its timeout" in line["problem"] and not line["poked"]  # nobody reads the FIFO: the rank is gone
    assert (run / "nccl_trace_rank_0").exists()


def test_a_link_or_a_file_where_the_fifo_should_be_is_never_written(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("")
    (run / "fr_pipe_3.pipe").symlink_to(target)
    (run / "fr_pipe_4.pipe").write_text("")
    with Dir.open(str(run)) as d:
        lines = cw.node_round(d)
    assert [(line["rank"], line["poked"], line["problem"]) for line in lines] == [
        (3, False, "no dump yet"), (4, False, "no dump yet")]
    assert target.read_text() == "" and (run / "fr_pipe_4.pipe").read_text() == ""


def test_the_dump_line_torch_prints_is_recognised():
    line = (HELD / "rank0_stderr_dump_line.txt").read_text()
    assert rank_output.DUMP_LINE.search(line) and not rank_output.DUMP_LINE.search("[rank0]: Watchdog caught collective operation timeout")


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=400))
def test_a_nodes_answer_is_parsed_whatever_it_holds(text):
    for line in parse_round(text):
        assert set(line) in ({"rank", "wait_s", "window_s", "collectives"}, {"rank", "problem"},
                             {"rank", "wait_s", "window_s", "collectives", "cpu_s", "at"})


def test_the_watch_names_a_rank_two_rounds_in_a_row_and_lets_it_go_after_two_without(tmp_path):
    import argparse

    watch = CollectiveWatch(argparse.Namespace(name="c", job=argparse.Namespace(outputs=str(tmp_path))), "run", None)
    held = verdict.WaitsVerdict("g1", 1, 0.56, 2.7, 0.10, 0.66, 7.4)
    watch.judged.verdicts = [None, held]
    assert watch.found() is None
    watch.judged.verdicts = [held, held]
    assert watch.found() == held and not watch.recovered("g1", 1)
    named = stragglers.of_waits(held, step_s=0.5, now=100.0)
    assert named.by_flight_recorder and named.lag_s == 0.28 and "flight recorder" in named.line()
    watch.judged.verdicts = [held, None]
    assert not watch.recovered("g1", 1)
    watch.judged.verdicts = [None, None]
    assert watch.recovered("g1", 1) and watch.found() is None


def test_detached_the_supervisor_names_the_rank_from_the_keepers_rounds_and_lets_it_go():
    """The keepers' beats carry their latest round (node_stragglers.Sampler.summary's `waits`); the supervisor's
    verdict (straggler_verdict.Watch, the one copy) sets the nodes' latest rounds side by side every WAITS_ROUND_S."""
    watch = straggler_verdict.Watch()
    step = verdict.WAITS_ROUND_S

    def beat(at, held_share):
        watch.heard("g0", {"samples": [], "waits": {"at": at, "ranks": [[0, 6.6, 10.0]]}})
        watch.heard("g1", {"samples": [], "waits": {"at": at, "ranks": [[1, held_share * 10, 10.0]]}})

    beat(1000.0, 0.10)
    assert not watch.judge(1000.0)  # one round: not yet
    beat(1000.0 + step, 0.10)
    assert watch.judge(1000.0 + step)
    [named] = watch.found()
    assert (named["host"], named["rank"], named["until"]) == ("g1", 1, None)
    assert named["evidence"] == "its collectives waited 10% of its last 10 s on the GPU, the other ranks' 66% (flight recorder)"
    # the py-spy samples (which cannot see this wait) do not let it go; two rounds without it do
    watch.heard("g0", {"samples": [[int(1000 + step), [[0, 1]]]]})
    watch.heard("g1", {"samples": [[int(1000 + step), [[1, 1]]]]})
    assert not watch.judge(1000.0 + step + 5)
    beat(1000.0 + 2 * step, 0.62)
    assert not watch.judge(1000.0 + 2 * step)
    beat(1000.0 + 3 * step, 0.64)
    assert watch.judge(1000.0 + 3 * step) and watch.found()[0]["until"] == 1000.0 + 3 * step


def test_detached_stale_or_garbled_rounds_are_not_judged():
    watch = straggler_verdict.Watch()
    watch.heard("g0", {"waits": {"at": 10.0, "ranks": [[0, 6.6, 10.0], ["x", 1, 2], [1, -1, 3], "junk"]}})
    watch.heard("g1", {"waits": {"at": "soon", "ranks": [[1, 1.0, 10.0]]}})
    watch.heard("g2", {"waits": []})
    assert watch.waits == {"g0": (10.0, {0: (6.6, 10.0)})}
    assert not watch.judge(10.0 + 3 * verdict.WAITS_ROUND_S)  # two rounds old and more: not judged
    assert watch.waits_rounds.verdicts == []


def test_a_rank_whose_dumps_say_nothing_is_said_once_with_why(tmp_path):
    import argparse

    notes = []
    from clusterctl.watch.straggler_watch import StragglerWatch

    watch = StragglerWatch(argparse.Namespace(name="c", job=argparse.Namespace(outputs=str(tmp_path))), "run", None,
                           on_event=notes.append)
    for _ in range(4):
        watch.collective.problems[("g1", 1)] = ("dump not readable (12 bytes: truncated, too big or not a dump)",
                                                watch.collective.problems.get(("g1", 1), ("", 0))[1] + 1)
        watch._judge_collective()
    assert [n.text for n in notes] == ["[straggler] the flight recorder's dumps say nothing of g1 r1: dump not readable "
                                       "(12 bytes: truncated, too big or not a dump)"]


def test_rounds_that_find_no_fifo_come_further_apart_never_stop_and_one_found_brings_the_pace_back(tmp_path):
    """A process group made after a long preparation (a dataset tokenized for half an hour before
    `init_process_group`) makes its FIFO late: the rounds back off to one every WAITS_IDLE_MAX_S, and go on."""
    import argparse

    pauses = [verdict.waits_pause_s(idle) for idle in range(40)]
    assert pauses[0] == verdict.WAITS_ROUND_S and pauses == sorted(pauses) and max(pauses) == verdict.WAITS_IDLE_MAX_S
    assert pauses[-1] == verdict.WAITS_IDLE_MAX_S <= 120  # found within 2 minutes of its FIFO, however late
    watch = CollectiveWatch(argparse.Namespace(name="c", job=argparse.Namespace(outputs=str(tmp_path))), "run", None)
    gaps = []
    for fifos in (0, 0, 0, 2, 0):
        before = __import__("time").monotonic()
        watch._scheduled(fifos)
        gaps.append(round(watch._next_at - before))
    assert gaps == [30, 60, 120, 15, 30] and watch.enabled
    for _ in range(200):  # 200 rounds (~6.5 hours) without a FIFO
        watch._scheduled(0)
    assert watch.enabled and round(watch._next_at - __import__("time").monotonic()) == verdict.WAITS_IDLE_MAX_S


# pytorch/examples' FSDP2 example over NCCL on 2 x H200 (docs/gpu-validation.md, "FSDP2 and DeepSpeed ZeRO-2 over
# NCCL"): each round's figures as the watch reported them. Left alone, one rank's collectives ran 100% of its time
# and the other's 2% for a minute at a time (its CPU runs ahead; the collectives overlap), each window the ring's
# 2000 collectives over 3-4 s; with rank 1 held 23% of the time the windows spanned 5 s, held 44% 8 s. Without the
# ranks' CPU (tests/unit/test_waits_cpu.py) such shares name nobody, however the pace goes.
def _fsdp2_round(window_s, behind=1):
    return {("g0", rank): ((0.02 if rank == behind else 1.0) * window_s, window_s, 2000) for rank in (0, 1)}


def test_saturated_shares_alone_name_nobody_whatever_the_pace():
    windows = [3.4, 3.9, 3.1, 4.0, 3.6, 3.3, 4.2, 3.8, 5.0, 5.0, 8.0, 8.0]  # left alone, then as if held 23%, 44%
    for behind in (0, 1):  # which rank is behind flips: nobody either way
        judged = verdict.WaitsRounds()
        assert [judged.add(_fsdp2_round(window_s, behind)) for window_s in windows] == [None] * len(windows)
    counted = {key: m[:2] for key, m in _fsdp2_round(8.0).items()}  # a keeper that sends no counts
    assert verdict.judge_waits(counted) is None
