"""Property tests: the diagnosis never raises on arbitrary text or bytes, and its answers keep
their shape (ranked, at most three, confidences in 0..1, evidence never empty)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from clusterctl_helpers import examples
from hypothesis import strategies as st

from clusterctl.diagnose import CAUSES, diagnose_text, nodediag, similar_cases
from clusterctl.diagnose.reader import LogInputError, read_log
from clusterctl.diagnose.similar import terms

FRAGMENTS = st.sampled_from([
    "[rank3]: ", "Traceback (most recent call last):", "RuntimeError: CUDA error: invalid device ordinal",
    "exitcode  : -9 (pid: 4242)", "Root Cause (first observed failure):", "  rank      : 3 (local_rank: 3)",
    "NCCL WARN NET/IB : Got completion from peer 10.0.0.1<1> with status=12", "Killed", "\x1b[31m", "\r",
    "Watchdog caught collective operation timeout", "No space left on device", "E0101 00:00:00.000 x.cc:1] ",
    "2024-05-01T10:00:00.123Z ", "worker-1: ", "\t", "\n", "\x00", "\ufffd", "ｅｒｒｏｒ", "Error:" * 50])
LOGS = st.lists(st.one_of(FRAGMENTS, st.text(max_size=40)), max_size=40).map("".join)


def _check(findings):
    assert 1 <= len(findings) <= 3
    assert all(f.cause in CAUSES and 0 <= f.confidence <= 1 and f.evidence for f in findings)
    assert len({(f.cause, f.host) for f in findings}) == len(findings)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LOGS)
def test_diagnose_text_never_raises_and_keeps_its_shape(text):
    _check(diagnose_text(text))


@settings(max_examples=examples(200), deadline=None)
@given(st.text(max_size=400))
def test_any_unicode_text_is_diagnosed(text):
    _check(diagnose_text(text, host="h", rank=1, source="x-r1.log"))


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=2000))
def test_any_bytes_on_disk_are_either_read_or_refused_cleanly(tmp_path, data):
    path = tmp_path / "x.log"
    path.write_bytes(data)
    try:
        text = read_log(path)
    except LogInputError as error:
        assert error.where == str(path) and error.fix
    else:
        _check(diagnose_text(text))


@settings(max_examples=examples(200), deadline=None)
@given(LOGS)
def test_node_parsers_and_similarity_never_raise(text):
    nodediag.oom_kills(text), nodediag.xids(text), nodediag.ecc_state(text), nodediag.container_state(text)
    terms(text)
    assert all(0 < case.score <= 1.0001 for case in similar_cases(text))
