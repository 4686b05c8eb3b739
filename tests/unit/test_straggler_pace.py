"""What keeps the straggler watch's cost down (issue 52), on the controller's side: a rank the node did not
dump again (`same`: its main thread has not run since its last good dump) reads as that dump with its new
state, and the rounds' pace: short rounds while the window fills, rounds at 1 s while anything is
singled out or named, steady rounds (STEADY_SAMPLES, STEADY_INTERVAL_S apart) once the window is full and
quiet. The node output is a real capture (tests/fixtures/pyspy/node_straggler_slow_r1_2ranks.txt) with
its second sample rewritten as the node now says it."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from clusterctl.watch import stragglers
from clusterctl.watch.sampler import MARK, parse_node_output
from clusterctl.watch.stacks import RankStack, ThreadStack, Frame
from clusterctl.watch.straggler_watch import SAMPLES, STEADY_INTERVAL_S, STEADY_SAMPLES, StragglerWatch, quiet

CAPTURE = (Path(__file__).resolve().parents[1] / "fixtures" / "pyspy" / "node_straggler_slow_r1_2ranks.txt").read_text()


def _with_second_sample_unchanged(text: str) -> str:
    """Sample 2 of the capture as a node that found both ranks not run since sample 1 prints it."""
    out, skipping = [], False
    for line in text.splitlines():
        head = re.match(re.escape(MARK) + r"rank 2 (\d+) (\d+) (\S+) (\d+) (\d+)(.*)$", line)
        if head:
            out.append(f"{MARK}rank 2 {head[1]} {head[2]} {head[3]} {head[4]} 0 S futex_wait_queue same")
            skipping = True
            continue
        if line.startswith(MARK):
            skipping = False
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def test_a_rank_not_dumped_again_reads_as_its_earlier_dump_with_its_new_state():
    original = parse_node_output(CAPTURE, "node1").samples
    node = parse_node_output(_with_second_sample_unchanged(CAPTURE), "node1")
    assert len(node.samples) == len(original)
    for before, now in zip(node.samples[0], node.samples[1]):
        assert now.threads == before.threads and not now.error
        assert (now.state, now.wchan) == ("S", "futex_wait_queue")
    assert node.samples[2:] == original[2:]


def test_a_same_without_an_earlier_dump_is_a_rank_not_read():
    text = f"{MARK}uid 0\n{MARK}rank 1 4242 0 0 128 0 S futex_wait_queue same\n"
    [[rank]] = parse_node_output(text, "node1").samples
    assert rank.frames == () and rank.error


def _rank(rank: int, waiting: bool) -> RankStack:
    where = "torch/distributed/distributed_c10d.py" if waiting else "train.py"
    return RankStack("node1", rank, rank, 100 + rank, (ThreadStack("MainThread", True, (Frame("f", where, 1),)),))


def _watch() -> StragglerWatch:
    return StragglerWatch(argparse.Namespace(name="pace", job=argparse.Namespace(outputs=None)), "run-1", connections=None,
                          on_event=lambda event: None)


ALIKE = [_rank(0, False), _rank(1, False)]  # both working: nobody singled out
SINGLED = [_rank(0, True), _rank(1, False)]  # rank 1 working while rank 0 waits


def test_the_pace_is_steady_only_once_the_window_is_full_and_the_last_round_quiet():
    watch = _watch()
    assert watch._pace() == (1, 1.0)  # a look: no rank read past its imports yet
    watch._looking = False
    assert watch._pace() == (5, 1.0)  # the window fills
    watch.window.extend([ALIKE] * (stragglers.WINDOW // 2))
    assert watch._pace() == (SAMPLES, 1.0)
    watch.window.extend([ALIKE] * stragglers.WINDOW)
    watch._quiet = True
    assert watch._pace() == (STEADY_SAMPLES, STEADY_INTERVAL_S)
    assert (STEADY_SAMPLES - 1) * STEADY_INTERVAL_S <= SAMPLES  # a steady round lasts no longer than one at 1 s


def test_a_round_that_singles_a_rank_out_or_a_named_rank_brings_back_1_s():
    watch = _watch()
    watch._looking = False
    watch.window.extend([ALIKE] * stragglers.WINDOW)
    assert quiet([ALIKE, ALIKE]) and not quiet([ALIKE, SINGLED]) and not quiet([])
    watch._quiet = quiet([ALIKE, SINGLED])
    assert watch._pace() == (SAMPLES, 1.0)
    watch._quiet, watch.named = True, object()
    assert watch._pace() == (SAMPLES, 1.0)


def test_the_run_s_end_waits_for_a_round_under_way_so_what_it_kept_is_known_before_its_removal():
    """A first round ships py-spy and the node keeps it: a run that ended while it was under way removed the kept
    directories first and the round kept its copy after (two leaks in /tmp in a day of local-tier runs). The run's
    end now settles the round (a few seconds at most) before KeptPySpy.forget."""
    import time as clock

    from clusterctl.executor import Background
    from clusterctl.models import Host, HostResult, HostStatus

    watch, kept_at = _watch(), []

    def slow_round(_transport, host):
        clock.sleep(0.3)
        kept_at.append(clock.monotonic())
        watch.kept.heard(None, host.name, "a" * 64, False)
        return HostResult(host.name, HostStatus.OK)

    class Connections:  # the executor's per-host transport lookup; a round here needs none
        def get(self, host):
            return None

        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    watch._round = Background([Host("n1", "10.0.0.1")], slow_round, Connections())
    watch.settle(3.0)
    settled_at = clock.monotonic()
    assert kept_at and kept_at[0] <= settled_at and watch.kept.held("n1", "a" * 64)
