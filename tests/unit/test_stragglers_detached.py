"""The straggler watch of a detached run (node/straggler_verdict.py, node/node_stragglers.py, the engine):
the keepers' compact samples of the attached tests' captured py-spy samples (tests/fixtures/pyspy, 2 gloo
ranks, rank 1 0.35 s slower on a 0.2 s step, and the same job with both alike) judged by the supervisor
with the attached watch's verdict, one code."""
from __future__ import annotations

from pathlib import Path

from clusterctl.documents import parts
from clusterctl.node import engine, node_stragglers, straggler_verdict
from clusterctl.watch.sampler import parse_node_output
from clusterctl.watch.stragglers import find, readings

from unit.test_supervision import Clock

PYSPY = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy"
SLOW = "node_straggler_slow_r1_2ranks.txt"
HEALTHY = "node_straggler_healthy_2ranks.txt"
START = 1000


def _readings(name: str):
    return readings(parse_node_output((PYSPY / name).read_text(), "node1").samples)


def _summaries(name: str, first_tick: int = START):
    """The samples as two keepers send them: rank 0 on node1, rank 1 on node2, one sample a tick."""
    by_host: dict[str, list] = {"node1": [], "node2": []}
    for i, sample in enumerate(_readings(name)):
        for r in sample:
            by_host[f"node{r.rank + 1}"].append([first_tick + i, [[r.rank, int(r.waiting)]]])
    return by_host


def _fed(watch, name, first_tick=START):
    """Each keeper's samples in beats of the latest KEPT (overlapping, as the keepers send them)."""
    for host, samples in _summaries(name, first_tick).items():
        for end in range(1, len(samples) + 1):
            watch.heard(host, {"samples": samples[max(0, end - node_stragglers.KEPT):end]})
    return first_tick + len(_readings(name))


def test_the_supervisor_names_the_slow_rank_as_the_attached_watch_does():
    watch = straggler_verdict.Watch()
    last = _fed(watch, SLOW)
    assert watch.judge(last + straggler_verdict.Watch.SETTLE_TICKS) is True
    [named] = watch.found()
    attached = find(parse_node_output((PYSPY / SLOW).read_text(), "node1").samples, None, 0.0)
    assert (named["host"], named["rank"]) == ("node2", 1) and attached.rank == 1
    assert named["evidence"] == attached.evidence.replace("node1", "node2")
    assert named["lag_share"] == round(attached.lag_share, 3) and named["ratio"] == round(attached.ratio, 2)
    assert named["until"] is None and named["lag_s"] is None  # no step time on the cluster: a share of the step
    assert set(named) == {f for f in parts.Straggler.__dataclass_fields__}  # run.json's shape


def test_a_healthy_run_names_nobody():
    watch = straggler_verdict.Watch()
    last = _fed(watch, HEALTHY)
    assert watch.judge(last + 10) is False and watch.found() == []


def test_the_latest_ticks_wait_for_every_keeper_and_each_tick_counts_once():
    watch = straggler_verdict.Watch()
    last = _fed(watch, SLOW)
    watch.judge(last)
    assert len(watch.window) == 16 - straggler_verdict.Watch.SETTLE_TICKS + 1  # the newest ticks are not settled yet
    _fed(watch, SLOW)  # the same ticks again (a beat resent): no sample twice
    watch.judge(last + 10)
    assert len(watch.window) == 16


def test_a_named_rank_that_keeps_pace_again_gets_its_until():
    watch = straggler_verdict.Watch()
    last = _fed(watch, SLOW)
    watch.judge(last + 3)
    for _ in range(3):
        last = _fed(watch, HEALTHY, last)
    assert watch.judge(last + 3) is True
    assert watch.found()[0]["until"] == last + 3 and watch.named is None


def test_malformed_summaries_are_ignored_and_a_keeper_without_py_spy_is_said_once():
    watch = straggler_verdict.Watch()
    for junk in (None, [], {"samples": "x"}, {"samples": [[1], ["a", []], [5, [[0]], 1]]}, {"samples": [[5, [["r", 1]]]]}):
        watch.heard("node1", junk)
    watch.heard("node2", {"samples": [], "problem": "no py-spy: ..."})
    watch.judge(100)
    assert watch.found() == [] and watch.problems == {"node2": "no py-spy: ..."}


def test_the_keeper_reads_whether_the_main_thread_waits_from_py_spy_json():
    assert node_stragglers.waits((PYSPY / "gloo_rank0_all_reduce.json").read_text()) is True
    assert node_stragglers.waits((PYSPY / "gloo_rank1_load_shard.json").read_text()) is False
    assert node_stragglers.waits("Error: Permission denied") is None and node_stragglers.waits("[]") is None


def test_the_engine_takes_the_samples_in_beats_and_its_document_names_the_straggler():
    clock = Clock()
    sup = engine.Attempt({"run_id": "r1", "hosts": ["node1", "node2"], "lost_after_s": 60,
                          "stragglers": {"arch": "", "sha": ""}}, "/nonexistent", now=clock)
    seq = 0
    summaries = _summaries(SLOW)
    for i in range(len(summaries["node1"])):
        clock.t = START + i + 1.0
        seq += 1
        for host, samples in summaries.items():
            sup.beat({"host": host, "seq": seq, "exit_code": None, "ranks": 1,
                      "stragglers": {"samples": samples[max(0, i + 1 - node_stragglers.KEPT):i + 1]}})
        sup.tick()
    clock.t += 5
    sup.tick()
    document = sup.document()
    assert [(s["host"], s["rank"]) for s in document["stragglers"]] == [("node2", 1)]
    plain = engine.Attempt({"run_id": "r1", "hosts": ["a"], "lost_after_s": 60}, "/nonexistent")
    assert "stragglers" not in plain.document()  # not asked for: the document is as it was


def test_the_ranks_named_become_straggler_events_of_their_nodes_in_the_health_record(tmp_path):
    from clusterctl.health.fleet import record_stragglers
    from clusterctl.health.record import HealthRecord
    from clusterctl.models import Host, Inventory
    from clusterctl.state import State

    state = State(tmp_path / "state")
    fleet = Inventory("fleet", tuple(Host(name=f"node{i}", address=f"10.0.0.{i}") for i in (1, 2)))
    watch = straggler_verdict.Watch()
    watch.judge(_fed(watch, SLOW) + 3)
    assert record_stragglers(state, fleet, "r1", watch.found()) is None
    assert record_stragglers(state, fleet, "r2", []) is None
    with HealthRecord.open(state.health_db, "fleet") as record:
        events = [e for e in record.state("node2").events if e.kind == "straggler"]
    assert [(e.run_id, e.evidence[:7]) for e in events] == [("r1", "rank 1:")], events


def test_a_keeper_without_a_py_spy_that_runs_says_so_once_and_samples_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(node_stragglers.shutil, "which", lambda name: None)
    (tmp_path / node_stragglers.PACKED).write_bytes(b"not gzip")  # a shipped binary that is not one: not run
    sampler = node_stragglers.Sampler(str(tmp_path), {"arch": "x86_64", "sha": "0" * 64}, marker=["A=b"])
    for _ in range(100):
        if sampler.summary().get("problem"):
            break
        sampler.closed.wait(0.02)
    sampler.close()
    assert sampler.summary() == {"samples": [], "problem": sampler.problem} and sampler.problem.startswith("no py-spy")
    assert capsys.readouterr().out.count("no straggler watch: no py-spy") == 1
    assert not list(tmp_path.iterdir())  # nothing it was shipped stays
