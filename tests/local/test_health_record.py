"""The health record's file and its API: two writers lose nothing, a newer, corrupt or locked
file is refused with what/where/fix and left as it was, a backwards clock changes no order."""
from __future__ import annotations

import multiprocessing
from pathlib import Path
from clusterctl.health.events import Event
from clusterctl.health.record import HealthRecord
from clusterctl.health.store import HealthStore

PER_WRITER = 150


def _writer(root: str, name: str, count: int) -> None:
    with HealthRecord.open(Path(root) / "health.db", "c") as record:
        for number in range(count):
            record.record(Event(f"{name}-{number % 3}", "straggler", "straggler", evidence=f"{name} {number}"))


def test_two_processes_creating_and_writing_the_record_at_once_lose_no_event(tmp_path):
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_writer, args=(str(tmp_path), name, PER_WRITER)) for name in ("a", "b")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
    assert [w.exitcode for w in writers] == [0, 0]
    with HealthRecord.open(tmp_path / "health.db", "c") as record:
        events = record.store.events("c")
    assert len(events) == 2 * PER_WRITER
    assert len({e.seq for e in events}) == 2 * PER_WRITER
    for name in ("a", "b"):  # each writer's own order survives the interleaving
        mine = [int(e.evidence.split()[1]) for e in events if e.evidence.startswith(name)]
        assert mine == list(range(PER_WRITER))


def _crash_mid_write(root: str) -> None:
    import os

    store = HealthStore(Path(root) / "health.db")
    store.add("c", [(Event("n1", "straggler", "straggler", evidence="kept"), "soft")])
    with store._write("record events") as db:  # the process dies inside a transaction
        db.execute("INSERT INTO events (cluster, host, at, source, kind, severity) "
                   "VALUES ('c', 'n1', 1, 'run', 'node_lost', 'soft')")
        os._exit(9)


def test_a_process_that_dies_mid_write_leaves_what_was_recorded_and_nothing_half_written(tmp_path):
    process = multiprocessing.get_context("spawn").Process(target=_crash_mid_write, args=(str(tmp_path),))
    process.start()
    process.join(60)
    assert process.exitcode == 9
    with HealthRecord.open(tmp_path / "health.db", "c") as record:
        assert [e.evidence for e in record.history("n1")] == ["kept"]
        record.record(Event("n1", "straggler", "straggler", evidence="after"))
        assert len(record.history("n1")) == 2
