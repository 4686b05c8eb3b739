"""Which nodes the watch loop polls (watch/pace.py, issue 52): a node whose output stream answered its
lease renewal lately is not polled (the stream's answer stands for the poll); one whose stream fell
silent, ended, or never answered is, on the pace it had."""
from __future__ import annotations

from clusterctl.node.follow_files import RENEWED
from clusterctl.plan.wrapper import RENEW, follow_command
from clusterctl.watch.pace import STREAM_SLACK_S, Pace

ANSWER = RENEWED.encode()


def test_a_running_node_is_due_every_every_s_and_at_once_when_asked_for_everyone():
    pace = Pace(4.0)
    assert pace.due(["n1", "n2"], 100.0) == ["n1", "n2"]
    assert pace.due(["n1", "n2"], 102.0) == []
    assert pace.due(["n1", "n2"], 104.0) == ["n1", "n2"]
    pace.everyone()
    assert pace.due(["n1"], 104.5) == ["n1"]
    pace.answered("n2", False)
    assert pace.due(["n1", "n2"], 105.0) == ["n2"]  # unanswered: asked every turn


def test_a_streams_answer_stands_for_the_poll_until_it_is_late_or_the_stream_ended():
    pace = Pace(4.0)
    assert pace.renewal_sent("n1", 96.0)  # the stream's first renewal: its answer awaited, no poll
    assert not pace.renewal_sent("n1", 100.0)  # left unanswered: polled
    pace.said("n1", b"some error line\n" + ANSWER, 100.0)
    assert pace.streamed_at("n1") == 100.0
    assert pace.renewal_sent("n1", 100.0 + 4.0 + STREAM_SLACK_S)
    assert not pace.renewal_sent("n1", 100.0 + 4.0 + STREAM_SLACK_S + 0.1)  # silent past the slack: polled
    pace.said("n1", ANSWER, 110.0)
    pace.stream_ended("n1")
    assert not pace.renewal_sent("n1", 110.0) and pace.streamed_at("n1") is None  # its end is what a poll reads


def test_an_answer_cut_between_two_reads_counts_and_a_line_that_only_ends_like_one_does_not():
    pace = Pace(4.0)
    pace.said("n1", ANSWER[:7], 100.0)
    assert pace.streamed_at("n1") is None
    pace.said("n1", ANSWER[7:], 100.5)
    assert pace.streamed_at("n1") == 100.5
    pace.said("n2", b"Traceback: " + ANSWER[:-1], 101.0)
    pace.said("n2", b"\n", 101.0)
    assert pace.streamed_at("n2") is None
    pace.said("n2", b"clusterctl: lease not renewed: refused lease\n", 102.0)  # not renewed: no answer
    assert pace.streamed_at("n2") is None


def test_the_lease_carrying_stream_keeps_its_stdin_open_and_says_so_on_its_command_line():
    from types import SimpleNamespace

    inventory = SimpleNamespace(uses_container=False, job=SimpleNamespace(python="python3"))
    plain, carrying = follow_command(inventory, "/o/logs/r1/n1", 2), follow_command(inventory, "/o/logs/r1/n1", 2, lease=True)
    assert not plain.stdin_open and carrying.stdin_open
    assert carrying.argv[-1] == "1" and plain.argv[-1] == "2"
    assert RENEW.endswith(b"\n")


def test_a_streams_last_line_is_the_nodes_end_in_a_polls_words_and_nothing_else_reads_as_one():
    """issue 52: the stream that carries the lease ends with what a poll would answer, so the run's end
    asks no poll after it; cut between two reads it still counts, a longer or foreign line never does."""
    from clusterctl.node.follow_files import EXITED

    pace = Pace(4.0)
    pace.said("n1", b"rank output\n" + EXITED.encode()[:5], 100.0)
    assert pace.exited("n1") is None
    pace.said("n1", EXITED.encode()[5:] + b"exit 3 stopped\n", 100.1)
    assert pace.exited("n1") == "exit 3 stopped"
    pace.said("n2", EXITED.encode() + b"exit 0" + b"9" * 100 + b"\n", 100.0)
    pace.said("n3", b"Traceback: " + EXITED.encode() + b"exit 0\n", 100.0)
    assert pace.exited("n2") is None and pace.exited("n3") is None
