"""The health record's file and its API: two writers lose nothing, a newer, corrupt or locked
file is refused with what/where/fix and left as it was, a backwards clock changes no order."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from clusterctl.errors import StateError, UsageError
from clusterctl.health.events import Event, GpuId
from clusterctl.health.record import HealthRecord
from clusterctl.health.store import SCHEMA_VERSION, HealthStore


def test_a_database_written_by_a_newer_clusterctl_is_refused_and_left_unaltered(tmp_path):
    path = tmp_path / "health.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE future (x)")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(StateError) as error:
        HealthStore(path)
    assert "newer clusterctl" in error.value.what and error.value.where == str(path) and "upgrade" in error.value.fix
    assert path.read_bytes() == before
    assert not Path(str(path) + "-wal").exists()  # not even switched to WAL


def test_a_file_that_is_not_a_database_is_refused_without_being_overwritten(tmp_path):
    path = tmp_path / "health.db"
    path.write_bytes(b"half a disk block of something else\x00" * 40)
    before = path.read_bytes()
    with pytest.raises(StateError) as error:
        HealthStore(path)
    assert "damaged" in error.value.what and "mv " in error.value.fix and error.value.where == str(path)
    assert path.read_bytes() == before


def test_a_database_damaged_inside_is_refused_and_kept(tmp_path):
    with HealthRecord.open(tmp_path / "health.db", "c") as record:
        record.record(*[Event("n1", "straggler", "straggler", evidence="x" * 500) for _ in range(50)])
    path = tmp_path / "health.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = bytearray(path.read_bytes())
    data[4096 + 10:4096 + 4000] = b"\xff" * 3990  # the second page: an interior or leaf page of events
    path.write_bytes(bytes(data))
    with pytest.raises(StateError) as error:
        with HealthRecord.open(tmp_path / "health.db", "c") as record:
            record.states()
    assert "damaged" in error.value.what
    assert path.read_bytes() == bytes(data)


def test_a_locked_file_says_who_to_wait_for(tmp_path):
    HealthRecord.open(tmp_path / "health.db", "c").close()
    holder = sqlite3.connect(tmp_path / "health.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        store = HealthStore(tmp_path / "health.db", busy_timeout_s=0.2)
        with pytest.raises(StateError) as error:
            store.add("c", [(Event("n1", "straggler", "straggler"), "soft")])
        store.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "locked by another process" in error.value.what and "fuser" in error.value.fix
    with HealthRecord.open(tmp_path / "health.db", "c") as record:  # and the record works again once it is free
        record.record(Event("n1", "straggler", "straggler"))
        assert len(record.history("n1")) == 1


def test_a_clock_that_jumps_backwards_does_not_reorder_or_undo_a_quarantine(tmp_path):
    with HealthRecord.open(tmp_path / "health.db", "c") as record:
        record.record(Event("n1", "node_lost", "run", evidence="first", at=2_000_000_000.0))
        record.record(Event("n1", "node_lost", "run", evidence="second", at=1_000_000_000.0))  # clock went back
        node = record.state("n1")
        assert [e.evidence for e in node.events] == ["first", "second"]
        assert node.state == "quarantined" and "node_lost (2 times)" in node.verdict.reason
        record.record(Event("n1", "check_passed", "check", at=900_000_000.0))
        assert record.release("n1").state == "healthy"  # the check counts: it came after, by seq


def test_a_quarantined_node_is_released_only_after_a_passing_check_or_with_force(tmp_path):
    with HealthRecord.open(tmp_path / "health.db", "c") as record:
        record.record(Event("n1", "xid_fatal", "watch", evidence="NVRM: Xid (PCI:0000:3b:00): 79"))
        assert record.quarantined() == {"n1": record.state("n1").verdict.reason}
        with pytest.raises(StateError) as error:
            record.release("n1")
        assert "no check has passed" in error.value.what and "--force" in error.value.fix
        assert record.release("n1", force=True).state == "healthy"
        assert record.quarantined() == {}
        with pytest.raises(UsageError):
            record.release("never-seen")


def test_a_swapped_gpu_starts_clean_and_a_gpu_without_serials_is_keyed_by_index(tmp_path):
    old, new = GpuId(0, uuid="GPU-old"), GpuId(0, uuid="GPU-new")
    with HealthRecord.open(tmp_path / "health.db", "c") as record:
        record.observe_gpus("n1", [old])
        record.record(Event("n1", "ecc_uncorrectable", "watch", gpu=old))
        assert record.state("n1").state == "quarantined"
        assert record.observe_gpus("n1", [new]) == ["uuid:GPU-old"]
        node = record.state("n1")
        assert node.state == "healthy" and [g.key for g in node.gpus] == ["uuid:GPU-new"]
        bare = GpuId(index=3)
        record.record(Event("n2", "thermal", "watch", gpu=bare))
        gpu = record.state("n2").gpus[0]
        assert gpu.keyed_by_index and gpu.key == "index:3" and gpu.verdict.state == "suspect"
        assert "keyed by index" in bare.describe()


def test_unknown_sources_and_kinds_are_refused_before_anything_is_written(tmp_path):
    with HealthRecord.open(tmp_path / "health.db", "c") as record:
        with pytest.raises(ValueError):
            record.record(Event("n1", "straggler", "straggler"), Event("n1", "gremlins", "run"))
        assert record.history("n1") == []
