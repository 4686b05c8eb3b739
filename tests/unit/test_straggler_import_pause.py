"""The straggler watch leaves the ranks alone while they import (issue 52): it looks (one sample) until a
rank is read past its imports; a look that found every rank still inside `import` puts off the next by
straggler_verdict.import_pause_s (5 s, doubled, up to 20 s), IMPORTING_PAUSE_S once a rank printed since."""
from __future__ import annotations

import argparse
from pathlib import Path

from clusterctl.watch.stacks import Frame, RankStack, ThreadStack, parse_pyspy_json
from clusterctl.watch.straggler_watch import StragglerWatch, all_importing, past_imports


def _rank(rank: int, *functions: str) -> RankStack:
    frames = tuple(Frame(name, "<frozen importlib._bootstrap>" if name.startswith("_") else "train.py", 1)
                   for name in functions)
    return RankStack("node1", rank, rank, 100 + rank, (ThreadStack("MainThread", True, frames),))


IMPORTING = ("_call_with_frames_removed", "_find_and_load", "<module>")  # `import torch`, innermost first


def test_a_round_of_ranks_all_inside_import_is_importing():
    assert all_importing([[_rank(0, *IMPORTING), _rank(1, *IMPORTING)], [_rank(0, *IMPORTING)]])


def test_one_rank_past_its_imports_or_nothing_read_is_not():
    assert not all_importing([[_rank(0, *IMPORTING), _rank(1, "all_reduce", "train_step", "<module>")]])
    assert not all_importing([[RankStack("node1", 0, 0, 100, error="no stack")]])
    assert not all_importing([])


def test_a_real_rank_inside_import_torch_reads_as_importing():
    threads, error = parse_pyspy_json((Path(__file__).parents[1] / "fixtures" / "pyspy" / "importing_torch.json").read_text())
    assert not error
    assert all_importing([[RankStack("node1", 0, 0, 100, threads)]])


def test_looks_back_off_while_every_rank_imports_and_a_printed_line_brings_the_next_one_forward():
    from clusterctl.node.straggler_verdict import IMPORT_PAUSE_MAX_S, IMPORT_PAUSE_S, import_pause_s

    assert [import_pause_s(n) for n in (1, 2, 3, 4, 9)] == [IMPORT_PAUSE_S, 2 * IMPORT_PAUSE_S, 4 * IMPORT_PAUSE_S,
                                                             IMPORT_PAUSE_MAX_S, IMPORT_PAUSE_MAX_S]
    watch = StragglerWatch(argparse.Namespace(name="pace", job=argparse.Namespace(outputs=None)), "run-1", connections=None,
                           on_event=lambda event: None)
    watch._looking, watch._looks, watch._looked_at, watch._next_at = True, 3, 100.0, 120.0
    assert watch._due() == 120.0
    watch.heard(1, "loading data")
    assert watch._due() == 100.0 + IMPORT_PAUSE_S
    watch._looking = False  # past the imports: the rounds' own pace
    assert watch._due() == 120.0


def test_a_look_that_reads_a_rank_past_its_imports_ends_the_looks_and_only_it_is_judged():
    past = [[_rank(0, *IMPORTING), _rank(1, "all_reduce", "train_step", "<module>")]]
    assert past_imports(past)
    assert not past_imports([[_rank(0, *IMPORTING), _rank(1, *IMPORTING)]])
    assert not past_imports([[RankStack("node1", 0, 0, 100, error="no stack")]]) and not past_imports([])
