"""The straggler verdict names a rank only when chance cannot explain how often it was singled out.
The counts come from real runs: docs/gpu-validation/hf-trainer/quiet.json and watch49/quiet.json (one H200,
2 ranks, untouched: 5 singled-out samples of one rank, 0 of the other, named before this rule),
hf-trainer/slowed.json (rank 1 held 60% of the time: 25 of 40) and the 4 x H100 run of issue 37
(docs/gpu-validation.md "Stragglers": a rank 20% slower singled out in 5 of 34 samples, the others 0)."""
from clusterctl.node.straggler_verdict import Reading, by_chance, judge


def _samples(world: int, singled: dict, total: int):
    """`total` samples of `world` ranks on hosts g0.., rank r singled out (working, every other waiting) in
    singled[r] of them, every rank working in the rest."""
    out = []
    for rank, times in singled.items():
        out += [[Reading(f"g{r}", r, r != rank) for r in range(world)]] * times
    out += [[Reading(f"g{r}", r, False) for r in range(world)]] * (total - len(out))
    return out


def test_two_alike_ranks_singling_one_out_5_times_of_5_is_chance_and_names_nobody():
    assert by_chance(5, 5, 2) == 2 * 0.5 ** 5
    assert judge(_samples(2, {0: 5}, 40)) is None  # the untouched Trainer run on one H200
    assert judge(_samples(2, {1: 5}, 20)) is None  # the untouched DDP tutorial run


def test_a_rank_held_from_outside_in_a_world_of_two_is_still_named():
    verdict = judge(_samples(2, {1: 25}, 40))
    assert (verdict.host, verdict.rank, verdict.singled_out) == ("g1", 1, 25)


def test_five_of_five_among_four_ranks_is_not_chance_so_the_20_percent_slower_h100_rank_is_still_named():
    assert by_chance(5, 5, 4) < 0.01
    verdict = judge(_samples(4, {2: 5}, 34))
    assert (verdict.rank, verdict.singled_out) == (2, 5)


def test_chance_grows_with_the_other_ranks_share_of_the_singled_out_samples():
    assert by_chance(8, 8, 2) < 0.01 < by_chance(8, 10, 2) < by_chance(6, 10, 2) <= 1.0
    assert by_chance(3, 0, 2) == 1.0 and by_chance(3, 3, 1) == 1.0
