"""GPU leases held on the nodes (issue 48): node/leases.py on a real directory (no process), the
controller's parsing and wording (plan/leasing.py), the scan's run ids (modules/process.py).

Clocks: every judgement takes the node's `now` (time.time() on the node); here `now` is passed in, and
mtimes set with os.utime, so that a lease's age is what the test says, whatever this machine's clock."""
from __future__ import annotations

import json
import os
import time

import pytest
from hypothesis import given, strategies as st

from clusterctl.modules.process import runs_of
from clusterctl.node import leases
from clusterctl.node.safe_files import Refused
from clusterctl.plan import leasing


def _take(out, run, keys=("gpu0", "gpu1"), host="n1", who="alice@ctl", stamp=None, now=None):
    return leases.take(str(out), host, run, who, list(keys), 15.0, stamp=stamp, now=now)


def _age(out, host, name, seconds):
    path = out / leases.LEASES / host / name
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_take_is_all_or_none_and_names_the_holder(tmp_path):
    assert _take(tmp_path, "A")["taken"] == ["gpu0", "gpu1"]
    refused = _take(tmp_path, "B", keys=("gpu1", "gpu2"), who="bob@ctl")
    assert refused["taken"] == [] and [h["run_id"] for h in refused["held"]] == ["A"]
    assert refused["held"][0]["operator"] == "alice@ctl" and refused["held"][0]["key"] == "gpu1"
    assert not (tmp_path / leases.LEASES / "n1" / "gpu2").exists()  # none of B's keys was taken
    assert _take(tmp_path, "A")["taken"] == ["gpu0", "gpu1"]  # a relaunch of the same run takes its own again
    assert "run A (alice@ctl, since " in leasing.holder(refused["held"][0])


def test_the_lease_directory_is_private_and_a_link_or_a_foreign_one_is_refused(tmp_path):
    _take(tmp_path, "A")
    where = tmp_path / leases.LEASES / "n1"
    assert oct(where.stat().st_mode & 0o777) == "0o700"
    os.chmod(where, 0o755)
    with pytest.raises(Refused, match="mode 755"):
        _take(tmp_path, "B")
    os.chmod(where, 0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, tmp_path / leases.LEASES / "n2")
    with pytest.raises(Refused, match="symbolic link"):
        _take(tmp_path, "B", host="n2")
    assert not list(elsewhere.iterdir())
    answer = leasing.parse("n2", json.dumps({"ok": False, "refused": {"path": "/o/x", "why": "is a link", "fix": "rm"}}))
    assert not answer.ok and "lease directory refused: /o/x: is a link" in answer.error and answer.fix == "rm"


def test_a_link_in_place_of_a_lease_file_is_refused_not_followed(tmp_path):
    _take(tmp_path, "A", keys=("gpu0",))
    where = tmp_path / leases.LEASES / "n1"
    (where / "gpu0").unlink()
    target = tmp_path / "target"
    target.write_text("precious\n")
    os.symlink(target, where / "gpu0")
    with pytest.raises(Refused):
        _take(tmp_path, "B", keys=("gpu0",))
    assert target.read_text() == "precious\n"


def test_a_lease_lapses_by_the_nodes_clock_after_its_window_without_a_beat(tmp_path):
    _take(tmp_path, "A")
    now = time.time()
    assert _take(tmp_path, "B", now=now)["held"]
    _age(tmp_path, "n1", "gpu0", 60)
    _age(tmp_path, "n1", "gpu1", 60)
    taken = _take(tmp_path, "B", now=now)
    assert taken["taken"] == ["gpu0", "gpu1"]
    assert any("expired 60s after its last beat" in note and "run A" in note for note in taken["notes"])


def test_the_runs_own_lease_file_is_the_beat_that_keeps_it_alive(tmp_path):
    """The controller's poll and a detached keeper renew <outputs>/logs/<run>/<host>/lease: a lease whose
    own file is old lives while that beats, and lapses once it stops (a keeper killed -9)."""
    _take(tmp_path, "A", keys=("gpu0",))
    _age(tmp_path, "n1", "gpu0", 600)
    run_dir = tmp_path / "logs" / "A" / "n1"
    run_dir.mkdir(parents=True)
    (run_dir / "lease").write_text("")
    assert _take(tmp_path, "B", keys=("gpu0",))["held"]
    assert set(leases.live(str(tmp_path), "n1")["live"]) == {"A"}
    then = time.time() - 16
    os.utime(run_dir / "lease", (then, then))
    assert _take(tmp_path, "B", keys=("gpu0",))["taken"] == ["gpu0"]


def test_garbage_in_a_lease_file_is_named_and_lapses_like_a_lease(tmp_path):
    where = tmp_path / leases.LEASES / "n1"
    where.mkdir(parents=True, mode=0o700)
    os.chmod(tmp_path / leases.LEASES, 0o700)
    (where / "gpu0").write_bytes(b"\x00\xffnot json")
    refused = _take(tmp_path, "B", keys=("gpu0",))
    assert refused["held"] and refused["held"][0]["garbage"].startswith("not JSON")
    assert "an unreadable lease file gpu0 (not JSON" in leasing.holder(refused["held"][0])
    _age(tmp_path, "n1", "gpu0", 30)
    taken = _take(tmp_path, "B", keys=("gpu0",))
    assert taken["taken"] == ["gpu0"] and "replaced the unreadable lease file gpu0" in taken["notes"][0]


def test_waiters_are_served_in_arrival_order_and_a_newcomer_does_not_jump_the_queue(tmp_path):
    _take(tmp_path, "A", keys=("gpu0",))
    first = leases.queue(str(tmp_path), "n1", "B", "bob@ctl", ["gpu0"], 15.0)["stamp"]
    second = leases.queue(str(tmp_path), "n1", "C", "carol@ctl", ["gpu0"], 15.0)["stamp"]
    assert first < second
    leases.release(str(tmp_path), "n1", "A")
    assert [t["run_id"] for t in _take(tmp_path, "C", keys=("gpu0",), stamp=second)["ahead"]] == ["B"]
    assert [t["run_id"] for t in _take(tmp_path, "D", keys=("gpu0",))["ahead"]] == ["B", "C"]  # no ticket: after all
    assert _take(tmp_path, "B", keys=("gpu0",), stamp=first)["taken"] == ["gpu0"]
    assert [t["run_id"] for t in leases.listing(str(tmp_path), "n1")["tickets"]] == ["C"]  # B's ticket went


def test_two_waiters_stamped_in_the_same_nanosecond_are_ordered_by_run_id_the_same_everywhere(tmp_path):
    for host in ("n1", "n2"):
        leases.queue(str(tmp_path), host, "run-b", "bob", ["gpu0"], 15.0, stamp=1000)
        leases.queue(str(tmp_path), host, "run-a", "amy", ["gpu0"], 15.0, stamp=1000)
    for host in ("n1", "n2"):
        assert leases.take(str(tmp_path), host, "run-b", "bob", ["gpu0"], 15.0, stamp=1000)["ahead"][0]["run_id"] \
            == "run-a"
        assert leases.take(str(tmp_path), host, "run-a", "amy", ["gpu0"], 15.0, stamp=1000)["taken"] == ["gpu0"]


def test_a_waiter_gone_without_a_word_lapses_and_one_that_leaves_is_removed(tmp_path):
    leases.queue(str(tmp_path), "n1", "B", "bob", ["gpu0"], 15.0)
    leases.queue(str(tmp_path), "n1", "C", "carol", ["gpu1"], 15.0)
    name = next(p.name for p in (tmp_path / leases.LEASES / "n1").iterdir() if p.name.endswith(".B"))
    _age(tmp_path, "n1", name, 20)  # killed -9: it stopped rewriting its ticket
    assert _take(tmp_path, "D", keys=("gpu0",))["taken"] == ["gpu0"]
    leases.release(str(tmp_path), "n1", "C")  # Ctrl-C: the ticket goes at once
    assert leases.listing(str(tmp_path), "n1")["tickets"] == []


def test_a_forced_end_is_logged_on_the_node_naming_who_and_frees_the_gpus(tmp_path):
    _take(tmp_path, "A")
    leases.forced(str(tmp_path), "n1", "bob@ctl", "clusterctl up --force", ["A"])
    seen = leases.listing(str(tmp_path), "n1")
    assert seen["leases"] == [] and seen["ended"][0]["by"] == "bob@ctl"
    log = (tmp_path / leases.LEASES / "n1" / leases.FORCED_LOG).read_text()
    assert json.loads(log)["how"] == "clusterctl up --force"
    hosts = {"n1": {"ended_by": seen["ended"], "leases": []}}
    assert leasing.ended_by(hosts)["A"]["host"] == "n1"


def test_the_fleet_view_groups_leases_by_run_and_orders_the_waiters():
    hosts = {"n1": {"leases": [{"key": "gpu0", "run_id": "A", "operator": "a", "since": 5.0, "alive": True},
                               {"key": "gpu1", "run_id": "Z", "operator": "z", "since": 1.0, "alive": False}],
                    "waiting": [{"run_id": "C", "operator": "c", "stamp": 9}, {"run_id": "B", "operator": "b", "stamp": 3}]},
             "n2": {"leases": [{"key": "slot0", "run_id": "A", "operator": "a", "since": 4.0, "alive": True}],
                    "waiting": [{"run_id": "B", "operator": "b", "stamp": 3}]}}
    assert leasing.fleet_runs(hosts) == [{"run_id": "A", "operator": "a", "since": 4.0,
                                          "gpus": {"n1": ["gpu0"], "n2": ["slot0"]}}]
    assert [(w["run_id"], w["hosts"]) for w in leasing.fleet_waiting(hosts)] == [("B", ["n1", "n2"]), ("C", ["n1"])]


def test_keys_are_the_gpus_else_the_rank_slots():
    assert leasing.keys_for((2, 3), 2) == ["gpu2", "gpu3"]
    assert leasing.keys_for(None, 3) == ["slot0", "slot1", "slot2"]


def test_a_node_that_does_not_answer_is_said_with_the_fix():
    answer = leasing.parse("n1", "", "sh: python3: not found", 127)
    assert not answer.ok and "python3: not found" in answer.error and "python3" in answer.fix


@given(st.text(max_size=300))
def test_the_answer_parser_never_raises_on_remote_text(text):
    answer = leasing.parse("n1", text, text, 1)
    assert answer.ok == isinstance(answer.document, dict)


@given(st.text(max_size=300))
def test_the_run_ids_of_a_scan_never_raise_on_remote_text(text):
    assert all(isinstance(pid, int) for pid in runs_of(text))
    assert runs_of("runof 12 R1\nruns 3 x\nrunof 13\nours 12 root sleep\n") == {12: "R1", 13: ""}


def test_a_keeper_releases_its_runs_leases_from_the_run_dir_it_knows(tmp_path):
    _take(tmp_path, "A", keys=("gpu0",))
    _take(tmp_path, "B", keys=("gpu1",), who="bob@ctl")
    run_dir = tmp_path / "logs" / "A" / "n1"
    assert leases.release_run_dir(str(run_dir) + "/", "A", "n1") == {"released": ["gpu0"]}
    assert [lease["run_id"] for lease in leases.listing(str(tmp_path), "n1")["leases"]] == ["B"]
