"""A connection takes its become choice once (issue 52: a poll's cost on its node): from the inventory or
a root SSH user without asking, else from one CHECK of the node, kept for the connection's life. A
privileged command then runs behind the choice's prefix with no shell around it; a batch's privileged
sections read the choice from CLUSTERCTL_BECOME."""
from __future__ import annotations

import threading

import pytest

from clusterctl.models import Command, Host
from clusterctl.transport.base import _BECOME, argv_for, batch_command, remote_argv
from clusterctl.transport.become import NEVER, SUDO, Decision, from_check, known, prefix

PLAIN = Host(name="n1", address="198.18.0.2")


@pytest.mark.parametrize("become, become_user, user, is_root, choice", [
    (None, None, "root", True, NEVER),  # root: nothing to ask
    (None, None, "ccops", False, None),  # the node is asked once
    (False, None, "ccops", False, NEVER),
    (True, None, "root", True, NEVER),
    (True, None, "ccops", False, "sudo:root"),
    (True, "svc", "svc", False, NEVER),
    (True, "svc", "root", True, "sudo:svc"),
])
def test_what_is_known_without_asking(become, become_user, user, is_root, choice):
    host = Host(name="n1", address="198.18.0.2", become=become, become_user=become_user)
    assert known(host, user, is_root) == choice


@pytest.mark.parametrize("stdout, choice", [
    ("0\n", NEVER), ("0\nsudo\n", NEVER), ("1000\nsudo\n", SUDO), ("1000\n", NEVER),
    ("", None), ("Last login: yesterday\n1000\n", None), ("1000\nsudo\nmotd\n", None),
])
def test_the_check_read_back(stdout, choice):
    assert from_check(stdout) == choice


def test_a_privileged_command_runs_behind_the_prefix_with_no_shell():
    cmd = Command(("python3", "-I", "-S", "-c", "pass", "poll"), env=(("A", "1"),), privileged=True)
    assert remote_argv(cmd, NEVER) == ["env", "A=1", "python3", "-I", "-S", "-c", "pass", "poll"]
    assert remote_argv(cmd, SUDO)[:4] == ["sudo", "-n", "--", "env"]
    assert prefix("sudo:svc") == ("sudo", "-n", "-u", "svc", "--")
    assert remote_argv(cmd)[:3] == ["sh", "-c", _BECOME]  # no choice: the script that chooses per command
    assert remote_argv(Command(("true",)), SUDO) == ["true"]  # not privileged: untouched


def test_the_node_is_asked_once_and_only_for_privileged_work():
    asked = []

    def ask():
        asked.append(1)
        return SUDO

    decision = Decision()
    assert argv_for(Command(("true",)), PLAIN, decision, ask) == ["true"] and not asked
    for _ in range(3):
        assert argv_for(Command(("id",), privileged=True), PLAIN, decision, ask) == ["sudo", "-n", "--", "id"]
    batch = batch_command([("who", Command(("id",), privileged=True)), ("plain", Command(("id",)))])
    assert argv_for(batch, PLAIN, decision, ask)[:2] == ["env", "CLUSTERCTL_BECOME=sudo"]
    assert len(asked) == 1


def test_a_node_that_cannot_tell_keeps_the_per_command_script_and_is_not_asked_again():
    asked = []
    decision = Decision()
    for _ in range(2):
        argv = argv_for(Command(("id",), privileged=True), PLAIN, decision, lambda: asked.append(1))
        assert argv[:3] == ["sh", "-c", _BECOME]
    assert len(asked) == 1


def test_threads_asking_at_once_ask_once():
    asked, start = [], threading.Barrier(8)

    def ask():
        asked.append(1)
        return NEVER

    decision = Decision()
    results = []

    def worker():
        start.wait()
        results.append(decision.choice(ask))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [NEVER] * 8 and len(asked) == 1


def test_the_inventorys_choice_reaches_a_batch_as_before():
    host = Host(name="n1", address="198.18.0.2", become=True, become_user="svc")
    batch = batch_command([("who", Command(("id",), privileged=True))])
    decision = Decision(known(host, "ccops", False))
    assert argv_for(batch, host, decision, lambda: pytest.fail("asked"))[:2] == ["env", "CLUSTERCTL_BECOME=sudo:svc"]
