"""The straggler verdict's test against chance (node/straggler_verdict.py), on what the H200 runs of
docs/gpu-validation/watch49 recorded: the public DDP tutorial's multinode.py, two `connection: local` hosts
g0 and g1, one rank each, over gloo on one H200.

- left alone (quiet.json): g1 r1 named 29 s into the run, "5 of the last 20 samples working while the other
  1 rank waited", lag_share 0.444, ratio 1.48; never refreshed afterwards (no later window named it again);
- rank 1 held 60% of the time from outside (slowed.json): "24 of the last 40", lag_share 0.737, ratio 3.27;
- rank 1 frozen at 22 s (frozen.json): "21 of the last 35", lag_share 0.706, ratio 2.88.

The samples below are the ones those numbers pin down (the counts of each kind; their order does not
matter to the verdict): rank 0 read in 18 of 20 samples and waiting in 8 (0.444), rank 1 read in 17 and
waiting in 3 ((1 - 3/17) / (1 - 8/18) = 1.48), rank 1 singled out 5 times and rank 0 at most once (the
dominance rule let it through)."""
from __future__ import annotations

from clusterctl.node.straggler_verdict import ALPHA, Reading, chance, judge

R0, R1 = ("g0", 0), ("g1", 1)


def _sample(r0, r1):
    """One sample: each rank waiting (True), working (False) or unread (None)."""
    return [Reading(*key, waiting) for key, waiting in ((R0, r0), (R1, r1)) if waiting is not None]


def _quiet():
    return ([_sample(True, False)] * 5 + [_sample(True, True)] * 2 + [_sample(False, True)]
            + [_sample(True, None)] + [_sample(False, None)] * 2 + [_sample(None, False)] * 2
            + [_sample(False, False)] * 7)


def _slowed(singled_out, samples, runner_up):
    """Rank 1 singled out `singled_out` times, rank 0 `runner_up` times, both working in the rest."""
    rest = samples - singled_out - runner_up
    return [_sample(True, False)] * singled_out + [_sample(False, True)] * runner_up + [_sample(False, False)] * rest


def test_the_recorded_untouched_h200_run_is_reproduced_by_the_thresholds_alone(monkeypatch):
    from clusterctl.node import straggler_verdict

    monkeypatch.setattr(straggler_verdict, "ALPHA", 1.0)  # the verdict before its test against chance
    found = judge(_quiet())
    assert (found.host, found.rank, found.singled_out, found.samples) == ("g1", 1, 5, 20)
    assert (round(found.lag_share, 3), round(found.ratio, 2)) == (0.444, 1.48)  # as quiet.json recorded
    # what the recorded run said: its lead (5 to 1 of 2 ranks) is one chance gives either rank 22% of the time
    assert chance(5, 6, 2) > 0.2 and chance(5, 5, 2) > 0.06


def test_the_untouched_two_rank_run_names_nobody():
    assert judge(_quiet()) is None
    without_the_one = [s for s in _quiet() if [r.waiting for r in s] != [False, True]]
    assert judge(without_the_one) is None  # 5 to 0 of 2 ranks: 1 in 16 for either rank, still chance


def test_the_recorded_slowed_and_frozen_ranks_are_still_named():
    for singled, samples in ((24, 40), (21, 35)):
        found = judge(_slowed(singled, samples, 2))
        assert (found.host, found.rank, found.singled_out, found.samples) == ("g1", 1, singled, samples)


def test_more_ranks_make_a_lone_lead_less_likely_by_chance():
    assert chance(5, 6, 6) < ALPHA < chance(5, 6, 2)  # 6 ranks (3 nodes x 2): 5 of 6 is telling
    assert chance(10, 10, 2) < ALPHA and chance(10, 13, 2) > ALPHA
    assert chance(0, 0, 4) == 1.0 and chance(3, 3, 1) == 1.0


def test_the_untouched_hf_trainer_run_and_the_slower_h100_rank_of_four():
    """docs/gpu-validation/hf-trainer: a plain Trainer loop, 2 ranks on one H200, left alone, named g0 r0 on
    "5 of the last 40 samples" (ratio 1.75) before this test; held from outside, g1 r1 "25 of the last 40".
    docs/gpu-validation.md "Stragglers" (issue 37): on 4 x H100 a rank 20% slower was singled out in 5 of 34
    samples, the others in none: among four ranks a lead of 5 to 0 is not chance, and it is still named."""
    left_alone = [_sample(False, True)] * 5 + [_sample(False, False)] * 35
    assert judge(left_alone) is None
    held = judge(_slowed(25, 40, 0))
    assert (held.host, held.rank, held.singled_out) == ("g1", 1, 25)
    four = [[Reading(f"h{r}", r, r != 2) for r in range(4)]] * 5 + [[Reading(f"h{r}", r, False) for r in range(4)]] * 29
    assert chance(5, 5, 4) < ALPHA and (judge(four).host, judge(four).rank) == ("h2", 2)
