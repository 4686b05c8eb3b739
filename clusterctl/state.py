"""Local state under ./.clusterctl/: the active inventory, run records, locks, node facts `up` learned.

Directories are created 0700 and files 0600: run records hold command lines and
environments (secrets masked in the final text of every file written here, ground/masking.py; but
still nobody else's business).
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from clusterctl.errors import StateError
from clusterctl.executor.clock import attempts
from clusterctl.ground.files import private_dir
from clusterctl.ground.masking import OUTBOUND


class State:
    def __init__(self, root: Path):
        self.root = root

    @classmethod
    def here(cls, env: Optional[dict] = None) -> "State":
        env = env if env is not None else os.environ
        return cls(Path(env.get("CLUSTERCTL_STATE", ".clusterctl")).resolve())

    # ---- files
    def _ensure(self, path: Path) -> Path:
        return private_dir(path)

    def write_json(self, path: Path, data) -> None:
        self._ensure(path.parent)
        # a temporary name of this write's own: two clusterctl commands may write one file at once (a `run`'s
        # record and a `stop` of it), and a shared name let one rename the other's half-written text into place
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # mode 0600
        try:
            with os.fdopen(fd, "w") as handle:  # masked as the final text (ground/masking.py)
                handle.write(OUTBOUND.json_text(json.dumps(data, indent=2, sort_keys=True, default=str)))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @staticmethod
    def read_json(path: Path):
        with open(path) as handle:
            return json.load(handle)

    # ---- the active inventory
    @property
    def _active_file(self) -> Path:
        return self.root / "active.json"

    def set_active_inventory(self, path: Path, source: Optional[dict] = None) -> None:
        """Remember the active cluster: `source` is api/source.py InventorySource.to_json(), kept as
        itself (an `ansible:` source is no path to resolve)."""
        where = source.get("location") if source and source.get("kind") != "ansible" else None
        document = {"inventory": ("ansible:" + source["location"]) if source and source.get("kind") == "ansible"
                    else str(Path(where or path).resolve()), "since": time.time()}
        if source:
            document["inventory_source"] = source
        self.write_json(self._active_file, document)

    def active_source(self) -> Optional[dict]:
        """The remembered InventorySource.to_json(), or None (none remembered, or by an older clusterctl)."""
        try:
            source = self.read_json(self._active_file).get("inventory_source")
        except (OSError, ValueError, AttributeError):
            return None
        return source if isinstance(source, dict) else None

    def active_inventory(self) -> Path:
        try:
            return Path(self.read_json(self._active_file)["inventory"])
        except (OSError, KeyError, ValueError):
            raise StateError(
                "no active cluster: no inventory given and none remembered",
                where=str(self._active_file),
                fix="run `clusterctl up INVENTORY` first, or pass -i INVENTORY",
            ) from None

    # ---- the fleet's health record (clusterctl/health/store.py opens it)
    @property
    def health_db(self) -> Path:
        return self.root / "health.db"

    # ---- runs
    @property
    def runs_dir(self) -> Path:
        return self._ensure(self.root / "runs")

    def new_run_id(self) -> str:
        return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)

    def run_dir(self, run_id: str) -> Path:
        """A run's local directory; its record is ground/records.py RunStore's."""
        return self._ensure(self.runs_dir / run_id)

    def step_logs(self, flow: str) -> Path:
        """A fresh directory for the per-host step logs of one `up`/`down`/`play`."""
        return self._ensure(self.root / "steps" / f"{flow}-{self.new_run_id()}")

    def write_internal_error(self, command: str, text: str) -> Path:
        """Keep the traceback of an unexpected exception where the user can send it to us."""
        path = self._ensure(self.root / "errors") / f"{command}-{self.new_run_id()}.log"
        path.write_text(text)
        path.chmod(0o600)
        return path

    # ---- locks: one run / one up per cluster at a time
    def _lock_path(self, name: str) -> Path:
        return self._ensure(self.root / "locks") / f"{name}.lock"

    @contextmanager
    def lock(self, name: str, what: str, run_id: Optional[str] = None) -> Iterator[None]:
        """Hold `name` for this process, or refuse saying who holds it. `run_id`: the run this
        holder is (written into the lock file, so a refusal and `clusterctl stop` can name it)."""
        path = self._lock_path(name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if not _take(fd):
                holder = _holder(os.read(fd, 400))
                described = _describe(holder)
                fix = "wait for it to finish, or stop it (Ctrl-C in its terminal / `clusterctl down`)"
                if holder.get("run_id"):
                    fix = f"wait for it to end, or stop it: `clusterctl stop {holder['run_id']}`"
                raise StateError(f"{what} is already in progress on this cluster ({described})", where=str(path),
                                 fix=fix)
            os.ftruncate(fd, 0)
            holder = {"pid": os.getpid(), "since": time.strftime("%H:%M:%S")}
            if run_id:
                holder["run_id"] = run_id
            os.write(fd, json.dumps(holder).encode())
            yield
        finally:
            os.close(fd)

    def lock_holder(self, name: str) -> Optional[dict]:
        """Who holds lock `name` now ({"pid", "since", "run_id"?}), or None when nobody does.

        Tested by taking the lock shared for an instant: a `lock()` that starts in that instant
        tries again (see _take), so looking never refuses a run."""
        path = self.root / "locks" / f"{name}.lock"
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _holder(os.read(fd, 400))
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)


def _take(fd: int, tries: int = 4) -> bool:
    """flock(LOCK_EX) without waiting for a holder, but past a `lock_holder` look (an instant)."""
    for _attempt in attempts(tries, pause_s=0.02):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
    return False


def _holder(raw: bytes) -> dict:
    """A lock file's contents: JSON since runs are named there; older clusterctl wrote a text."""
    text = raw.decode(errors="replace").strip()
    try:
        holder = json.loads(text)
    except ValueError:
        holder = None
    if not isinstance(holder, dict):
        return {"text": text or "another clusterctl process"}
    return holder


def _describe(holder: dict) -> str:
    if "text" in holder:
        return holder["text"]
    parts = [f"run {holder['run_id']}"] if holder.get("run_id") else []
    parts.append(f"pid {holder.get('pid')} since {holder.get('since')}")
    return ", ".join(parts)
