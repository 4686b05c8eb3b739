"""Issue 36 where the health record meets the other flows: the events a preflight, a run's end, an
nccl-test --pairs and the passive watch's read of a node give; the plan's hosts without the
quarantined ones (refused, naming node, reason and fix, when none is left)."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from clusterctl_helpers import examples

from clusterctl.errors import StateError
from clusterctl.health.events import Event
from clusterctl.health.fleet import partner_for, plannable, record_events, record_run_end
from clusterctl.health.seen import check_events, pair_events, run_events
from clusterctl.watch.health_watch import PassiveWatch, sample_command
from clusterctl.models import Host, HostResult, HostStatus, Inventory
from clusterctl.state import State
from clusterctl.transport import BATCH_MARK

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "health"
XID_79 = (FIXTURES / "fallen_off_nvsentinel_155.log").read_text().splitlines()[-1]
FLEET = Inventory("fleet", tuple(Host(name=f"n{i}", address=f"10.0.0.{i}") for i in (1, 2, 3)))


def _lost_record(**changes) -> dict:
    return {"run_id": "r1", "exit_code": 1, "state": "ended", "nodes": {"n3": {"lost": True}, "n1": {"lost": False}},
            "first_failure": {"host": "n3", "diagnosis": [{"cause": "node_unreachable", "host": "n3",
                                                           "evidence": "n3 stopped answering for more than 15s"}]},
            **changes}


def test_failed_checks_become_one_preflight_failed_and_a_clean_host_check_passed():
    checks = [{"host": "n1", "check": "shm", "status": "fail", "detail": "64 MiB"},
              {"host": "n1", "check": "disk", "status": "pass", "detail": ""},
              {"host": "n2", "check": "shm", "status": "warn", "detail": "small"},
              {"host": None, "check": "clock", "status": "fail", "detail": "skew"}]
    events = check_events(checks, "up", ["n1", "n2", "n3"])
    assert [(e.host, e.kind, e.cause) for e in events] == [("n1", "preflight_failed", "shm"), ("n2", "check_passed", "")]
    assert events[0].evidence == "shm: 64 MiB"


def test_a_lost_node_is_node_lost_with_the_runs_evidence_and_a_stopped_run_blames_no_one():
    events = run_events(_lost_record())
    assert [(e.host, e.kind, e.run_id) for e in events] == [("n3", "node_lost", "r1")]
    assert "stopped answering" in events[0].evidence
    assert run_events(_lost_record(stopped=True)) == [] and run_events(_lost_record(exit_code=0)) == []


def test_a_run_blames_a_node_for_its_gpu_never_for_the_jobs_own_exception():
    gpu = {"host": "n2", "diagnosis": [{"cause": "gpu_xid", "host": "n2", "evidence": XID_79}]}
    own = {"host": "n2", "diagnosis": [{"cause": "unknown", "host": "n2", "evidence": "ValueError"}]}
    blamed = run_events({"run_id": "r2", "exit_code": 1, "nodes": {}, "first_failure": gpu})
    assert [(e.host, e.kind, e.cause) for e in blamed] == [("n2", "run_blamed", "gpu_xid")]
    assert run_events({"run_id": "r3", "exit_code": 1, "nodes": {}, "first_failure": own}) == []


@settings(max_examples=examples(200), deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
                    max_leaves=30))
def test_any_run_record_gives_events_or_none_never_an_exception(record):
    if isinstance(record, dict):
        assert isinstance(run_events(record), list)


def test_the_pairs_outlier_is_an_nccl_outlier_and_no_outlier_says_nothing():
    slow = {"slowest": {"host": "n2", "outlier": True, "score_gbps": 1.0, "others_median_gbps": 9.0}}
    assert [(e.host, e.kind) for e in pair_events(slow)] == [("n2", "nccl_outlier")]
    assert pair_events({"slowest": {"host": "n2", "outlier": False}}) == [] and pair_events({}) == []


def test_a_run_end_quarantines_by_the_inventorys_rule_and_the_plan_leaves_the_node_out(tmp_path):
    from clusterctl.models import HealthRuleOverride, HealthSettings

    state = State(tmp_path / "state")
    strict = Inventory("fleet", FLEET.hosts, health=HealthSettings((HealthRuleOverride("node_lost", (("quarantine_after", 1),)),)))
    assert plannable(state.health_db, strict).left_out == {}  # no record yet: nothing read, no file made
    assert not state.health_db.exists()
    assert record_run_end(state, strict, _lost_record()) is None
    found = plannable(state.health_db, strict)
    assert [h.name for h in found.inventory.hosts] == ["n1", "n2"] and list(found.left_out) == ["n3"]
    assert "n3 (node_lost" in found.note() and "clusterctl health check HOST" in found.note()
    included = plannable(state.health_db, strict, include_quarantined=True)
    assert [h.name for h in included.inventory.hosts] == ["n1", "n2", "n3"] and included.left_out == {}
    assert included.note().startswith("health: planning quarantined n3 (node_lost") and "--include-quarantined" in \
        included.note()
    assert plannable(state.health_db, FLEET).note() == ""  # the default rules: nothing quarantined, nothing said
    assert partner_for(state.health_db, strict, "n3") == "n1"


def test_a_plan_with_every_node_quarantined_is_refused_naming_the_node_the_reason_and_the_fix(tmp_path):
    db = tmp_path / "health.db"
    one = Inventory("fleet", FLEET.hosts[:1])
    record_events(db, one, [Event("n1", "xid_fatal", "watch", evidence=XID_79, cause="Xid 79")])
    with pytest.raises(StateError) as refused:
        plannable(db, one)
    assert "xid_fatal" in refused.value.what and refused.value.where == "n1"
    assert "clusterctl health check n1" in refused.value.fix and "clusterctl health release n1" in refused.value.fix


def test_a_record_that_cannot_be_written_or_read_is_said_and_the_flow_goes_on(tmp_path):
    db = tmp_path / "health.db"
    db.write_text("not a database at all, and long enough to have a header")
    note = record_events(db, FLEET, [Event("n1", "node_lost", "run")])
    assert note and note.startswith("the health record was not updated") and "1 event(s) lost" in note
    assert db.read_text().startswith("not a database")
    found = plannable(db, FLEET)  # nor does it stop a plan: every host, said
    assert len(found.inventory.hosts) == 3 and found.note().startswith("health: the health record could not be read")


def _sample(kernel: str, smi: str = "sh: 1: nvidia-smi: not found\n") -> HostResult:
    out = f"{BATCH_MARK}smi\n{smi}{BATCH_MARK}kernel\n{kernel}{BATCH_MARK}dcgm\n"
    return HostResult("n2", HostStatus.OK, stdout=out)


def test_the_watch_reads_an_xid_79_once_per_run_whatever_its_stamp_and_a_cpu_node_says_nothing_else():
    watch = PassiveWatch(None, 0.0, lambda events, gpus: None, lambda event: None)
    events, gpus = watch.read("n2", _sample(f"[ 5012.123456] {XID_79}\n"))
    assert [(e.kind, e.cause, e.gpu) for e in events] == [("xid_fatal", "Xid 79", None)] and gpus == []
    assert watch.read("n2", _sample(f"[ 5042.654321] {XID_79}\n")) == ([], [])  # the same line, read again
    assert watch.read("n2", _sample("")) == ([], [])


def test_the_watch_records_the_gpus_a_real_h100_reports_and_says_nothing_of_a_healthy_one():
    watch = PassiveWatch(None, 0.0, lambda events, gpus: None, lambda event: None)
    events, gpus = watch.read("n2", _sample("", (FIXTURES / "smi_h100_580.csv").read_text()))
    assert events == [] and [g.uuid for g in gpus] == ["GPU-5265385e-0415-61d5-ef87-fb14ec87c22e"]


def test_a_real_4x_h100_round_trip_gives_its_four_gpus_by_uuid_and_serial_and_no_event():
    watch = PassiveWatch(None, 0.0, lambda events, gpus: None, lambda event: None)
    text = (FIXTURES / "watch_batch_h100x4_580.txt").read_text()
    events, gpus = watch.read("h1", HostResult("h1", HostStatus.OK, stdout=text))
    assert events == [] and [g.index for g in gpus] == [0, 1, 2, 3]
    assert gpus[3].uuid == "GPU-f4822d79-d184-b15d-18e4-6c403acf7361" and gpus[3].serial == "1652824180879"


def test_the_watch_reads_nothing_without_a_running_node_and_asks_the_kernel_log_since_the_runs_start():
    seen = []
    watch = PassiveWatch(None, 0.0, lambda events, gpus: seen.append(events), lambda event: None, run_id="r9")
    watch.tick([])  # no running node: nothing read, the clock not started
    assert watch._last is None and seen == []
    command = sample_command(1700000000.5)
    assert "1700000000" in command.argv[2] and "nvidia-smi --query-gpu=index,uuid,serial" in command.argv[2]


def test_a_slurm_allocation_excludes_the_quarantined_nodes_unless_the_operator_includes_them(tmp_path):
    import argparse

    from clusterctl.api.session import Session
    from clusterctl.backends.slurm import excluded_nodes
    from clusterctl.inventory.load import parse_inventory
    from clusterctl.slurm.submit import salloc_argv

    on_slurm = parse_inventory("name: fleet\nscheduler: {type: slurm, partition: gpu, nodes: 2}\n"
                               "job: {command: [train.py]}\n", "inv.yaml")
    session = Session.create(argparse.Namespace(json=True, verbose=False, include_quarantined=False),
                             {"CLUSTERCTL_STATE": str(tmp_path / "state")})
    assert excluded_nodes(session, on_slurm) == ()  # no record: nothing asked of Slurm
    record_events(session.state.health_db, on_slurm, [Event("gpu-07", "xid_fatal", "watch", evidence=XID_79,
                                                            cause="Xid 79")])
    assert excluded_nodes(session, on_slurm) == ("gpu-07",)  # a node the inventory never listed: Slurm's name
    argv = salloc_argv(on_slurm, "r1", excluded_nodes(session, on_slurm))
    assert argv[:3] == ("salloc", "--no-shell", "--job-name=clusterctl-r1") and argv[-1] == "--exclude=gpu-07"
    assert "--exclude" not in " ".join(salloc_argv(on_slurm, "r1"))
    session.args.include_quarantined = True
    assert excluded_nodes(session, on_slurm) == ()


def test_the_gpus_a_preflight_reports_are_kept_by_uuid_and_a_containers_partial_view_marks_none_gone(tmp_path):
    from clusterctl.health.fleet import record_checks
    from clusterctl.health.record import HealthRecord
    from clusterctl.preflight.facts.nvidia import Gpu

    state = State(tmp_path / "state")
    checks = [{"host": "n1", "check": "gpus", "status": "pass", "detail": "2 GPUs"}]
    both = (Gpu(0, "H100", uuid="GPU-aaaa"), Gpu(1, "H100", uuid="GPU-bbbb"))
    assert record_checks(state, FLEET, checks, "up", {"n1": both, "n2": (Gpu(0, "H100"),)}) is None
    assert record_checks(state, FLEET, checks, "check", {"n1": both[:1]}) is None  # one GPU given to the container
    with HealthRecord.open(state.health_db, "fleet") as record:
        n1, n2 = record.state("n1"), record.state("n2")
    assert [(g.key, g.index) for g in n1.gpus] == [("uuid:GPU-aaaa", 0), ("uuid:GPU-bbbb", 1)]
    assert n2.gpus == ()  # no UUID reported: not keyed by the preflight (the watch keys it by serial or index)


def test_where_spares_exist_suspect_hosts_are_chosen_last_and_the_chosen_keep_the_inventorys_order(tmp_path):
    """Issue 48: which hosts take part is health-aware (suspect ones only when needed); their order, and so
    the master, stay as written (reordering the hosts once moved the master and broke the rendezvous)."""
    from dataclasses import replace

    from clusterctl.backends.healing import _fleet
    from clusterctl.health.fleet import suspect_hosts

    db = tmp_path / "health.db"
    assert suspect_hosts(db, FLEET) == frozenset()  # no record: none
    record_events(db, FLEET, [Event("n2", "node_lost", "run", run_id="r1")])
    suspect = suspect_hosts(db, FLEET)
    assert suspect == {"n2"}
    four = replace(FLEET, hosts=(*FLEET.hosts, Host(name="n4", address="10.0.0.4")))
    fleet = _fleet(four, 2, suspect)
    assert [h.name for h in fleet.active] == ["n1", "n3"] and [h.name for h in fleet.spares] == ["n4", "n2"]
    fleet = _fleet(four, 3, suspect)  # needed: taken, in its place
    assert [h.name for h in fleet.active] == ["n1", "n3", "n4"] and [h.name for h in fleet.spares] == ["n2"]
    assert [h.name for h in _fleet(four, 4, suspect).active] == ["n1", "n2", "n3", "n4"]
    fleet = _fleet(four, 2, frozenset({"n1"}))  # the master stays the master
    assert [h.name for h in fleet.active] == ["n1", "n2"]
    named = replace(four, rendezvous=replace(four.rendezvous, master="n3"))
    assert [h.name for h in _fleet(named, 2, frozenset({"n1"})).active] == ["n3", "n2"]
