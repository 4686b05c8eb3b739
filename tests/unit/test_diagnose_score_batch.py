"""bench/score_batch.py, the first-score protocol: a batch is read only when frozen, every log must
match its FROZEN hash, `other:<name>` labels map only through the aliases fixed before scoring."""
from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("score_batch", REPO / "bench" / "score_batch.py")
score_batch = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(score_batch)

ENTRY = ("# source: https://example.invalid/thread/{name}\n# cause: {cause}\n# confirmed: no\n# fix: the fix, in words.\n\n"
         "{text}\n")


def _batch(tmp_path: Path, logs: dict, frozen: bool = True) -> Path:
    for name, (cause, text) in logs.items():
        (tmp_path / name).write_text(ENTRY.format(name=name, cause=cause, text=text))
    if frozen:
        (tmp_path / "FROZEN").write_text("".join(
            f"{hashlib.sha256((tmp_path / n).read_bytes()).hexdigest()}  {n}\n" for n in logs))
    return tmp_path


def test_a_frozen_batch_is_scored_case_by_case(tmp_path):
    batch = _batch(tmp_path, {"a.log": ("cuda_oom", "torch.OutOfMemoryError: CUDA out of memory."),
                              "b.log": ("other:rank_desync", "RuntimeError: Detected mismatch between collectives on "
                                                             "ranks. Rank 0 is running collective")})
    cases, digest, left_out = score_batch.load_batch([batch])
    rows = score_batch.score(cases)
    assert [r["cause"] for r in rows] == ["cuda_oom", "collective_mismatch"] and len(digest) == 64
    assert score_batch.figures(rows)["top1"] == 2 and left_out == []


def test_one_thread_counts_once_and_never_one_the_corpus_holds(tmp_path):
    """Two collectors met the same thread (batch 28): the first directory's copy counts; a corpus thread never."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    corpus_source = next(iter(sorted(score_batch.corpus_threads())))
    for directory, source in ((first, "https://github.com/o/p/issues/7#issuecomment-1"),
                              (second, "http://www.github.com/o/p/issues/7/")):
        (directory / "a.log").write_text(f"# source: {source}\n# cause: cuda_oom\n\nCUDA out of memory.\n")
    (second / "b.log").write_text(f"# source: https://{corpus_source}\n# cause: cuda_oom\n\nCUDA out of memory.\n")
    for directory in (first, second):
        names = sorted(path.name for path in directory.glob("*.log"))
        (directory / "FROZEN").write_text("".join(
            f"{hashlib.sha256((directory / n).read_bytes()).hexdigest()}  {n}\n" for n in names))
    cases, _digest, left_out = score_batch.load_batch([first, second])
    assert [c["file"] for c in cases] == ["a/a.log"] and left_out == ["b/a.log", "b/b.log"]


def test_a_thread_an_earlier_batch_counted_is_left_out(tmp_path):
    """After batch 32 (one of its logs repeated batch 25's thread): the rows of earlier first scores name their
    threads, and a later batch's copy of one is left out; a re-score of that batch itself still reads it."""
    rows = json.loads((score_batch.SCORES / "batch-31.json").read_text())["rows"]
    earlier = next(row["source"] for row in rows if row["label"].startswith("other:"))  # never joined the corpus
    assert score_batch.thread_of(earlier) not in score_batch.corpus_threads()
    batch = tmp_path / "batch-99a"
    batch.mkdir()
    (batch / "a.log").write_text(f"# source: {earlier}\n# cause: cuda_oom\n\nCUDA out of memory.\n")
    (batch / "FROZEN").write_text(f"{hashlib.sha256((batch / 'a.log').read_bytes()).hexdigest()}  a.log\n")
    cases, _digest, left_out = score_batch.load_batch([batch])
    assert cases == [] and left_out == ["batch-99a/a.log"]
    assert score_batch.thread_of(earlier) not in score_batch.scored_threads("31")


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


def test_an_alias_reads_a_word_between_two_not_a_whole_name():
    """`\\w` spans underscores: batch 29's and 28's labels had mapped by words the names do not say."""
    assert score_batch.label_of("other:fsdp_cuda_stream_on_xpu_build") == "other:fsdp_cuda_stream_on_xpu_build"
    assert score_batch.label_of("other:ucx_shm_across_user_namespaces") == "other:ucx_shm_across_user_namespaces"
    assert score_batch.label_of("other:cuda_extension_build_failed") == "extension_build_failed"
    assert score_batch.label_of("other:shm_out_of_space") == "shm_too_small"
