"""The README's diagnosis table is generated from the rule table, and docs/diagnosis.md exists."""
from __future__ import annotations

from pathlib import Path

import pytest

from clusterctl.diagnose import RULES, table

REPO = Path(__file__).resolve().parents[2]


def test_the_readme_table_is_the_one_the_rule_table_generates():
    text = (REPO / "README.md").read_text()
    assert table.rewrite(text) == text, "run `python -m clusterctl.diagnose.table` (or make diagnose-report)"
    for rule in RULES:
        assert f"| `{rule.cause}` |" in text


def test_the_generator_rewrites_only_between_its_markers_and_refuses_a_readme_without_them():
    text = f"intro\n{table.START}\nold table\n{table.END}\noutro\n"
    rewritten = table.rewrite(text)
    assert rewritten.startswith("intro\n" + table.START) and rewritten.endswith(table.END + "\noutro\n")
    assert "old table" not in rewritten and "| `oom_killed` |" in rewritten
    with pytest.raises(ValueError, match="lacks the markers"):
        table.rewrite("no markers here")


def test_the_check_mode_fails_on_a_stale_table(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"{table.START}\nstale\n{table.END}\n")
    assert table.main(["--check", str(readme)]) == 1
    assert table.main([str(readme)]) == 0 and table.main(["--check", str(readme)]) == 0


def test_the_diagnosis_report_gives_both_splits_and_the_confusions():
    text = (REPO / "docs" / "diagnosis.md").read_text()
    for heading in ("## Accuracy", "## Per cause", "## Confusion pairs: test split", "## Similar known cases"):
        assert heading in text
    assert "| train (tuned on) |" in text and "| test (frozen, held out from tuning) |" in text
