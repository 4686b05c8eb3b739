"""bench/score_batch.py, the first-score protocol: a batch is read only when frozen, every log must
match its FROZEN hash, `other:<name>` labels map only through the aliases fixed before scoring."""
from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("score_batch", REPO / "bench" / "score_batch.py")
score_batch = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(score_batch)

ENTRY = ("# source: https://example.invalid/thread/1\n# cause: {cause}\n# confirmed: no\n# fix: the fix, in words.\n\n"
         "{text}\n")


def _batch(tmp_path: Path, logs: dict, frozen: bool = True) -> Path:
    for name, (cause, text) in logs.items():
        (tmp_path / name).write_text(ENTRY.format(cause=cause, text=text))
    if frozen:
        (tmp_path / "FROZEN").write_text("".join(
            f"{hashlib.sha256((tmp_path / n).read_bytes()).hexdigest()}  {n}\n" for n in logs))
    return tmp_path


def test_a_frozen_batch_is_scored_case_by_case(tmp_path):
    batch = _batch(tmp_path, {"a.log": ("cuda_oom", "torch.OutOfMemoryError: CUDA out of memory."),
                              "b.log": ("other:rank_desync", "RuntimeError: Detected mismatch between collectives on "
                                                             "ranks. Rank 0 is running collective")})
    cases, digest = score_batch.load_batch([batch])
    rows = score_batch.score(cases)
    assert [r["cause"] for r in rows] == ["cuda_oom", "collective_mismatch"] and len(digest) == 64
    assert score_batch.figures(rows)["top1"] == 2


def test_an_unfrozen_or_changed_batch_is_refused(tmp_path):
    unfrozen, frozen = tmp_path / "unfrozen", tmp_path / "frozen"
    unfrozen.mkdir(), frozen.mkdir()
    with pytest.raises(SystemExit, match="not frozen"):
        score_batch.load_batch([_batch(unfrozen, {"a.log": ("cuda_oom", "x")}, frozen=False)])
    batch = _batch(frozen, {"a.log": ("cuda_oom", "x")})
    (batch / "a.log").write_text("changed")
    with pytest.raises(SystemExit, match="hash differs"):
        score_batch.load_batch([batch])


def test_other_labels_count_only_through_the_fixed_aliases():
    assert score_batch.label_of("other:same_hostname") == "duplicate_host"
    assert score_batch.label_of("other:illegal_memory_access") == "other:illegal_memory_access"
