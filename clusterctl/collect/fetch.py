"""collect-logs: what to fetch from a node, and the manifest.

Per node, one tar stream over the node's existing SSH connection (in the container via
`docker exec` when the files are not on a bind mount), written by node/node_archive.py,
which finds the files and archives them in one step without following any symlink. Only files
whose size or mtime changed since the last collect are sent. Unpacking it (collect/unpack.py) refuses absolute
paths, `..`, links and special files, and masks every secret value before anything is written.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from clusterctl.models import MASK, Command, Inventory, looks_secret
from clusterctl.plan.container import host_path
from clusterctl.collect.unpack import (  # noqa: F401  (callers use them as fetch.*)
    StreamMask, UnsafeArchive, _identity, extract, extract_stream, mask_values, safe_member_path)
from clusterctl.node import inline_argv
from clusterctl.transport import batch_command, split_batch

MANIFEST = "manifest.json"


_KERNEL_EVENTS = ("(dmesg -T 2>/dev/null || journalctl -k --no-pager -n 5000 2>/dev/null)"
                  " | grep -iE 'oom|killed process|out of memory|nvrm|xid|segfault' | tail -n 200")


@dataclass(frozen=True)
class SentFile:
    path: str  # relative to the base dir, as the node sent it (a safe name where the node renamed it)
    size: int
    mtime: float


@dataclass(frozen=True)
class ArchiveReport:
    """What the node said of its archive (node/node_archive.py): the files sent, the links not
    followed, the files skipped (why) and renamed (from what); `done`: it ran to its end."""

    sent: tuple = ()
    links: tuple = ()  # (path, target)
    skipped: tuple = ()  # (path, why)
    renamed: tuple = ()  # (original name, safe name)
    more: tuple = ()  # (kind, count): links, skips, renames past the node's NOTED_MAX, counted not listed
    cut: str = ""  # why the node stopped archiving before the end (its report's bound): the next collect goes on
    done: bool = False
    errors: str = ""  # what else it printed (a traceback, "python3: not found")


REPORT_CAP = 64 << 20  # what is read of the node's report on stderr: it bounds itself under this (node_archive.REPORT_MAX)


def archive_command(base: str, roots: list[str], in_container: Optional[str], python: str, run_id_pattern: str,
                    known: dict, compress: bool) -> Command:
    """One node-side step: the files under `roots` (and, with a pattern, any outside logs/ whose path
    holds it) that are not in `known` as they are now, as a tar stream; the report on stderr. On the
    host, the host's python3; in the container, the job's python."""
    program = inline_argv("python3" if in_container is None else python, ("safe_files",), "node_archive",  # no-follow
                          base, run_id_pattern, "gzip" if compress else "none", *roots, argv0=True)
    command = _wrap(program, in_container, timeout=3600, interactive=True)
    return Command(command.argv, timeout=command.timeout, stdin=json.dumps(known).encode(),
                   privileged=command.privileged, max_output=REPORT_CAP)


def parse_report(stderr: str) -> ArchiveReport:
    from clusterctl.node.node_archive import DONE

    found: dict = {"sent": [], "links": [], "skipped": [], "renamed": [], "more": []}
    other, done, cut = [], False, ""
    for line in stderr.splitlines():
        if line == DONE:
            done = True
            continue
        entry = _json_object(line)
        if entry is None:
            other.append(line)
        elif _has(entry, sent=str, size=int, mtime=(int, float)) and entry["size"] >= 0:
            found["sent"].append(SentFile(entry["sent"], entry["size"], float(entry["mtime"])))
        elif _has(entry, link=str, target=str):
            found["links"].append((entry["link"], entry["target"]))
        elif _has(entry, skipped=str, why=str):
            found["skipped"].append((entry["skipped"], entry["why"]))
        elif _has(entry, renamed=str, to=str):
            found["renamed"].append((entry["renamed"], entry["to"]))
        elif isinstance(entry.get("more"), dict):
            found["more"] += [(str(kind)[:20], count) for kind, count in entry["more"].items()
                              if isinstance(count, int) and not isinstance(count, bool) and count > 0]
        elif _has(entry, cut=int, why=str):
            cut = entry["why"][:300]
        else:
            other.append(line)
    return ArchiveReport(**{k: tuple(v) for k, v in found.items()}, cut=cut, done=done, errors="\n".join(other)[-300:])


def archive_summary(report: ArchiveReport) -> str:
    """The node's line of the collect-logs table: what was sent, and every file not sent as it is."""
    parts = [f"{len(report.sent)} new or changed file(s)"]
    more = dict(report.more)
    for kind, what, pairs, arrow in (("link", "symlink(s) not followed", report.links, " -> "),
                                     ("renamed", "file(s) renamed to a safe name", report.renamed, " -> "),
                                     ("skipped", "file(s) skipped", report.skipped, ": ")):
        if pairs:  # renamed and skipped names as repr: they may hold a newline or bytes that are not UTF-8
            shown = (f"{a}{arrow}{b}" if pairs is report.links else f"{a!r}{arrow}{b}" for a, b in pairs[:5])
            parts.append(f"{len(pairs) + more.get(kind, 0)} {what}: " + ", ".join(shown)
                         + (f" ({more[kind]} more not listed)" if more.get(kind) else ""))
    return "; ".join(parts)


def archive_details(report: ArchiveReport) -> dict:
    return {"links_not_followed": [f"{path} -> {target}" for path, target in report.links],
            "renamed": [{"name": name, "as": safe} for name, safe in report.renamed],
            "skipped": [{"name": name, "why": why} for name, why in report.skipped],
            **({"not_listed": dict(report.more)} if report.more else {})}


def _json_object(line: str) -> Optional[dict]:
    if not line.startswith("{"):
        return None
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return entry if isinstance(entry, dict) else None


def _has(entry: dict, **types) -> bool:
    return all(isinstance(entry.get(k), t) and not isinstance(entry.get(k), bool) for k, t in types.items())


def probe_command(probe: str, in_container: Optional[str], remove: bool = False) -> Command:
    """Leave (or remove) the file that tells whether the outputs directory is shared by the nodes."""
    return _wrap(("rm", "-f", probe) if remove else ("touch", probe), in_container, timeout=20)


def in_place(argv: tuple, container: Optional[str]) -> Command:
    """argv run where the files are: in the container when they are not on a bind mount."""
    return _wrap(argv, container, timeout=20)


@dataclass(frozen=True)
class Survey:
    """What one round trip to a node found: which of the asked-about run directories exist there."""

    run_dirs: frozenset


# $1: base dir, the rest: directories relative to it. Prints those that exist.
_DIRS = 'cd "$1" 2>/dev/null || exit 0; shift; for d in "$@"; do [ -d "$d" ] && printf "%s\\n" "$d"; done; exit 0'
_SURVEYED = "clusterctl-run-dirs"


def survey_command(base: str, in_container: Optional[str], run_dirs: list[str]) -> Command:
    """One round trip per node before any transfer: which run directories it sees (the files are
    found by the archive itself, the diagnostics read by `diag_command` while the files stream)."""
    return batch_command([(_SURVEYED, _wrap(("sh", "-c", _DIRS, "clusterctl-dirs", base, *run_dirs),
                                            in_container, timeout=20))], timeout=120)


def parse_survey(stdout: str) -> Survey:
    return Survey(frozenset(line for line in split_batch(stdout).get(_SURVEYED, "").splitlines() if line))


DIAG_TIMEOUT_S = 120


def diag_command(inventory: Inventory) -> Command:
    """The node's state at collection time, one section (file name) per tool, in one round trip."""
    return batch_command(diag_sections(inventory), timeout=DIAG_TIMEOUT_S)


# `df -B1 /dev/shm` of a container, read from the host through /proc/PID/root: a `docker exec`
# costs the node ~110 ms of CPU (runc), this ~20 ms. Printed as df prints it (df itself refuses
# a path outside the host's mount table). Where /proc/PID/root is not readable (not root), the
# container's own df.
_CONTAINER_SHM = r'''
pid=$(docker inspect -f '{{.State.Pid}}' "$1" 2>/dev/null)
if [ -n "$pid" ] && [ "$pid" != 0 ] && set -- "$1" $(stat -f -c '%S %b %f %a' "/proc/$pid/root/dev/shm" 2>/dev/null) \
    && [ $# -eq 5 ] && [ "$3" -gt 0 ]; then
  used=$(( $2 * ($3 - $4) )) size=$(( $2 * $3 ))
  echo "Filesystem     1B-blocks Used Available Use% Mounted on"
  echo "shm $size $used $(( $2 * $5 )) $(( (used * 100 + size - 1) / size ))% /dev/shm"
  exit 0
fi
exec docker exec "$1" df -B1 /dev/shm
'''


def diag_sections(inventory: Inventory) -> list:
    from clusterctl.preflight.facts import IBSTAT, NVIDIA_SMI_QUERY

    shm = (("sh", "-c", _CONTAINER_SHM, "clusterctl-shm", inventory.container.name) if inventory.uses_container
           else ("df", "-B1", "/dev/shm"))
    sections = [
        ("nvidia-smi-q.txt", NVIDIA_SMI_QUERY), ("ibstat.txt", IBSTAT),
        ("ip-addr.txt", Command(("ip", "addr"))), ("ip-route.txt", Command(("ip", "route"))),
        ("dmesg.txt", Command(("sh", "-c", _KERNEL_EVENTS), privileged=True)),  # kernel.dmesg_restrict
        ("df-shm.txt", Command(shm)),
    ]
    if inventory.uses_container:  # env.txt comes from the inspect output (`with_container_env`)
        sections.append(("docker-inspect.json", Command(("docker", "inspect", inventory.container.name))))
    return sections


def with_container_env(sections: dict) -> dict:
    """The diagnostics plus env.txt: the environment every process in the container starts with
    (Config.Env of `docker inspect`), read without a `docker exec` (~90 ms of the node's CPU)."""
    try:
        inspected = json.loads(sections.get("docker-inspect.json") or "[]")
        env = (inspected[0]["Config"]["Env"] or []) if inspected else None
    except (ValueError, LookupError, TypeError, RecursionError):  # RecursionError: JSON nested thousands deep
        env = None
    if not isinstance(env, list):  # not what `docker inspect` prints: no env.txt rather than a crash
        return sections
    return {**sections, "env.txt": "".join(f"{line}\n" for line in env)}


def _wrap(argv: tuple, container: Optional[str], timeout: float, interactive: bool = False) -> Command:
    """In the container, or on the host through the bind mount, where the files root wrote in the
    container (and torchrun's 0700 log dirs) need root: sudo for a non-root SSH user."""
    if container:
        argv = ("docker", "exec", *(("-i",) if interactive else ()), container, *argv)
    return Command(argv, timeout=timeout, privileged=container is None)


def where_files_are(inventory: Inventory, container_path: str) -> tuple[str, Optional[str]]:
    """(path to read, container to docker-exec into or None)."""
    on_host = host_path(inventory, container_path)
    if on_host is not None:
        return on_host, None
    return container_path, inventory.container.name


# --------------------------------------------------------------------------- secrets


def mask_env_listing(text: str) -> str:
    lines = []
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        lines.append(f"{name}={MASK}" if sep and looks_secret(name) else line)
    return "\n".join(lines) + "\n"


def keep_freed_buffers() -> None:
    """Bulk transfers allocate and free buffers of ~100 KiB to MiBs per read, in several threads.
    glibc hands such memory back to the kernel on free (mmap threshold, heap trimming), so the
    received bytes page-fault fresh pages again and again: about a third of the client's CPU on a
    600 MB collect. Raise both thresholds for this process (a no-op where malloc is not glibc's)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest allowed value
    mallopt(m_trim_threshold, 256 << 20)


# --------------------------------------------------------------------------- manifest


def known_sha256(path: Path, stat: os.stat_result, digests: Optional[dict]) -> str:
    """The sha256 computed while the file was unpacked, else read from disk."""
    digest = digests.get(_identity(stat)) if digests else None
    return digest or sha256_file(path)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(dest: Path) -> dict:
    try:
        return json.loads((dest / MANIFEST).read_text())
    except (OSError, ValueError):
        return {"files": {}, "remote": {}}


def write_manifest(dest: Path, manifest: dict) -> None:
    write_file(dest / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True).encode())


def write_file(path: Path, data: bytes) -> None:
    """Replace `path` with `data` whole or not at all: on a full disk the earlier file stays intact."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


LOCAL_WRITE_ERRORS = {28: "no space left", 122: "disk quota exceeded", 30: "read-only file system",
                      13: "permission denied", 27: "file too large", 5: "I/O error"}  # errno -> what it means


def local_write_failure(dest: Path, exc: OSError) -> Optional[str]:
    """What to tell about a failed write under dest (None when the error is not about the local disk)."""
    if exc.errno not in LOCAL_WRITE_ERRORS:
        return None
    return (f"writing under {dest} failed: {exc.strerror or LOCAL_WRITE_ERRORS[exc.errno]}. Files collected "
            "earlier are intact. fix: free space there, or collect elsewhere with --dest DIR")
