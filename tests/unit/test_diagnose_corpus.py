"""The diagnosis corpus: real failure logs from public issue threads, their format, the frozen
test split, and the accuracy on the split the rules were tuned on (the held-out split is only
scored by `make diagnose-report`, never asserted here: asserting it would be tuning on it)."""
from __future__ import annotations

from collections import Counter

import pytest

from clusterctl.diagnose import CAUSES, corpus, diagnose_text

ENTRIES = corpus.load()
TEST = corpus.frozen_test_paths()
TRAIN = [e for e in ENTRIES if e.path not in TEST]


def test_the_corpus_holds_at_least_250_real_logs_across_at_least_25_causes():
    causes = Counter(e.cause for e in ENTRIES)
    assert len(ENTRIES) >= 250
    assert len(causes) >= 25
    required = {"gpu_xid", "cuda_oom", "ecc_error", "disk_full", "image_pull_failed", "import_error",
                "permission_denied", "ib_config", "nccl_socket_error", "shm_too_small", "oom_killed",
                "docker_no_gpu_runtime", "gpu_ordinal", "config_divisibility", "rdzv_unreachable"}
    assert required <= set(causes)
    assert all(count >= 3 for count in causes.values()), causes


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.path)
def test_every_entry_names_a_public_source_a_known_cause_and_a_fix(entry):
    assert entry.source.startswith("https://"), entry.source
    assert entry.family == corpus.ORIGINAL_FAMILY or (entry.family and entry.collected), entry.path
    assert entry.cause in CAUSES and entry.cause != "unknown"
    assert entry.path.startswith(entry.cause + "/")
    assert len(entry.fix) > 20 and entry.text.strip()
    assert len(entry.text.encode()) < 16_384


def test_entry_headers_parse_and_a_bad_header_names_the_file_and_the_missing_key():
    entry = corpus.parse_entry("# source: https://x\n# cause: oom_killed\n# confirmed: yes\n# fix: f\n\nKilled\n")
    assert (entry.cause, entry.confirmed, entry.text) == ("oom_killed", True, "Killed\n")
    with pytest.raises(ValueError, match=r"a\.log: corpus entry header lacks fix"):
        corpus.parse_entry("# source: https://x\n# cause: oom_killed\n# confirmed: no\n\nKilled\n", "a.log")


def test_the_test_split_is_frozen_by_a_seeded_hash_of_the_source_url():
    cutoff = corpus.frozen_cutoff()
    # issue 51: first-scored batch logs are training entries whatever their hash (they were tuned on)
    hashed = [e for e in ENTRIES if not corpus.first_scored(e)]
    assert TEST == {e.path for e in hashed if corpus.in_test_split(e.source, cutoff)}
    assert 0.27 <= len(TEST) / len(hashed) <= 0.33
    assert corpus.split_hash("https://github.com/NVIDIA/nccl/issues/426") == \
        corpus.split_hash("https://github.com/NVIDIA/nccl/issues/426 ")  # stable, whitespace-blind


def test_one_thread_never_spans_both_splits():
    sides: dict = {}
    for entry in ENTRIES:
        sides.setdefault(entry.source, set()).add(entry.path in TEST)
    assert all(len(side) == 1 for side in sides.values())


def test_the_rules_name_the_training_split_causes_first_and_within_the_top_three():
    """Over the entries the rules were written on; issue 51's first-scored batch logs (train side, but
    labelled by others and harder) are measured in docs/diagnosis.md, not asserted here."""
    top1 = top3 = 0
    written_on = [e for e in TRAIN if not corpus.first_scored(e)]
    for entry in written_on:
        causes = [f.cause for f in diagnose_text(entry.text)]
        top1 += causes[0] == entry.cause
        top3 += entry.cause in causes[:3]
    assert top1 / len(written_on) >= 0.95 and top3 / len(written_on) >= 0.98, (top1, top3, len(written_on))
