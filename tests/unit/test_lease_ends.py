"""A run's GPU leases end with the run (issue 48): released before its end is final, on every path.

Detached: a real keeper loop (node_agent._keep) talks to a real engine (node/engine.py) through its
signed message format, the HTTP hop replaced by a call (the unit tier opens no socket); its leases are a
real lease directory (node/leases.py). The engine's end is final only once every node said its leases
went. Attached: the run flow releases them before the record says ended (backends/run_flow.py).
A lost run's lease: released where the controller's record says the run ended and the node proves its
ranks gone. Forced-end records: bounded."""
from __future__ import annotations

import json
import os
import time

import pytest

from clusterctl.node import engine, leases, node_agent

KEY = "k" * 32


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _run_dir(out, run_id, host, exit_code=None):
    run_dir = out / "logs" / run_id / host
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "lease").write_text("")
    if exit_code is not None:
        (run_dir / "agent.exit").write_text(f"{exit_code}\n")
    return run_dir


class _Answer:
    def __init__(self, data):
        self.data, self.headers = data, {node_agent.MAC_HEADER: node_agent.sign(KEY, data)}

    def read(self):
        return self.data

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _wire(monkeypatch, supervisor, seen):
    """urlopen as the supervisor's handler answers it (signature, beat), each message kept in `seen`
    with the lease files present as the supervisor heard it."""
    import urllib.request

    def urlopen(request, timeout):
        message = json.loads(request.data)
        assert request.headers[node_agent.MAC_HEADER.capitalize()] == node_agent.sign(KEY, request.data)
        seen.append(message)
        answer = supervisor.beat(message)
        if answer is None:
            raise OSError("refused")
        return _Answer(json.dumps(answer).encode())

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(node_agent, "_beside", lambda name, wanted=True: leases if name == "leases" else None)


def _config(host):
    return {"key": KEY, "host": host, "lease_s": 15, "address": "127.0.0.1", "port": 1, "run_id": "A"}


def test_a_detached_runs_end_is_final_only_after_every_nodes_leases_went(tmp_path, monkeypatch):
    for host in ("n1", "n2"):
        leases.take(str(tmp_path), host, "A", "alice@ctl", ["gpu0"], 22.0)
        _run_dir(tmp_path, "A", host, exit_code=0)
    clock = Clock()
    supervisor = node_agent.supervisor_of({"run_id": "A", "hosts": ["n1", "n2"], "lost_after_s": 15.0}, None)
    supervisor.now = clock
    seen = []
    _wire(monkeypatch, supervisor, seen)
    held = lambda host: [x["key"] for x in leases.listing(str(tmp_path), host)["leases"]]  # noqa: E731

    assert node_agent._keep(str(tmp_path / "logs" / "A" / "n1"), _config("n1"), 0, None, None, None) == 0
    assert held("n1") == [] and held("n2") == ["gpu0"]
    assert [m.get("released", False) for m in seen] == [False, True]  # the exit, then the word that they went
    # n2's ranks ended and it said so, but its leases are not gone yet: not final
    supervisor.beat({"host": "n2", "seq": 1, "exit_code": 0, "ranks": 1})
    assert supervisor.tick() is False and supervisor.state == "succeeded"
    assert node_agent._keep(str(tmp_path / "logs" / "A" / "n2"), _config("n2"), 0, None, None, None) == 0
    assert held("n2") == [] and supervisor.tick() is True


def test_a_node_that_never_says_its_leases_went_holds_the_end_no_longer_than_the_drain():
    clock = Clock()
    attempt = engine.Attempt({"run_id": "A", "hosts": ["n1", "n2"], "lost_after_s": 15.0}, None, now=clock)
    attempt.awaits_release = True
    attempt.beat({"host": "n1", "seq": 1, "exit_code": 0, "ranks": 1, "released": True})
    attempt.beat({"host": "n2", "seq": 1, "exit_code": 0, "ranks": 1})  # its keeper killed after this
    assert attempt.tick() is False
    clock.t += engine.DRAIN_S + 1
    assert attempt.tick() is True
    attached = engine.Attempt({"run_id": "A", "hosts": ["n1"], "lost_after_s": 15.0}, None, now=clock)
    attached.beat({"host": "n1", "seq": 1, "exit_code": 0, "ranks": 1})  # the controller releases them itself
    assert attached.tick() is True


def test_a_run_that_heals_itself_ends_once_every_node_said_its_leases_went():
    from tests.unit.test_node_healing import Clock as HealClock, _healer

    clock = HealClock()
    healer = _healer(clock)
    for seq, host in enumerate(("node1", "node2"), 1):
        healer.beat({"host": host, "seq": seq, "ranks": 1, "attempt": 1, "exit_code": 0})
    healer.beat({"host": "node3", "seq": 3, "ranks": 0, "attempt": 1})
    assert healer.tick() is False and healer.phase == "over"
    for seq, host in enumerate(("node1", "node2", "node3"), 10):
        answer = healer.beat({"host": host, "seq": seq, "ranks": 0, "attempt": 1, "released": True,
                              "exit_code": 0 if host != "node3" else None})
        assert answer["end"] is True
    assert healer.tick() is True


def test_a_keeper_cut_off_from_its_supervisor_releases_once_its_ranks_are_gone(tmp_path, monkeypatch):
    leases.take(str(tmp_path), "n1", "A", "alice@ctl", ["gpu0"], 22.0)
    run_dir = _run_dir(tmp_path, "A", "n1", exit_code=137)  # the wrapper stopped the ranks: its lease ran out
    monkeypatch.setattr(node_agent, "_beside", lambda name, wanted=True: leases if name == "leases" else None)
    node_agent._release_once_ranks_gone(str(run_dir), _config("n1"), 0)
    assert leases.listing(str(tmp_path), "n1")["leases"] == []
    leases.take(str(tmp_path), "n1", "B", "alice@ctl", ["gpu0"], 22.0)
    (tmp_path / "logs" / "B" / "n1").mkdir(parents=True)
    (tmp_path / "logs" / "B" / "n1" / "agent.pid").write_text("1\n")  # launched, not ended: the lease stays
    monkeypatch.setattr(node_agent, "RANKS_GONE_WAIT_S", 0.0)
    node_agent._release_once_ranks_gone(str(tmp_path / "logs" / "B" / "n1"), {**_config("n1"), "run_id": "B"}, 0)
    assert [x["run_id"] for x in leases.listing(str(tmp_path), "n1")["leases"]] == ["B"]


def test_a_lost_runs_lease_goes_when_its_controller_says_it_ended_and_the_node_proves_its_ranks_gone(tmp_path):
    out = str(tmp_path)
    leases.take(out, "n3", "LOST", "alice@ctl", ["gpu0"], 22.0)
    _run_dir(tmp_path, "LOST", "n3")
    refused = leases.take(out, "n3", "NEXT", "alice@ctl", ["gpu0"], 22.0, reap=["LOST"])
    assert [h["run_id"] for h in refused["held"]] == ["LOST"]  # its ranks may still run there: kept
    (tmp_path / "logs" / "LOST" / "n3" / "agent.exit").write_text("143\n")
    assert leases.take(out, "n3", "BOB", "bob@ctl", ["gpu0"], 22.0, reap=["LOST"])["held"]  # not bob's to end
    taken = leases.take(out, "n3", "NEXT", "alice@ctl", ["gpu0"], 22.0, reap=["LOST"])
    assert taken["taken"] == ["gpu0"] and "released gpu0 of run LOST: it ended" in taken["notes"][0]


def test_forced_end_records_are_pruned_by_age_and_count(tmp_path):
    out = str(tmp_path)
    leases.forced(out, "n1", "alice@ctl", "up --force", ["OLD"])
    old = tmp_path / leases.LEASES / "n1" / (leases.ENDED + "OLD")
    then = time.time() - leases.ENDED_KEEP_S - 60
    os.utime(old, (then, then))
    leases.forced(out, "n1", "alice@ctl", "up --force", [f"R{i}" for i in range(5)])
    assert not old.exists()
    with leases.open_host(out, "n1") as where:
        assert leases.prune_ended(where, time.time(), keep=2) and len(
            [e for e in where.entries() if e.name.startswith(leases.ENDED)]) == 2
    assert len(leases.listing(out, "n1")["ended"]) == 2


# ---- the controller's side: the attached run flow, a run that heals itself, a lost run's lease

class _Nodes:
    """run/leases.py's node calls carried out on a real lease directory per host (no SSH): the fake transport."""

    def __init__(self, out):
        self.out, self.calls = str(out), []

    def __call__(self, inventory, connections, names, op, per_host=None, **args):
        from clusterctl.plan import leasing

        answers = {}
        for name in names:
            extra = per_host(name) if per_host else {}
            self.calls.append((op, name))
            document = {"ok": True, **leases.OPS[op](outputs=self.out, host=name, **args, **extra)}
            answers[name] = leasing.Answer(name, document)
        return answers

    def holders(self, host):
        return [x["run_id"] for x in leases.listing(self.out, host)["leases"]]


def _inventory(*hosts):
    from clusterctl.models import Host, Inventory, JobSpec

    return Inventory("c", tuple(Host(h, h) for h in hosts), JobSpec(command=("true",)))


def test_an_attached_run_releases_its_leases_before_its_record_says_ended(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from clusterctl.backends import run_flow
    from clusterctl.run import leases as run_leases
    from clusterctl.run.runner import JobOutcome

    nodes = _Nodes(tmp_path)
    monkeypatch.setattr(run_leases, "_on_nodes", nodes)
    recorded = []

    class Store:
        def __init__(self, state):
            pass

        def write(self, record):
            recorded.append((record.to_json().get("state"), nodes.holders("n1")))
            return record

        def stacks_dir(self, run_id):
            return tmp_path

    monkeypatch.setattr(run_flow, "RunStore", Store)
    monkeypatch.setattr(run_flow, "record_run_end", lambda *a: None)
    monkeypatch.setattr(run_flow, "record_stragglers", lambda *a: None)
    inventory = _inventory("n1")
    for outcome, state in ((JobOutcome(0), "ended"), (JobOutcome(130, interrupted=True), "ended"),
                           (JobOutcome(1, stopped=True), "stopped"), (JobOutcome(0, detached=True), "running")):
        recorded.clear()
        held = run_leases.take(inventory, None, "A", {"n1": ["gpu0"]})
        runner = SimpleNamespace(run=lambda **kw: outcome, commands=lambda: {}, inventory=inventory, nodes={},
                                 stragglers=SimpleNamespace(found=lambda: [], on_change=None),
                                 phases=SimpleNamespace(reach=lambda name: None), heal=None,
                                 supervised=SimpleNamespace(to_json=lambda: {}, host="n1"))
        session = SimpleNamespace(state=None, inventory_path=lambda: "inv.yaml",
                                  renderer=SimpleNamespace(message=lambda *a: None))
        backend = SimpleNamespace(hang_up=lambda: __import__("contextlib").nullcontext(lambda: False))
        summary = {"run_id": "A", "cluster": "c"}
        run_flow._watch(session, backend, runner, summary, {}, run_flow.RunRequest("p"), SimpleNamespace(close=lambda: None),
                        held)
        assert recorded[0] == ("running", ["A"])  # held while it runs
        assert recorded[-1] == (state, ["A"] if outcome.detached else []), outcome  # the end: already released
        held.release()


def test_a_release_a_node_did_not_answer_is_asked_again_and_one_that_still_fails_is_said(tmp_path, monkeypatch):
    from clusterctl.plan import leasing
    from clusterctl.run import leases as run_leases

    nodes, lost = _Nodes(tmp_path), {"n2": 1}

    def flaky(inventory, connections, names, op, per_host=None, **args):  # n2's connection lost (once)
        if op == "release" and lost.get("n2") and "n2" in names:
            lost["n2"] -= 1
            answers = nodes(inventory, connections, [n for n in names if n != "n2"], op, per_host, **args)
            return {**answers, "n2": leasing.Answer("n2", None, "n2: the connection to n2 was lost")}
        return nodes(inventory, connections, names, op, per_host, **args)

    monkeypatch.setattr(run_leases, "_on_nodes", flaky)
    inventory = _inventory("n1", "n2")
    held = run_leases.take(inventory, None, "A", {"n1": ["gpu0"], "n2": ["gpu0"]})
    answers = held.release()
    assert all(a.ok for a in answers.values()) and nodes.holders("n1") == nodes.holders("n2") == []
    held = run_leases.take(inventory, None, "B", {"n1": ["gpu0"], "n2": ["gpu0"]})
    lost["n2"] = 2  # lost for good: the lease stays to lapse, and the run's end says so
    said = held.unreleased(held.release())
    assert nodes.holders("n2") == ["B"] and len(said) == 1
    assert said[0].startswith("n2: the connection to n2 was lost: its GPU leases there lapse"), said


def _releases_unanswered(nodes, lost):
    """The nodes' lease operations, where a node in `lost` does not answer a release."""
    from clusterctl.plan import leasing

    def cut(inventory, connections, names, op, per_host=None, **args):
        answers = nodes(inventory, connections, [n for n in names if n not in lost or op != "release"], op,
                        per_host, **args)
        return {**answers, **{n: leasing.Answer(n, None, f"{n}: no answer") for n in names
                              if n in lost and op == "release"}}
    return cut


def test_a_healing_loop_says_the_leases_a_node_kept_between_attempts_and_at_its_end(tmp_path, monkeypatch):
    """The class above on the healing loop's two releases: a host left out between attempts, and the loop's end."""
    from clusterctl.run import leases as run_leases

    nodes, lost = _Nodes(tmp_path), set()
    monkeypatch.setattr(run_leases, "_on_nodes", _releases_unanswered(nodes, lost))
    inventory, said = _inventory("n1", "n2", "n3"), []
    with run_leases.holding("A", said.append) as held:
        held.hold(inventory, None, {"n1": ["gpu0"], "n2": ["gpu0"]}, say=said.append)
        lost.add("n2")
        held.hold(inventory, None, {"n1": ["gpu0"], "n3": ["gpu0"]}, say=said.append)  # n2 left out, cut off
        assert [line.split(":")[0] for line in said] == ["n2"] and "lapse" in said[0]
        lost.add("n3")
    assert [line.split(":")[0] for line in said] == ["n2", "n3"]  # the loop's end: n3 kept its lease
    assert nodes.holders("n1") == [] and nodes.holders("n3") == ["A"]


def test_a_take_refused_elsewhere_says_the_leases_a_node_kept(tmp_path, monkeypatch):
    """The class above on the take's own release: what a node granted goes back when another refused (all or
    none), and a node that kept it is said (a waiter leaving the queue gives its tickets back through the same
    leases.release_saying)."""
    from clusterctl.errors import StateError
    from clusterctl.run import leases as run_leases

    nodes, lost = _Nodes(tmp_path), set()
    monkeypatch.setattr(run_leases, "_on_nodes", _releases_unanswered(nodes, lost))
    inventory, said = _inventory("n1", "n2"), []
    run_leases.take(inventory, None, "X", {"n2": ["gpu0"]})  # another run holds n2's GPU
    lost.add("n1")
    with pytest.raises(StateError):
        run_leases.take(inventory, None, "B", {"n1": ["gpu0"], "n2": ["gpu0"]}, say=said.append)
    assert [line.split(":")[0] for line in said] == ["n1"] and "lapse" in said[0], said
    assert nodes.holders("n1") == ["B"]  # granted, then kept by the node that did not answer: it lapses


def test_a_run_that_heals_itself_keeps_its_survivors_leases_and_takes_the_spares_only(tmp_path, monkeypatch):
    from clusterctl.errors import StateError
    from clusterctl.run import leases as run_leases

    nodes = _Nodes(tmp_path)
    monkeypatch.setattr(run_leases, "_on_nodes", nodes)
    inventory = _inventory("n1", "n2", "n3")
    with run_leases.holding("A") as held:
        assert run_leases.held_for("A") is held and run_leases.held_for("B") is None
        held.hold(inventory, None, {"n1": ["gpu0"], "n2": ["gpu0"]})
        assert nodes.holders("n1") == nodes.holders("n2") == ["A"]
        nodes.calls.clear()
        held.hold(inventory, None, {"n1": ["gpu0"], "n3": ["gpu0"]})  # n2 left out, the spare n3 joins
        assert ("release", "n1") not in nodes.calls and ("release", "n2") in nodes.calls
        assert nodes.holders("n1") == ["A"] and nodes.holders("n2") == [] and nodes.holders("n3") == ["A"]
        leases.take(str(tmp_path), "n2", "B", "bob@ctl", ["gpu0"], 22.0)
        with pytest.raises(StateError, match="by run B"):  # a spare held by another run: refused, naming it
            held.hold(inventory, None, {"n1": ["gpu0"], "n2": ["gpu0"]})
        assert nodes.holders("n1") == ["A"]  # the survivor still holds its own
    assert nodes.holders("n1") == nodes.holders("n3") == [] and nodes.holders("n2") == ["B"]  # the loop's end


def test_a_controller_takes_back_the_lease_of_its_own_run_that_ended_while_its_node_was_cut_off(tmp_path, monkeypatch):
    from clusterctl.errors import StateError
    from clusterctl.run import leases as run_leases

    nodes = _Nodes(tmp_path)
    monkeypatch.setattr(run_leases, "_on_nodes", nodes)
    inventory = _inventory("n3")
    held = run_leases.take(inventory, None, "LOST", {"n3": ["gpu0"]})
    held.keys.clear()  # the node was cut off as the run ended: nobody released it
    _run_dir(tmp_path, "LOST", "n3", exit_code=137)
    with pytest.raises(StateError, match="by run LOST"):  # a record that does not say it ended: held
        run_leases.take(inventory, None, "NEXT", {"n3": ["gpu0"]}, ended=lambda run_id: False)
    said = []
    run_leases.take(inventory, None, "NEXT", {"n3": ["gpu0"]}, say=said.append, ended=lambda run_id: run_id == "LOST")
    assert nodes.holders("n3") == ["NEXT"] and "released gpu0 of run LOST" in said[0]


def test_a_spare_joining_a_detached_run_takes_its_leases_first_and_a_held_one_is_left_out(tmp_path):
    from clusterctl.node import heal_policy, node_healing
    from clusterctl.run import supervision

    run_dir = _run_dir(tmp_path, "A", "n3")
    config = {"run_id": "A", "host": "n3", "heal": {"gpus": {"n3": [0, 1]}, "nproc": {"n3": 2},
                                                     "lease": {"operator": "alice@ctl", "window_s": 22.0}}}
    assert node_healing.take_leases(str(run_dir), config) is None
    assert [x["key"] for x in leases.listing(str(tmp_path), "n3")["leases"]] == ["gpu0", "gpu1"]
    assert node_healing.take_leases(str(run_dir), config) is None  # a survivor renews its own
    leases.release(str(tmp_path), "n3", "A")
    leases.take(str(tmp_path), "n3", "B", "bob@ctl", ["gpu1"], 22.0)
    order = {"attempt": 2, "values": {}}
    assert node_healing.launch(str(run_dir), {**config, "heal": {**config["heal"], "token": "t"}}, order) is False
    report = node_agent.node_report(str(run_dir))
    assert report["exit_code"] == 1 and node_healing.attempt_of(str(run_dir)) == 2
    assert "gpu1 by run B (bob@ctl)" in report["tail"]
    failure = {"host": "n3", "exit_code": 1, "at": 1.0, "lost": False, "tail": report["tail"]}
    assert heal_policy.verdict([failure]) == ("node", "gpu_leases_held", "n3")  # left out: the next spare joins
    # every program shipped beside the keeper stays in the run dir when an attempt is set aside
    assert {path.name for path in supervision.BESIDE_AGENT + supervision.BESIDE_WATCH} <= set(node_healing.DAEMON_FILES)


def test_a_run_counts_as_ended_only_where_this_controllers_own_record_says_so(tmp_path):
    from clusterctl.ground.records import RunStore
    from clusterctl.run.leases import ended_in
    from clusterctl.state import State

    state = State(tmp_path / "state")
    store = RunStore(state)
    for record in ({"run_id": "E", "cluster": "c", "state": "ended", "exit_code": 1},
                   {"run_id": "S", "cluster": "c", "state": "stopped", "stopped": True},
                   {"run_id": "D", "cluster": "c", "state": "running", "detached": True}):
        path = store.path(record["run_id"])  # the parts of a record that say its state (the rest is not read)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(record))
    ended = ended_in(state)
    assert ended("E") and ended("S") and not ended("D") and not ended("NEVER-SEEN-HERE")
