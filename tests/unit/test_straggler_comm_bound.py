"""The straggler verdict (node/straggler_verdict.py) on a loop that talks more than it computes: FSDP2
(tests/fixtures/jobs/ddp_plain.py --kind fsdp2) over gloo, 3 ranks on one 2-core machine, rank 2 held 44% of
every 0.1 s from outside (bench/stragglers.py's slowdown), sampled by the run's straggler watch at 1 s on
2026-11-29 12:27 UTC (load average 5-6). Each sample below is the three ranks' readings as the verdict got them:
`w` waiting (in torch.distributed's all_gather_single/reduce_scatter_single, or asleep in a library), `o`
working. The other ranks waited in 25 of the first 26 samples each (37 and 38 of 40): the wait of a peer that is
slow, not of one that stopped; the verdict that took >= 95% for a hang named nobody in 12 of the windows from
the 14th sample to the 27th (it names rank 2 from the 14th on)."""
from __future__ import annotations

from clusterctl.node.straggler_verdict import Reading, judge

FSDP2_HELD_44 = ("www www wwo www wwo wwo www wwo wow wwo www www wwo wwo www www www owo www www wwo wwo www www wwo "
                 "wwo wwo woo oww owo www wwo wwo www www wwo wwo wwo www wwo").split()


def _samples(words):
    return [[Reading("local", rank, letter == "w") for rank, letter in enumerate(word)] for word in words]


def test_a_rank_the_others_wait_for_in_nearly_every_sample_is_named():
    for count in (14, 16, 26):  # the others waiting in 96.4%, 96.9% and 96.2% of these windows
        found = judge(_samples(FSDP2_HELD_44[:count]))
        assert found is not None and (found.host, found.rank) == ("local", 2)
        assert found.lag_share > 0.95


def test_a_rank_the_others_wait_for_in_every_sample_is_still_a_hang():
    stopped = [word if word[:2] == "ww" else "wwo" for word in FSDP2_HELD_44]
    assert judge(_samples(stopped)) is None
