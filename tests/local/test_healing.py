"""Runs that heal themselves, the parts that need no cluster (issue 35): the job: keys and their one
error each, the cause table, who is left out and who joins, and the summary lines."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from clusterctl.heal.replicas import parse_holdings
from clusterctl.plan.node_files import checkpoints_command


def _listing(directory, complete="COMPLETE", run_id=""):
    """The `checkpoints` operation as a node runs it (plan/node_files.checkpoints_command, python -I -S -c)."""
    inventory = SimpleNamespace(job=SimpleNamespace(python=sys.executable, healing=SimpleNamespace(
        checkpoint=SimpleNamespace(complete=complete))), container=None, uses_container=False)
    argv = checkpoints_command(inventory, str(directory), run_id).argv
    found = subprocess.run((sys.executable, *argv[1:]), capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    return parse_holdings(found.stdout)


def test_the_latest_complete_checkpoint_is_found_and_a_partial_one_never(tmp_path):
    for step, complete in ((2, True), (9, True), (10, True), (11, False)):
        (tmp_path / f"step-{step}").mkdir()
        if complete:
            (tmp_path / f"step-{step}" / "COMPLETE").write_text("")
    assert _listing(tmp_path)["own"] == ["step-2", "step-9", "step-10"]
    (tmp_path / "step-10" / "model.done").write_text("")
    assert _listing(tmp_path, "*.done")["own"] == ["step-10"]
    assert _listing(tmp_path / "none") == {"own": [], "held": {}}


def test_the_controller_side_refuses_links_and_odd_names_as_the_node_side_does(tmp_path):
    from clusterctl.node import heal_policy

    for name in ("step-3", "step-7", "step-9\nX=1", "step 10"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "COMPLETE").write_text("")
    (tmp_path / "step-11").symlink_to(tmp_path / "step-7")
    assert _listing(tmp_path)["own"] == ["step-3", "step-7"]
    assert heal_policy.latest_checkpoint({"dir": str(tmp_path), "complete": "COMPLETE"}) == f"{tmp_path}/step-7"


def test_the_replicas_a_node_holds_of_a_run_are_listed_only_once_their_manifest_is_there(tmp_path):
    """Issue 50: a replica is complete once checkpoint_replica.py wrote its manifest (last); a temp copy,
    a replica without one, another run's and a linked owner are not listed."""
    replicas = tmp_path / ".clusterctl-replicas"
    for run, owner, step, manifest in (("R1", "node2", "step-4", True), ("R1", "node2", "step-5", False),
                                       ("R1", "node2", ".incoming-step-6", True), ("R2", "node3", "step-4", True)):
        (replicas / run / owner / step).mkdir(parents=True)
        if manifest:
            (replicas / run / owner / step / ".manifest.json").write_text("[]")
    (replicas / "R1" / "node9").symlink_to(replicas / "R2" / "node3")
    assert _listing(tmp_path, run_id="R1") == {"own": [], "held": {"node2": ["step-4"]}}
    assert _listing(tmp_path)["held"] == {}
