"""bench/expert_reading.py: blind readers' answers against the tool's first scores on the same logs. An `other:`
label is a miss for both (as the first scores count it); `both wrong` counts only vocabulary labels."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("expert_reading", REPO / "bench" / "expert_reading.py")
expert_reading = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(expert_reading)


def _row(cause: str, top1: bool, named: list) -> dict:
    return {"cause": cause, "top1": top1, "named": named}


def test_the_reader_and_the_tool_are_counted_on_the_same_logs():
    rows = {"a.log": _row("port_in_use", True, ["port_in_use"]),
            "b.log": _row("nic_mismatch", False, ["unknown"]),
            "c.log": _row("ib_config", False, ["segfault"]),
            "d.log": _row("other:cray_gtl_not_linked", False, ["unknown"])}
    doc = {"cases": {f"L{i}": {"file": f, "batch": 35} for i, f in enumerate(rows)},
           "answers": {"L0": ["port_in_use"], "L1": ["nic_mismatch", "ib_config"], "L2": ["unknown"],
                       "L3": ["other:cray_gtl_not_linked"]}}
    counts = expert_reading.compare(doc, rows)
    assert (counts["n"], counts["in_vocab"]) == (4, 3)
    assert (counts["reader_top1"], counts["tool_top1"], counts["reader_unknown"]) == (2, 1, 1)
    assert counts["iv_both_miss"] == 1 and counts["iv_tool_only"] == 0
    assert counts["iv_reader_only"] == [("b.log", "nic_mismatch", ["unknown"])]


def test_the_recorded_reading_covers_every_log_it_names():
    rows = expert_reading.tool_rows()
    for path in (REPO / "bench" / "expert_reads").glob("*.json"):
        doc = json.loads(path.read_text())
        assert all(case["file"] in rows for case in doc["cases"].values())
        assert set(doc["answers"]) == set(doc["cases"])
