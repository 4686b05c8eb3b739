"""`ssh -G` answers kept on disk between runs, valid while nothing ssh would read has changed.

An answer is reused only when the same `ssh -G` command line would read the same files: the
key holds the ssh binary, the user, this machine's name, and the path, size, mtime and inode
of every ssh_config file (Includes followed, globs' matches listed, missing files noted).
Configurations whose answer can change with nothing on disk changing are never kept: `Match
exec` (a command decides), `${VAR}` (the environment), `Canonicalize*` (DNS).

The file is $CLUSTERCTL_CACHE_DIR (or $XDG_CACHE_HOME/clusterctl, or ~/.cache/clusterctl)
/ssh-G.json, mode 0600, written once when the process ends.
"""
from __future__ import annotations

import atexit
import glob
import hashlib
import json
import os
import pwd
import shutil
import socket
import threading
from typing import Optional

from clusterctl.errors import ClusterctlError
from clusterctl.transport.ssh_config_file import split_args, split_keyword

_VERSION = 1
_KEEP_FINGERPRINTS = 4
_lock = threading.Lock()
_state: dict = {"loaded": False, "data": {}, "dirty": False, "fingerprints": {}}


class _Uncacheable(Exception):
    pass


def _path() -> str:
    base = os.environ.get("CLUSTERCTL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "clusterctl")
    return os.path.join(base, "ssh-G.json")


def _argv_key(argv: list[str]) -> str:
    return hashlib.sha256("\0".join(argv).encode()).hexdigest()


def fingerprint(ssh: str, files: list[tuple[str, bool]]) -> Optional[str]:
    """What `ssh -G` reads, as one hash; None when its answer may change without the files changing."""
    key = (ssh, tuple(files))
    with _lock:
        if key in _state["fingerprints"]:
            return _state["fingerprints"][key]
    try:
        entry = pwd.getpwuid(os.getuid())
        binary = os.stat(shutil.which(ssh) or ssh)
        parts = [str(_VERSION), ssh, str((binary.st_size, binary.st_mtime_ns, binary.st_ino)), entry.pw_name,
                 entry.pw_dir, socket.gethostname()]
        seen: set = set()
        for path, user_config in files:
            parts += _file_parts(path, user_config, entry.pw_dir, seen, 0)
        value: Optional[str] = hashlib.sha256("\n".join(parts).encode()).hexdigest()
    except (_Uncacheable, OSError, ClusterctlError):
        value = None
    with _lock:
        _state["fingerprints"][key] = value
    return value


def _file_parts(path: str, user_config: bool, home: str, seen: set, depth: int) -> list[str]:
    if depth > 16 or path in seen:
        return [f"again {path}"]
    seen.add(path)
    try:
        stat = os.stat(path)
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except FileNotFoundError:
        return [f"missing {path}"]
    parts = [f"file {path} {stat.st_size} {stat.st_mtime_ns} {stat.st_ino}"]
    for number, line in enumerate(text.splitlines(), 1):
        keyword, rest = split_keyword(line)
        if "${" in line or keyword.startswith("canonicalize"):
            raise _Uncacheable()
        if keyword == "match" and "exec" in (w.lower().lstrip("!") for w in split_args(rest, path)):
            raise _Uncacheable()
        if keyword == "include":
            for pattern in split_args(rest, f"{path}:{number}"):
                if pattern.startswith("~"):
                    pattern = home + pattern[1:]
                elif not pattern.startswith("/"):
                    pattern = os.path.join(home, ".ssh", pattern) if user_config else os.path.join("/etc/ssh", pattern)
                matches = sorted(glob.glob(pattern))
                parts.append(f"glob {pattern} -> {matches}")
                for match in matches:
                    parts += _file_parts(match, user_config, home, seen, depth + 1)
    return parts


def lookup(argv: list[str], files: list[tuple[str, bool]]) -> Optional[dict]:
    print_key = fingerprint(argv[0], files)
    if print_key is None:
        return None
    with _lock:
        _load()
        return _state["data"].get(print_key, {}).get(_argv_key(argv))


def store(argv: list[str], files: list[tuple[str, bool]], options: dict) -> None:
    print_key = fingerprint(argv[0], files)
    if print_key is None:
        return
    with _lock:
        _load()
        data = _state["data"]
        answers = data.pop(print_key, {})
        answers[_argv_key(argv)] = options
        data[print_key] = answers  # the most recent fingerprint last
        while len(data) > _KEEP_FINGERPRINTS:
            data.pop(next(iter(data)))
        if not _state["dirty"]:
            _state["dirty"] = True
            atexit.register(_write)


def _load() -> None:
    if _state["loaded"]:
        return
    _state["loaded"] = True
    try:
        with open(_path()) as handle:
            data = json.load(handle)
        if isinstance(data, dict) and data.get("version") == _VERSION and isinstance(data.get("answers"), dict):
            _state["data"] = data["answers"]
    except (OSError, ValueError):
        pass  # no cache yet, or a damaged one: asked again


def _write() -> None:
    with _lock:
        if not _state["dirty"]:
            return
        path = _path()
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            temporary = f"{path}.{os.getpid()}"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump({"version": _VERSION, "answers": _state["data"]}, handle)
            os.replace(temporary, path)
            _state["dirty"] = False
        except OSError:
            pass  # a cache that cannot be written costs the next run its `ssh -G`s, nothing else


def clear_memory() -> None:
    """Forget what this process read (tests)."""
    with _lock:
        _state.update(loaded=False, data={}, dirty=False, fingerprints={})
