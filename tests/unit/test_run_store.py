"""The run record and its store (ground/run_record.py, ground/records.py): one state vocabulary, one writer."""
import json
import typing

from clusterctl.documents.commands import RunRecord as PublishedRunRecord
from clusterctl.ground import records
from clusterctl.ground.run_record import ABSENT, RECORDED, REPORTED, RunRecord, RunState
from clusterctl.state import State


def test_the_states_a_record_holds_are_the_ones_its_schema_publishes():
    hint = typing.get_type_hints(PublishedRunRecord)["state"]
    published = typing.get_args(typing.get_args(hint)[0])
    assert tuple(s.value for s in RECORDED) == published == ("running", "ended", "stopped")


def test_the_states_status_reports_keep_their_json_values():
    assert [s.value for s in REPORTED] == ["running", "unknown", "stopped", "succeeded", "failed", "interrupted"]
    assert f"{RunState.FAILED}" == "failed" and str(RunState.UNKNOWN) == "unknown"
    assert json.dumps({"state": RunState.RUNNING}) == '{"state": "running"}'


def test_every_key_the_schema_publishes_is_a_field_of_the_record():
    published = {f for f in PublishedRunRecord.__dataclass_fields__ if f != "inventory_source"}
    assert published <= set(RunRecord.__dataclass_fields__)


def test_a_record_writes_exactly_the_keys_it_was_given():
    document = {"run_id": "r1", "state": "running", "exit_code": None, "outputs": "/o", "place": {"a": 1}}
    record = RunRecord.from_json(document)
    assert record.state is RunState.RUNNING and record.exit_code is None and record.ended is ABSENT
    assert record.to_json() == document


def test_a_change_replaces_a_key_or_removes_it():
    record = RunRecord.from_json({"run_id": "r1", "state": "running", "relaunching": True})
    changed = record.with_(state="stopped", stopped=True, relaunching=ABSENT, stopped_by="me")
    assert changed.to_json() == {"run_id": "r1", "state": "stopped", "stopped": True, "stopped_by": "me"}
    assert record.to_json()["state"] == "running"  # frozen: the old value stays as it was


def test_a_state_no_clusterctl_writes_is_kept_as_read():
    assert RunRecord.from_json({"run_id": "r1", "state": "odd"}).to_json() == {"run_id": "r1", "state": "odd"}


def test_the_store_writes_atomically_and_reads_back(tmp_path):
    store = records.RunStore(State(tmp_path))
    store.write(RunRecord.from_json({"run_id": "20250101-120000-aaaaaa", "state": "running", "exit_code": None, "started": 1.0}))
    path = store.path("20250101-120000-aaaaaa")
    assert json.loads(path.read_text()) == {"run_id": "20250101-120000-aaaaaa", "state": "running", "exit_code": None, "started": 1.0}
    assert not list(path.parent.glob("*.tmp")) and oct(path.stat().st_mode & 0o777) == "0o600"
    store.update("20250101-120000-aaaaaa", state=RunState.ENDED, exit_code=0, nodes={})
    again = store.read("20250101-120000-aaaaaa")
    assert again.state is RunState.ENDED and again.exit_code == 0 and again.get("nodes") == {}
    assert records.state_of(again, again.run_id, lambda name: None) is RunState.SUCCEEDED


def test_the_store_lists_newest_first_and_skips_what_it_cannot_read(tmp_path):
    store = records.RunStore(State(tmp_path))
    for run_id in ("20250101-120000-aaaaaa", "20250101-130000-bbbbbb"):
        store.write(RunRecord(run_id, state=RunState.ENDED, exit_code=1, started=1.0))
    (store.dir("20250101-140000-cccccc") / "run.json").write_text("not json")
    assert [r.run_id for r in store.list()] == ["20250101-130000-bbbbbb", "20250101-120000-aaaaaa"]
    assert store.last_id() == "20250101-140000-cccccc"


def test_an_update_of_a_missing_record_starts_from_its_run_id(tmp_path):
    store = records.RunStore(State(tmp_path))
    written = store.update("r9", started=1.0, exit_code=None)
    assert written.to_json() == {"run_id": "r9", "started": 1.0, "exit_code": None}


def test_a_follow_up_command_takes_a_run_id_or_the_handle_a_launch_returned(tmp_path):
    from clusterctl.ground.run_record import RunHandle

    handle = RunHandle("20250101-120000-aaaaaa", "nodes", "c1")
    assert str(handle) == "nodes://c1/20250101-120000-aaaaaa" and RunHandle.parse(str(handle)) == handle
    assert RunHandle.parse("20250101-120000-aaaaaa") == RunHandle("20250101-120000-aaaaaa")
    state = State(tmp_path)
    assert records.parse_run_id(state, str(handle)) == records.parse_run_id(state, handle.run_id) == handle.run_id
    assert records.handle_of({"backend": "slurm", "cluster": "c2"}, "r1") == RunHandle("r1", "slurm", "c2")
    assert records.handle_of({"slurm": {"job_id": "7"}}, "r1").backend == "slurm"  # an older record


def test_a_reference_that_is_no_run_is_refused_as_a_usage_error(tmp_path):
    import pytest

    from clusterctl.errors import UsageError

    for given in ("nodes://c1/", "../x", "://c1/r1"):
        with pytest.raises(UsageError):
            records.parse_run_id(State(tmp_path), given)


def test_a_supervisors_final_state_maps_onto_the_records():
    from clusterctl.ground.run_record import SUPERVISED, recorded_end

    assert [s.value for s in SUPERVISED] == ["running", "succeeded", "failed", "stopped"]
    assert [recorded_end(s).value for s in ("succeeded", "failed", "stopped")] == ["ended", "ended", "stopped"]
