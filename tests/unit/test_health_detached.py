"""Issue 36's passive watch of a detached run: the keeper's sampler on the node (node/node_health.py),
the supervisor keeping each node's newest sample, and the controller parsing it with the attached
watch's parsers and recording each event once (watch/detached_health.py). A real supervisor and keeper
on loopback, with a stand-in `dmesg` that shows the captured Xid 79 line
(tests/fixtures/health/fallen_off_nvsentinel_155.log) and a stand-in `nvidia-smi` printing a real
H100 read (smi_h100_580.csv)."""
from __future__ import annotations

from pathlib import Path

from clusterctl_helpers import examples, wait_until
from hypothesis import given, settings, strategies as st

from clusterctl.health import watch
from clusterctl.health.record import HealthRecord
from clusterctl.watch import detached_health
from clusterctl.node import engine, node_health
from clusterctl.models import Host, Inventory
from clusterctl.state import State

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "health"
XID_79 = (FIXTURES / "fallen_off_nvsentinel_155.log").read_text().splitlines()[-1]
SMI = (FIXTURES / "smi_h100_580.csv").read_text()
FLEET = Inventory("fleet", tuple(Host(name=f"n{i}", address=f"10.0.0.{i}") for i in (1, 2, 3)))


def test_the_kernel_lines_kept_are_the_nvrm_ones_since_the_run_began_with_their_unstamped_rest():
    text = ("[  90.0] NVRM: Xid (PCI:0000:3b:00): 79, old\n"
            "[ 110.5] eth0: link up\n"
            "[ 120.25] NVRM: GPU at PCI:0000:44:00: GPU-1\n"
            f"[ 121.0] {XID_79}\n"
            "NVRM: the rest of a notice\n")
    kept = node_health.kernel_lines(text, since=1100.0, boot=1000.0)
    assert kept.splitlines() == ["[ 120.25] NVRM: GPU at PCI:0000:44:00: GPU-1", f"[ 121.0] {XID_79}",
                                 "NVRM: the rest of a notice"]
    assert node_health.kernel_lines(text, since=1100.0, boot=None) == ""  # no boot time: nothing dated


def test_a_line_the_kernel_logged_in_the_second_the_keeper_started_is_kept():
    # a detached run's keeper takes its first sample milliseconds after the run began; the stamp is read
    # to its fraction, and the boot time read back from /proc/uptime may be off by a tick (the flaky case
    # seen on the rehearsal cluster: [16818.15] dropped against a start at boot + 16818.4)
    text = f"[16818.15] {XID_79}\n[16812.00] NVRM: Xid (PCI:0000:3b:00): 79, before the run\n"
    kept = node_health.kernel_lines(text, since=1000.0 + 16818.4, boot=1000.0)
    assert kept == f"[16818.15] {XID_79}"


def test_a_sampler_whose_read_fails_says_so_in_its_sample_and_keeps_the_first_nvidia_smi_text():
    reads = iter([{"at": 1.0, "smi": SMI}, {"at": 2.0, "smi": "later"}])

    def read(since):
        return next(reads)

    sampler = node_health.Sampler(since=0.0, every_s=0.05, read=read)
    taken = []

    def deliver():
        found = sampler.take().get("health")
        if found is not None and found not in taken:
            taken.append(found)
            sampler.delivered(found)
        return any("error" in t for t in taken)

    try:
        wait_until(deliver, 30, interval=0.05, what="a failed read said")
    finally:
        sampler.stop()
    assert all(s["smi_first"] == SMI for s in taken if "smi" in s)
    assert any(s["error"].startswith("StopIteration") for s in taken if "error" in s)


def test_a_sample_is_offered_again_until_the_supervisor_acknowledged_it():
    sampler = node_health.Sampler(since=0.0, every_s=3600.0, read=lambda since: {"at": 1.0, "smi": SMI})
    try:
        first = sampler.take(final=True)["health"]  # waits for the first sample
        assert sampler.take()["health"] is first  # the beat that carried it was not answered: again
        sampler.delivered(None)
        assert sampler.take()["health"] is first
        sampler.delivered(first)
        assert sampler.take() == {} and sampler.take(final=True) == {}  # delivered: no wait again
    finally:
        sampler.stop()


def test_the_supervisor_keeps_each_nodes_newest_health_sample_in_its_state():
    sup = engine.Attempt({"run_id": "r1", "hosts": ["a"], "lost_after_s": 15}, "/nonexistent")
    assert sup.beat({"host": "a", "seq": 1, "health": {"at": 1.0, "kernel": XID_79}}) is not None
    assert sup.beat({"host": "a", "seq": 2}) is not None  # a beat without a sample keeps the last one
    assert sup.document()["nodes"]["a"]["health"] == {"at": 1.0, "kernel": XID_79}


_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300) | st.sampled_from(
    [SMI, f"[ 5012.1] {XID_79}", "[ x] NVRM: Xid (PCI:zz): 79", "index, uuid\n0", "Overall Health: Failure"])


@settings(max_examples=examples(200), deadline=None)
@given(st.dictionaries(st.sampled_from(["smi", "smi_first", "kernel", "dcgm", "at", "error"]),
                       _TEXT | st.none() | st.integers() | st.floats(), max_size=6), st.floats(), st.floats())
def test_any_sample_gives_events_or_none_never_an_exception(sample, since, boot):
    events, gpus = detached_health.sample_events("n1", sample)
    assert all(event.host == "n1" for event in events) and isinstance(gpus, list)
    assert isinstance(node_health.kernel_lines(str(sample.get("kernel")), since, boot), str)


def _state(sample: dict) -> dict:
    return {"state": "running", "nodes": {"n1": {"exit_code": None, "health": sample}}}


def test_an_xid_79_in_a_sample_is_recorded_once_however_often_the_state_is_read(tmp_path):
    store = State(tmp_path / "state")
    first = {"at": 5.0, "smi": SMI, "smi_first": SMI, "kernel": f"[ 5012.123456] {XID_79}", "dcgm": ""}
    again = {**first, "at": 35.0, "kernel": f"[ 5042.5] {XID_79}"}  # the same line, stamped anew
    for sample in (first, again, again):
        assert detached_health.record_samples(store, FLEET, "run-1", _state(sample), ["n1"]) is None
    with HealthRecord.open(store.health_db, "fleet") as record:
        node = record.state("n1")
    xids = [e for e in node.events if e.kind == "xid_fatal"]
    assert len(xids) == 1 and node.state == "suspect", node  # the job's side alone: suspect, not quarantined
    assert xids[0].run_id == "run-1" and xids[0].source == "job" and xids[0].evidence.startswith("NVRM: Xid")
    assert "reported by the job's side only" in node.verdict.reason
    assert [g.key for g in node.gpus] == ["uuid:GPU-5265385e-0415-61d5-ef87-fb14ec87c22e"]


def test_forged_samples_naming_other_hosts_and_job_side_evidence_alone_quarantine_no_one(tmp_path):
    """Issue 47, M3: the job writes the supervisor's document (or signs its own node's beats): samples for
    hosts outside the run are not read; the run's own host is suspect until a second source sees it."""
    from clusterctl.health.events import Event
    from clusterctl.health.fleet import record_events, record_run_end, record_stragglers

    store = State(tmp_path / "state")
    fatal = {"at": 5.0, "smi": SMI, "smi_first": SMI, "kernel": f"[ 5012.1] {XID_79}", "dcgm": "Overall Health: Failure"}
    forged = {"state": "failed", "nodes": {h: {"exit_code": 1, "lost": True, "health": fatal} for h in ("n1", "n2", "n3")}}
    assert detached_health.record_samples(store, FLEET, "r1", forged, ["n1"]) is None
    lost = {"run_id": "r1", "exit_code": 1, "state": "failed", "nodes": forged["nodes"]}
    for run in ("r1", "r2", "r3"):  # three runs of lost nodes: past node_lost's quarantine_after
        assert record_run_end(store, FLEET, {**lost, "run_id": run}, ["n1"]) is None
        assert record_stragglers(store, FLEET, run, [{"host": h, "rank": 0, "evidence": "x"} for h in ("n1", "n2")] * 3,
                                 ["n1"]) is None
    with HealthRecord.open(store.health_db, "fleet") as record:
        states = {n.host: n for n in record.states(["n1", "n2", "n3"])}
    assert (states["n2"].state, states["n3"].state, states["n2"].events, states["n3"].events) == (
        "healthy", "healthy", (), ()), states
    assert states["n1"].state == "suspect" and {e.source for e in states["n1"].events} == {"job"}, states["n1"]
    # a second source (the controller's own watch of an attached run) sees the same: now quarantined
    assert record_events(store.health_db, FLEET, [Event("n1", "xid_fatal", "watch", evidence="NVRM: Xid 79")]) is None
    with HealthRecord.open(store.health_db, "fleet") as record:
        assert record.state("n1").state == "quarantined"


def test_counters_are_compared_with_the_runs_first_sample_and_text_that_is_not_a_sample_records_nothing(tmp_path):
    store = State(tmp_path / "state")
    worse = SMI.replace("00000000:00:06.0, 0, 0,", "00000000:00:06.0, 2, 2,")
    found, _ = detached_health.sample_events("n1", {"smi": worse, "smi_first": SMI})
    assert [(e.kind, e.gpu.key) for e in found] == [("ecc_uncorrectable", "uuid:GPU-5265385e-0415-61d5-ef87-fb14ec87c22e")]
    assert detached_health.sample_events("n1", {"smi": SMI, "smi_first": SMI}) == (
        [], [watch.parse_smi_csv(SMI).gpus[0].gpu])
    for junk in ({"smi": 3, "kernel": None, "dcgm": {"x": 1}}, "not a sample", None):
        assert detached_health.record_samples(store, FLEET, "r", {"nodes": {"n1": {"health": junk}}}, ["n1"]) is None
    assert detached_health.record_samples(store, FLEET, "r", {"nodes": "no"}, ["n1"]) is None
