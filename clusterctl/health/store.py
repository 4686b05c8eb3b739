"""The health record's file: SQLite under the state root (`.clusterctl/health.db`).

- Versioned by `PRAGMA user_version`: a file written by a newer clusterctl is refused, never
  altered (the check runs before anything is written, WAL mode included).
- WAL mode and a busy timeout: two clusterctl processes write at once and both events land;
  every write is one `BEGIN IMMEDIATE` transaction, so a crash mid-write loses only that write.
- A file that is not a database, is damaged, or stays locked past the timeout is a StateError
  (what, where, fix); the file is never deleted or recreated over: what it holds stays.
- `seq` (INTEGER PRIMARY KEY AUTOINCREMENT) orders events; wall time is kept for people, and a
  clock that jumps backwards cannot reorder what happened.
"""
from __future__ import annotations

import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Sequence

from clusterctl.errors import StateError
from clusterctl.health.events import Event, GpuId, GpuRow, StoredEvent

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 30.0
SQLITE_HEADER = b"SQLite format 3\x00"

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, cluster TEXT NOT NULL, host TEXT NOT NULL, gpu TEXT,
        at REAL NOT NULL, source TEXT NOT NULL, kind TEXT NOT NULL, severity TEXT NOT NULL,
        cause TEXT NOT NULL DEFAULT '', evidence TEXT NOT NULL DEFAULT '', run_id TEXT)""",
    "CREATE INDEX IF NOT EXISTS events_by_host ON events (cluster, host, seq)",
    """CREATE TABLE IF NOT EXISTS gpus (
        cluster TEXT NOT NULL, host TEXT NOT NULL, key TEXT NOT NULL, gpu_index INTEGER, uuid TEXT,
        serial TEXT, first_seen REAL NOT NULL, last_seen REAL NOT NULL, gone_at REAL,
        PRIMARY KEY (cluster, host, key))""",
)


class HealthStore:
    """One open health.db. Reads and writes are short; close() when done (or use `with`)."""

    def __init__(self, path: Path, busy_timeout_s: float = BUSY_TIMEOUT_S):
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self._db = self._open()

    # ---- opening
    def _open(self) -> sqlite3.Connection:
        _refuse_foreign_file(self.path)
        fresh = not self.path.exists()
        if fresh:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))  # 0600 before sqlite makes it
        db = sqlite3.connect(str(self.path), timeout=self.busy_timeout_s, isolation_level=None)
        try:
            with self._guard("open"):
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise StateError(
                        f"the health record was written by a newer clusterctl (schema {version}, this one knows "
                        f"up to {SCHEMA_VERSION}); it is left as it is", where=str(self.path),
                        fix="upgrade clusterctl (pip install -U clusterctl), or point CLUSTERCTL_STATE elsewhere")
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                if version < SCHEMA_VERSION:
                    self._create(db)
        except BaseException:
            db.close()
            raise
        return db

    def _create(self, db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "HealthStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- errors: sqlite's, said as what/where/fix
    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                raise StateError(
                    f"the health record is locked by another process (waited {self.busy_timeout_s:g}s to {doing})",
                    where=str(self.path), fix=f"let the other clusterctl finish, or find it: fuser {self.path}"
                ) from None
            raise _damaged(self.path, text) from None
        except sqlite3.DatabaseError as exc:
            raise _damaged(self.path, str(exc)) from None

    @contextmanager
    def _write(self, doing: str) -> Iterator[sqlite3.Connection]:
        with self._guard(doing):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # ---- events
    def add(self, cluster: str, events: Sequence[tuple[Event, str]], once: bool = False) -> list[int]:
        """(event, severity) pairs, all in one transaction; their seqs. `once`: an event the record
        already has (same host, kind, GPU, evidence and run) is not added again (a detached run's
        health sample is read back by every command that reads the run)."""
        seqs = []
        with self._write("record events") as db:
            for event, severity in events:
                if once and _recorded(db, cluster, event):
                    continue
                cursor = db.execute(
                    "INSERT INTO events (cluster, host, gpu, at, source, kind, severity, cause, evidence, run_id)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (cluster, event.host, event.gpu.key if event.gpu else None,
                     event.at if event.at is not None else time.time(), event.source, event.kind, severity,
                     event.cause, event.evidence, event.run_id))
                seqs.append(cursor.lastrowid)
                if event.gpu is not None:
                    _touch_gpu(db, cluster, event.host, event.gpu, event.at or time.time())
        return seqs

    def events(self, cluster: str, host: Optional[str] = None) -> list[StoredEvent]:
        query = "SELECT seq, cluster, host, gpu, at, source, kind, severity, cause, evidence, run_id FROM events" \
                " WHERE cluster = ?" + (" AND host = ?" if host is not None else "") + " ORDER BY seq"
        with self._guard("read events"):
            rows = self._db.execute(query, (cluster,) + ((host,) if host is not None else ())).fetchall()
        return [StoredEvent(*row) for row in rows]

    def hosts(self, cluster: str) -> list[str]:
        with self._guard("read hosts"):
            rows = self._db.execute("SELECT DISTINCT host FROM events WHERE cluster = ? UNION "
                                    "SELECT DISTINCT host FROM gpus WHERE cluster = ?", (cluster, cluster)).fetchall()
        return sorted(row[0] for row in rows)

    # ---- GPUs
    def observe_gpus(self, cluster: str, host: str, gpus: Sequence[GpuId], at: Optional[float] = None,
                     complete: bool = True) -> list[str]:
        """The GPUs a node reports now: new ones are added, ones no longer reported are marked gone
        (a swapped board); returns the keys that went. Not `complete` (a container's view, which may
        hide some): added, none marked gone."""
        at = time.time() if at is None else at
        keys = {gpu.key for gpu in gpus}
        with self._write("record the GPUs seen") as db:
            for gpu in gpus:
                _touch_gpu(db, cluster, host, gpu, at)
            present = db.execute("SELECT key FROM gpus WHERE cluster = ? AND host = ? AND gone_at IS NULL",
                                 (cluster, host)).fetchall()
            gone = sorted(row[0] for row in present if row[0] not in keys) if complete else []
            db.executemany("UPDATE gpus SET gone_at = ? WHERE cluster = ? AND host = ? AND key = ?",
                           [(at, cluster, host, key) for key in gone])
        return gone

    def gpus(self, cluster: str, host: Optional[str] = None) -> list[GpuRow]:
        query = "SELECT host, key, gpu_index, uuid, serial, first_seen, last_seen, gone_at FROM gpus WHERE cluster = ?" \
                + (" AND host = ?" if host is not None else "") + " ORDER BY host, gpu_index, key"
        with self._guard("read GPUs"):
            rows = self._db.execute(query, (cluster,) + ((host,) if host is not None else ())).fetchall()
        return [GpuRow(*row) for row in rows]


def _recorded(db: sqlite3.Connection, cluster: str, event: Event) -> bool:
    return db.execute("SELECT 1 FROM events WHERE cluster = ? AND host = ? AND kind = ? AND gpu IS ? AND evidence = ?"
                      " AND run_id IS ? LIMIT 1", (cluster, event.host, event.kind, event.gpu.key if event.gpu else None,
                                                   event.evidence, event.run_id)).fetchone() is not None


def _touch_gpu(db: sqlite3.Connection, cluster: str, host: str, gpu: GpuId, at: float) -> None:
    db.execute("INSERT INTO gpus (cluster, host, key, gpu_index, uuid, serial, first_seen, last_seen)"
               " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (cluster, host, key) DO UPDATE SET"
               " last_seen = max(last_seen, excluded.last_seen), gone_at = NULL,"
               " gpu_index = coalesce(excluded.gpu_index, gpu_index)",
               (cluster, host, gpu.key, gpu.index, gpu.uuid, gpu.serial, at, at))


def _refuse_foreign_file(path: Path) -> None:
    """Something at the path that is not an SQLite file: refused before sqlite touches it."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StateError(f"cannot read the health record: {exc.strerror}", where=str(path),
                         fix="check the file's owner and permissions") from None
    if header and not SQLITE_HEADER.startswith(header):  # a prefix: another process is writing page one now
        raise _damaged(path, "not an SQLite database")


def _damaged(path: Path, detail: str) -> StateError:
    return StateError(f"the health record is damaged or not a clusterctl health database ({detail}); "
                      "it was left untouched", where=str(path),
                      fix=f"move it aside (mv {path} {path}.bad) to start a new record, or restore it from a "
                          f"backup; `sqlite3 {path} .recover` may save its events")
