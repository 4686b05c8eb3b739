"""Runs that heal themselves, the parts that need no cluster (issue 35): the job: keys and their one
error each, the cause table, who is left out and who joins, and the summary lines."""
from __future__ import annotations

import subprocess
from clusterctl.ground.healing import latest_checkpoint_command


def test_the_latest_complete_checkpoint_is_found_and_a_partial_one_never(tmp_path):
    for step, complete in ((2, True), (9, True), (10, True), (11, False)):
        (tmp_path / f"step-{step}").mkdir()
        if complete:
            (tmp_path / f"step-{step}" / "COMPLETE").write_text("")
    found = subprocess.run(latest_checkpoint_command(str(tmp_path), "COMPLETE"), capture_output=True, text=True)
    assert found.stdout.strip() == "step-10"
    (tmp_path / "step-10" / "model.done").write_text("")
    found = subprocess.run(latest_checkpoint_command(str(tmp_path), "*.done"), capture_output=True, text=True)
    assert found.stdout.strip() == "step-10"
    missing = subprocess.run(latest_checkpoint_command(str(tmp_path / "none"), "COMPLETE"), capture_output=True, text=True)
    assert missing.returncode == 0 and missing.stdout == ""
