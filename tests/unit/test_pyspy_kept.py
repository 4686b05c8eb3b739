"""py-spy travels to a node once per run (watch/pyspy_kept.py + watch/sampler.py): which round sends
what, and the node script's keeping, checking and refusing, run for real with `sh` on this machine."""
from __future__ import annotations

import pytest

from clusterctl.watch import sampler
from clusterctl.watch.pyspy_kept import KeptPySpy
from clusterctl.models import CommandResult, Host, Inventory

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
    assert first.stdin == BINARY and first.argv[-4:-1] == ("clusterctl-pyspy.c.r1", SHA, "ship")
    assert all(c.stdin is None and c.argv[-4:-1] == ("clusterctl-pyspy.c.r1", SHA, "kept") for c in later)
    sent = [len(c.stdin or b"") + sum(len(a) for a in c.argv) for c in node.commands]
    assert sent[0] > 2_000_000 and sent[1] < 10_000  # ~2.8 MB, then the script and the digest alone


def test_a_node_that_asks_for_the_binary_gets_it_next_round_and_the_watch_does_not_give_up():
    node = ScriptedNode(f"{M}kept {SHA}\n", f"{M}problem the kept py-spy /tmp/x changed on the node\n{M}ship\n",
                        f"{M}kept {SHA}\n", "")
    stacks = _rounds(node, KeptPySpy("c", "r1"), 4)
    assert [c.argv[-2] for c in node.commands] == ["ship", "kept", "ship", "kept"]
    assert stacks[1].asks and "changed on the node" in stacks[1].problem


def test_a_node_that_could_not_keep_it_is_shipped_it_every_round_as_before():
    node = ScriptedNode(f"{M}tool shipped py-spy 0.4\n", f"{M}tool shipped py-spy 0.4\n")
    _rounds(node, KeptPySpy("c", "r1"), 2)
    assert [c.stdin == BINARY for c in node.commands] == [True, True]


def test_clusterctl_stacks_without_a_run_s_keeper_ships_and_keeps_nothing():
    node = ScriptedNode("", "")
    action = sampler.sample_action(Inventory("c", (Host("n1", "10.0.0.1"),)), "r1", 1, 0.0)
    action(node, Host("n1", "10.0.0.1"))
    assert node.commands[0].stdin == BINARY and node.commands[0].argv[-4:-1] == ("", "", "ship")


def test_after_the_run_ended_nothing_more_is_kept_and_a_late_round_removes_what_it_kept():
    kept, node = KeptPySpy("c", "r1"), ScriptedNode(f"{M}kept {SHA}\n")
    assert kept.forget(connections=None) == {}  # shipped nowhere: no round trip
    _rounds(node, kept, 1)
    assert node.commands[0].argv[-4] == "" and node.commands[0].stdin == BINARY
    assert node.commands[1].argv[:2] == ("sh", "-c") and node.commands[1].argv[-1] == "clusterctl-pyspy.c.r1"
