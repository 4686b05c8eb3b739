"""py-spy travels to a node once per run (watch/pyspy_kept.py + watch/sampler.py): which round sends
what, and the node script's keeping, checking and refusing, run for real with `sh` on this machine."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from clusterctl.watch import sampler
from clusterctl.watch.pyspy_kept import KeptPySpy
from clusterctl.models import CommandResult, Host, Inventory
from clusterctl.modules import process

BINARY, ARCH, SHA = sampler.payload()
pytestmark = pytest.mark.skipif(not BINARY, reason="no Linux py-spy to ship on this controller")


class ScriptedNode:
    """A transport that records each command and answers with the next scripted stdout."""

    def __init__(self, *answers: str):
        self.answers, self.commands = list(answers), []

    def run(self, command):
        self.commands.append(command)
        return CommandResult(0, self.answers.pop(0) if self.answers else "")


def _rounds(node: ScriptedNode, kept: KeptPySpy, count: int) -> list:
    inventory, host = Inventory("c", (Host("n1", "10.0.0.1"),)), Host("n1", "10.0.0.1")
    action = sampler.sample_action(inventory, "r1", 1, 0.0, nonblocking=True, kept=kept)
    return [action(node, host).data["stacks"] for _ in range(count)]


M = sampler.MARK


def test_the_first_round_ships_the_binary_and_later_rounds_send_only_its_digest_without_stdin():
    node = ScriptedNode(f"{M}kept {SHA}\n{M}tool shipped py-spy 0.4\n", f"{M}tool kept py-spy 0.4\n", f"{M}tool kept x\n")
    _rounds(node, KeptPySpy("c", "r1"), 3)
    first, *later = node.commands
    assert first.stdin == BINARY and first.argv[-3:] == ("clusterctl-pyspy.c.r1", SHA, "ship")
    assert all(c.stdin is None and c.argv[-3:] == ("clusterctl-pyspy.c.r1", SHA, "kept") for c in later)
    sent = [len(c.stdin or b"") + sum(len(a) for a in c.argv) for c in node.commands]
    assert sent[0] > 2_000_000 and sent[1] < 10_000  # ~2.8 MB, then the script and the digest alone


def test_a_node_that_asks_for_the_binary_gets_it_next_round_and_the_watch_does_not_give_up():
    node = ScriptedNode(f"{M}kept {SHA}\n", f"{M}problem the kept py-spy /tmp/x changed on the node\n{M}ship\n",
                        f"{M}kept {SHA}\n", "")
    stacks = _rounds(node, KeptPySpy("c", "r1"), 4)
    assert [c.argv[-1] for c in node.commands] == ["ship", "kept", "ship", "kept"]
    assert stacks[1].asks and "changed on the node" in stacks[1].problem


def test_a_node_that_could_not_keep_it_is_shipped_it_every_round_as_before():
    node = ScriptedNode(f"{M}tool shipped py-spy 0.4\n", f"{M}tool shipped py-spy 0.4\n")
    _rounds(node, KeptPySpy("c", "r1"), 2)
    assert [c.stdin == BINARY for c in node.commands] == [True, True]


def test_clusterctl_stacks_without_a_run_s_keeper_ships_and_keeps_nothing():
    node = ScriptedNode("", "")
    action = sampler.sample_action(Inventory("c", (Host("n1", "10.0.0.1"),)), "r1", 1, 0.0)
    action(node, Host("n1", "10.0.0.1"))
    assert node.commands[0].stdin == BINARY and node.commands[0].argv[-3:] == ("", "", "ship")


def test_after_the_run_ended_nothing_more_is_kept_and_a_late_round_removes_what_it_kept():
    kept, node = KeptPySpy("c", "r1"), ScriptedNode(f"{M}kept {SHA}\n")
    assert kept.forget(connections=None) == {}  # shipped nowhere: no round trip
    _rounds(node, kept, 1)
    assert node.commands[0].argv[-3] == "" and node.commands[0].stdin == BINARY
    assert node.commands[1].argv[:2] == ("sh", "-c") and node.commands[1].argv[-1] == "clusterctl-pyspy.c.r1"


# --------------------------------------------------------------------------- the node script, for real


def _node_round(tmp: Path, run: str, ship: bool, cluster: str = "kept-test") -> dict:
    inventory = Inventory(cluster, (Host("n1", "127.0.0.1"),))
    command = sampler.sample_command(inventory, "n1", run, 1, 0.0, nonblocking=True,
                                     keep=process.kept_pyspy_name(cluster, run), ship=ship)
    env = {**os.environ, "TMPDIR": str(tmp)}
    done = subprocess.run(command.argv, input=command.stdin or b"", capture_output=True, timeout=60, env=env)
    stdout = done.stdout.decode(errors="replace")
    return {"stdin": len(command.stdin or b""), "stdout": stdout, "node": sampler.parse_node_output(stdout, "n1")}


@pytest.fixture
def rank():
    """A process marked as rank 0 of a run (as cleanup and the sampler find ranks)."""
    run = f"r-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, **dict(process.marker_env("kept-test", "n1", run)), "RANK": "0", "LOCAL_RANK": "0"}
    proc = subprocess.Popen([sys.executable, "-c", "import time\ndef waiting_here():\n    time.sleep(120)\nwaiting_here()"],
                            env=env)
    time.sleep(0.5)
    yield run
    proc.kill()
    proc.wait()


def test_the_node_keeps_the_shipped_binary_mode_700_and_the_next_round_runs_it_from_the_digest_alone(tmp_path, rank):
    first = _node_round(tmp_path, rank, ship=True)
    assert first["node"].kept == SHA and first["node"].tool.startswith("shipped")
    kept = tmp_path / process.kept_pyspy_name("kept-test", rank) / f"py-spy.{SHA}"
    assert kept.stat().st_mode & 0o777 == 0o700 and kept.parent.stat().st_mode & 0o777 == 0o700
    assert kept.stat().st_uid == os.getuid()
    second = _node_round(tmp_path, rank, ship=False)
    assert second["stdin"] == 0 and second["node"].tool.startswith("kept") and not second["node"].asks
    frames = [f.function for r in second["node"].samples[0] for t in r.threads for f in t.frames]
    assert "waiting_here" in frames


def test_a_kept_binary_changed_on_the_node_is_refused_not_run_and_asked_for_again(tmp_path, rank):
    _node_round(tmp_path, rank, ship=True)
    kept = tmp_path / process.kept_pyspy_name("kept-test", rank) / f"py-spy.{SHA}"
    ran = tmp_path / "the-changed-file-ran"
    kept.write_text(f"#!/bin/sh\ntouch {ran}\necho py-spy 0.4\n")
    answer = _node_round(tmp_path, rank, ship=False)
    assert answer["node"].asks and "changed on the node" in answer["node"].problem and not answer["node"].samples
    assert not ran.exists() and not kept.exists()
    again = _node_round(tmp_path, rank, ship=True)  # the next round ships it again
    assert again["node"].kept == SHA and again["node"].samples


def test_a_round_that_finds_no_kept_binary_asks_for_it(tmp_path, rank):
    answer = _node_round(tmp_path, rank, ship=False)
    assert answer["node"].asks and "gone from the node" in answer["node"].problem and answer["node"].kept == ""


def test_the_run_s_end_and_a_kill_of_its_ranks_remove_the_kept_directory(tmp_path, rank):
    from clusterctl.watch.pyspy_kept import forget_command

    _node_round(tmp_path, rank, ship=True)
    directory = tmp_path / process.kept_pyspy_name("kept-test", rank)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    assert directory.is_dir()
    subprocess.run(forget_command(directory.name).argv, env=env, check=True, timeout=30)
    assert not directory.exists()
    _node_round(tmp_path, rank, ship=True)
    other = tmp_path / "clusterctl-pyspy.other-cluster.r1"
    other.mkdir()
    subprocess.run(process.scan_command("kept-test", "n1", 1, "kill").argv, env=env, check=True, timeout=30)  # `down`
    assert not directory.exists() and other.exists()  # another cluster's is left alone


def test_a_kept_directory_that_is_a_link_is_not_trusted_even_with_the_right_binary_in_it(tmp_path, rank):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    subprocess.run(["sh", "-c", f'gzip -dc > "{elsewhere}/py-spy.{SHA}" && chmod 700 "{elsewhere}/py-spy.{SHA}"'],
                   input=BINARY, check=True, timeout=30)
    (tmp_path / process.kept_pyspy_name("kept-test", rank)).symlink_to(elsewhere)
    answer = _node_round(tmp_path, rank, ship=False)
    assert answer["node"].asks and not answer["node"].samples and answer["node"].tool == ""
