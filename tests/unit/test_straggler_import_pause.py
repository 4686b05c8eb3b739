"""The straggler watch leaves the ranks alone while they import (issue 52): a round that found every rank
still inside `import` puts off the next by IMPORTING_PAUSE_S; a round with any rank past its imports does not."""
from __future__ import annotations

from pathlib import Path

from clusterctl.watch.stacks import Frame, RankStack, ThreadStack, parse_pyspy_json
from clusterctl.watch.straggler_watch import all_importing


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
