"""The straggler analysis (clusterctl/watch/stragglers.py) on real py-spy samples, and the progress lines
it reads the step time from. The samples: clusterctl's node script (16 non-blocking samples 0.5 s
apart) of tests/fixtures/jobs/straggler.py under torchrun with 2 gloo ranks, rank 1 0.35 s slower on a
0.2 s step, and the same job with both ranks alike (tests/fixtures/pyspy/SOURCES.md)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from hypothesis import given, settings
from clusterctl_helpers import examples
from hypothesis import strategies as st

from clusterctl.watch.sampler import parse_node_output
from clusterctl.watch.stragglers import Progress, find, progress_of, recovered, step_time, tally

PYSPY = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy"


def _samples(name: str, host: str = "node1"):
    return [list(sample) for sample in parse_node_output((PYSPY / name).read_text(), host).samples]


SLOW = "node_straggler_slow_r1_2ranks.txt"
HEALTHY = "node_straggler_healthy_2ranks.txt"


def test_the_rank_slower_by_0_35_s_on_a_0_2_s_step_is_named_with_its_lag_and_ratio():
    found = find(_samples(SLOW), step_s=0.55, now=100.0, gpu_of={("node1", 1): 3})
    assert (found.host, found.rank, found.gpu) == ("node1", 1, 3)
    # the other rank waited 10 of 16 samples: 0.625 of a 0.55 s step ~ 0.34 s (the job sleeps 0.35 s more)
    assert abs(found.lag_s - 0.35) < 0.05 and abs(found.ratio - 0.55 / 0.2) < 0.3
    assert found.evidence == "10 of the last 16 samples working while the other 1 rank waited in a collective"
    assert found.line() == ("node1 r1 (GPU 3): +0.34 s per step (2.7x the median), 10 of the last 16 samples "
                            "working while the other 1 rank waited in a collective")
    assert set(found.to_json()) >= {"host", "rank", "gpu", "lag_s", "ratio", "since", "evidence"}


def test_without_a_step_time_the_lag_is_said_as_a_share_of_the_step():
    found = find(_samples(SLOW), step_s=None, now=0.0)
    assert found.lag_s is None and found.how_late() == "+62% of each step"
    assert found.to_json()["lag_s"] is None


def test_a_healthy_job_names_nobody():
    assert find(_samples(HEALTHY), step_s=0.2, now=0.0) is None
    assert all(t.singled_out == 0 for t in tally(_samples(HEALTHY)).values())


def test_ranks_of_several_nodes_are_judged_together():
    both = [a + b for a, b in zip(_samples(SLOW, "node1"), [[replace(r, rank=r.rank + 2) for r in s]
                                                            for s in _samples(HEALTHY, "node2")])]
    # node2's ranks never wait: nobody is singled out while they work
    assert find(both, 0.55, 0.0) is None
    waiting = [a + [replace(r, host="node2", rank=r.rank + 2) for r in a if r.rank == 0] for a in _samples(SLOW)]
    found = find(waiting, 0.55, 0.0)
    assert (found.host, found.rank, found.others_waiting) == ("node1", 1, 2)


def test_a_rank_the_others_wait_for_in_every_sample_is_a_hang_and_not_named_a_straggler():
    hung = [s for s in _samples(SLOW) if any(r.in_collective for r in s)]
    assert len(hung) == 10 and find(hung, 0.55, 0.0) is None


def test_too_few_samples_name_nobody_yet():
    assert find(_samples(SLOW)[:4], 0.55, 0.0) is None


def test_a_named_rank_keeps_pace_again_once_the_recent_samples_no_longer_single_it_out():
    slow, healthy = _samples(SLOW), _samples(HEALTHY)
    named = find(slow, 0.55, 0.0)
    assert not recovered(slow, named)
    assert recovered(slow + healthy + healthy, named)


def test_unreadable_ranks_count_in_no_sample():
    broken = [[replace(r, threads=(), error="py-spy exited 1") for r in s] for s in _samples(SLOW)]
    assert tally(broken) == {} and find(broken, 0.55, 0.0) is None


def test_progress_lines_give_the_step_and_tqdm_rates_the_seconds_per_step():
    assert progress_of("step 120/1000 mean step 0.551s") == (120, None)
    assert progress_of("global_step=42 loss=1.2") == (42, None)
    assert progress_of(" 45%|####  | 450/1000 [00:30<03:40, 4.00it/s]") == (450, 0.25)
    assert progress_of("12/100 [00:30<03:40, 1.50s/it]") == (12, 1.5)
    assert progress_of("mean step 0.551s") == (None, None)
    assert progress_of("loading the model") == (None, None)


def test_the_step_time_follows_the_latest_run_of_steps():
    seen = [Progress(0.0, 10), Progress(5.5, 20), Progress(6.0, 1), Progress(7.0, 3), Progress(8.0, 5)]
    assert step_time(seen) == 0.5
    assert step_time([Progress(0.0, 10), Progress(1.0, 10)]) is None
    assert step_time([], [0.3, 0.25, 0.2]) == 0.25


@settings(max_examples=examples(300), deadline=None)
@given(st.text(max_size=200))
def test_any_line_gives_a_step_and_a_rate_or_none_and_never_raises(text):
    step, seconds = progress_of(text)
    assert step is None or (isinstance(step, int) and step >= 0)
    assert seconds is None or seconds > 0


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(0, 10**8), st.integers(1, 10**8), st.floats(0.01, 9999, allow_nan=False))
def test_a_tqdm_state_gives_its_count_and_rate(count, total, rate):
    step, seconds = progress_of(f" 3%|#  | {count}/{total} [00:30<03:40, {rate:.2f}it/s]")
    assert step == count and (seconds is None if f"{rate:.2f}" == "0.00" else abs(seconds - 1 / float(f"{rate:.2f}")) < 1e-6)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e6, allow_nan=False), st.integers(0, 10**6)), max_size=40),
       st.lists(st.floats(0.001, 100, allow_nan=False), max_size=5))
def test_the_step_time_is_positive_or_unknown(points, rates):
    seconds = step_time([Progress(at, step) for at, step in sorted(points)], rates)
    assert seconds is None or seconds > 0
