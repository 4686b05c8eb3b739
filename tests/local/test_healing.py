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


def test_the_controller_side_refuses_links_and_odd_names_as_the_node_side_does(tmp_path):
    from clusterctl.node import heal_policy

    for name in ("step-3", "step-7", "step-9\nX=1", "step 10"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "COMPLETE").write_text("")
    (tmp_path / "step-11").symlink_to(tmp_path / "step-7")
    found = subprocess.run(latest_checkpoint_command(str(tmp_path), "COMPLETE"), capture_output=True, text=True)
    assert found.stdout == "step-7\n"
    assert heal_policy.latest_checkpoint({"dir": str(tmp_path), "complete": "COMPLETE"}) == f"{tmp_path}/step-7"
