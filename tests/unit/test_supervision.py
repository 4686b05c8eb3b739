"""The run's supervision on the cluster (node/node_agent.py, run/supervision.py; issue 27): the
supervisor's decisions on a fake clock, then a real supervisor and keeper talking HTTP on loopback
(signed messages, a forged or replayed one refused), and a run on this machine handed over with
`run --detach`: it goes on with no clusterctl process, fails fast on its own, and `status` and
`attach` name the failed rank."""
from __future__ import annotations

import json

from clusterctl.node import engine, node_agent
from clusterctl.run import supervision


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _supervisor(hosts=("a", "b"), lost_after_s=15.0):
    clock = Clock()
    config = {"run_id": "r1", "hosts": list(hosts), "lost_after_s": lost_after_s}
    return engine.Attempt(config, "/nonexistent", now=clock), clock


def _beat(sup, host, seq, **report):
    return sup.beat({"host": host, "seq": seq, "exit_code": None, "ranks": 2, **report})


def test_a_failed_node_stops_everyone_after_the_others_had_a_moment_to_report():
    sup, clock = _supervisor()
    assert _beat(sup, "a", 1)["stop"] is False and _beat(sup, "b", 1)["stop"] is False
    clock.t += 1
    assert _beat(sup, "b", 2, exit_code=1, tail="boom")["stop"] is False  # settling
    assert sup.tick() is False and sup.state == "running"
    clock.t += engine.SETTLE_S
    assert sup.tick() is False and sup.state == "failed"  # a still runs: told to stop, awaited
    answer = _beat(sup, "a", 2)
    assert answer["stop"] is True and "b failed (exit 1)" in answer["reason"] and answer["ack"] is False
    assert _beat(sup, "a", 3, exit_code=-15)["ack"] is True
    assert sup.tick() is True
    document = sup.document(final=True)
    assert [f["host"] for f in document["failures"]] == ["b", "a"] and document["failures"][0]["tail"] == "boom"


def test_every_node_exiting_0_is_success_and_a_stop_mark_is_a_stop():
    sup, clock = _supervisor()
    _beat(sup, "a", 1, exit_code=0)
    assert sup.tick() is False
    _beat(sup, "b", 1, exit_code=0)
    assert sup.tick() is True and sup.state == "succeeded"
    sup, clock = _supervisor()
    _beat(sup, "a", 1, exit_code=143, stopped=True)
    assert sup.state == "stopped" and sup.failures == []
    assert _beat(sup, "b", 1)["stop"] is True


def test_a_silent_node_is_lost_and_one_never_heard_is_lost_later():
    sup, clock = _supervisor(lost_after_s=15)
    _beat(sup, "a", 1)
    _beat(sup, "b", 1)
    clock.t += 10
    _beat(sup, "a", 2)
    clock.t += 6  # b silent for 16 s
    sup.tick()
    assert sup.state == "failed" and sup.failures[0]["host"] == "b" and sup.failures[0]["lost"]
    sup, clock = _supervisor(lost_after_s=15)
    _beat(sup, "a", 1)
    clock.t += 20
    _beat(sup, "a", 2)
    assert sup.tick() is False and sup.state == "running"  # b has a minute to come up
    clock.t += engine.NEVER_SEEN_S
    _beat(sup, "a", 3)
    sup.tick()
    assert sup.state == "failed" and sup.failures[0]["host"] == "b"


def test_a_run_whose_ranks_all_went_silent_for_the_stall_timeout_is_reported_stalled_not_stopped():
    clock = Clock()
    sup = engine.Attempt({"run_id": "r1", "hosts": ["a", "b"], "lost_after_s": 15, "stall_timeout_s": 60},
                                "/nonexistent", now=clock)
    _beat(sup, "a", 1, silent_s=50.0)
    _beat(sup, "b", 1, silent_s=2.0)
    sup.tick()
    assert sup.stalled_s is None  # b wrote 2 s ago
    clock.t += 1
    _beat(sup, "a", 2, silent_s=70.0)
    _beat(sup, "b", 2, silent_s=65.0)
    clock.t += 0.5
    assert sup.tick() is False and sup.stalled_s == 65.5 and sup.state == "running"
    assert sup.document()["stalled_s"] == 65.5 and _beat(sup, "a", 3, silent_s=71.0)["stop"] is False
    _beat(sup, "b", 3, silent_s=0.5)  # b printed again
    sup.tick()
    assert sup.stalled_s is None
    off, _ = _supervisor()  # no stall_timeout_s: never
    _beat(off, "a", 1, silent_s=1e6)
    _beat(off, "b", 1, silent_s=1e6)
    off.tick()
    assert off.stalled_s is None


def test_a_run_past_its_timeout_is_stopped_and_says_so():
    clock = Clock()
    sup = engine.Attempt({"run_id": "r1", "hosts": ["a"], "lost_after_s": 15, "timeout_s": 30},
                                "/nonexistent", now=clock)
    _beat(sup, "a", 1)
    clock.t += 29
    _beat(sup, "a", 2)
    assert sup.tick() is False and sup.state == "running"
    clock.t += 2
    _beat(sup, "a", 3)
    sup.tick()
    assert sup.state == "failed" and _beat(sup, "a", 4)["stop"] is True
    code, first = supervision.outcome_of(sup.document(), inventory=None)
    assert code == 1 and "ran past --timeout 30s" in first["diagnosis"][0]["evidence"]


def test_an_old_or_repeated_sequence_number_and_an_unknown_host_are_refused():
    sup, _ = _supervisor()
    assert _beat(sup, "a", 5) is not None
    assert _beat(sup, "a", 5) is None and _beat(sup, "a", 4) is None
    assert _beat(sup, "zz", 9) is None
    assert sup.beat({"host": "a", "seq": "6"}) is None


def test_the_state_read_from_a_node_says_how_old_it_is_and_whether_its_supervisor_is_gone():
    running = json.dumps({"state": "running", "final": False})
    assert supervision.parse_state(f"1000 999\n{running}")["gone"] is False
    assert supervision.parse_state(f"1000 900\n{running}")["gone"] is True
    final = json.dumps({"state": "failed", "final": True})
    assert supervision.parse_state(f"1000 900\n{final}")["gone"] is False
    for bad in ("", "x y\n{}", "1 2\nnot json", "1 2\n[1]"):
        assert supervision.parse_state(bad) is None
