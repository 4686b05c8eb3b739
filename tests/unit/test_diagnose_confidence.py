"""The printed confidence (diagnose/confidence.py): monotone in the evidence, `unknown` left on FIRST's scale,
and the observed shares of the first-scored batches it was fitted on (bench/first_scores/*.json)."""
import json
from pathlib import Path

from hypothesis import given, strategies as st

from clusterctl.diagnose.confidence import FIRST, OBSERVED, RECENT, calibrated, resembling, through

SCORES = Path(__file__).resolve().parents[2] / "bench" / "first_scores"


@given(st.floats(0, 1), st.floats(0, 1))
def test_more_evidence_never_prints_less(a, b):
    low, high = sorted((a, b))
    assert calibrated(low) <= calibrated(high) and resembling(low) <= resembling(high)
    assert 0.0 <= calibrated(low) <= 1.0


def test_both_maps_are_monotone_knots():
    for knots in (FIRST, OBSERVED, RECENT):
        xs, ys = zip(*knots)
        assert list(xs) == sorted(set(xs)) and list(ys) == sorted(ys)


def test_unknown_keeps_the_first_maps_value():
    assert calibrated(0.4, "unknown") == through(FIRST, 0.4) < calibrated(0.4, "cuda_oom")


def test_the_map_prints_near_the_share_observed_where_it_was_fitted():
    """Each printed value within 0.12 of the share right among the FIRST-printed first places near it."""
    rows = [row for path in SCORES.glob("*.json") for record in [json.loads(path.read_text())]
            if record.get("confidence_kind") == "calibrated" for row in record["rows"] if not row["unknown_first"]]
    for low, high in ((0.0, 0.21), (0.21, 0.34), (0.34, 0.5), (0.5, 0.85), (0.85, 0.875), (0.875, 1.0)):
        inside = [r for r in rows if low <= r["confidence"] < high]
        share = sum(r["top1"] for r in inside) / len(inside)
        printed = sum(through(OBSERVED, r["confidence"]) for r in inside) / len(inside)
        assert abs(printed - share) < 0.12, (low, high, printed, share, len(inside))


def test_the_recent_map_prints_near_the_share_observed_on_the_batches_it_was_fitted_on():
    """RECENT, on the first places OBSERVED printed (batches 31-35): each block within 0.1 of its share right."""
    rows = [row for path in SCORES.glob("*.json") for record in [json.loads(path.read_text())]
            if record.get("confidence_kind") == "observed" for row in record["rows"] if not row["unknown_first"]]
    assert len(rows) >= 180
    for low, high in ((0.0, 0.485), (0.485, 0.84), (0.84, 0.875), (0.875, 1.0)):
        inside = [r for r in rows if low <= r["confidence"] < high]
        share = sum(r["top1"] for r in inside) / len(inside)
        printed = sum(through(RECENT, r["confidence"]) for r in inside) / len(inside)
        assert abs(printed - share) < 0.1, (low, high, printed, share, len(inside))
