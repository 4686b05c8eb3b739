"""The tiers' own rules: a unit test that starts a process or opens a socket fails saying where it belongs
(tests/unit/conftest.py), and a session that ran one tier keeps the reliability rows of the others
(tests/reliability.py)."""
from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest
from reliability import COVERED, Recorder

from unit.conftest import FIX, _Guard

EXEC = "tests/rehearsal/test_cluster_exec.py::test_a_node_whose_network_is_cut_is_unreachable_within_the_connect_timeout"


@pytest.mark.parametrize("start", [lambda: subprocess.run(["true"]), lambda: os.system("true"),
                                   lambda: socket.create_connection(("127.0.0.1", 9))],
                         ids=["subprocess", "os.system", "socket"])
def test_a_process_or_a_socket_is_refused_naming_the_tier_it_belongs_to(start):
    guard = _Guard()
    with guard.installed(), pytest.raises(pytest.fail.Exception, match="tests/local/"):
        start()
    assert guard.seen and FIX.startswith("move the test to tests/local/")
    left, right = socket.socketpair()  # the guard is gone: wrapping an existing descriptor was never refused
    left.close(), right.close()


def test_a_run_of_one_tier_replaces_its_own_rows_and_keeps_the_others(tmp_path):
    results = tmp_path / "results.json"
    first = Recorder()
    for test in ("tests/local/test_a.py::test_x", EXEC):
        first.declare(test, f"case of {test}", "expected", section="Faults").observe("seen first")
        first.outcome(test, "passed", 1.0)
    first.write(results)

    second = Recorder()  # a later session that ran only the local tier
    second.declare("tests/local/test_a.py::test_x", "case", "expected", section="Faults").observe("seen again")
    second.outcome("tests/local/test_a.py::test_x", "failed", 2.0, "boom")
    second.write(results)

    rows = {row["test"]: row for row in json.loads(results.read_text())["rows"]}
    assert rows["tests/local/test_a.py::test_x"]["outcome"] == "failed"
    assert rows[EXEC]["observed"] == "seen first"  # the rehearsal tier's row, from the first session
    covered = {entry["test"]: entry for entry in json.loads(results.read_text())["covered"]}
    assert covered[EXEC]["outcome"] == "passed" and set(covered) == set(COVERED)


def test_rows_of_a_test_file_that_no_longer_exists_are_dropped(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"rows": [{"test": "tests/test_gone.py::test_x", "section": "Faults"}],
                                   "covered": []}))
    recorder = Recorder()
    recorder.declare(EXEC, "case", "expected", section="Faults")
    recorder.outcome(EXEC, "passed", 1.0)
    recorder.write(results)
    assert [row["test"] for row in json.loads(results.read_text())["rows"]] == [EXEC]
