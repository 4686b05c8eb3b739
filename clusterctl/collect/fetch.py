"""collect-logs: what to fetch from a node, and the manifest.

Per node, one tar stream over the node's existing SSH connection (in the container via
`docker exec` when the files are not on a bind mount). Only files whose size or mtime
changed since the last collect are sent. Unpacking it (collect/unpack.py) refuses absolute
paths, `..`, links and special files, and masks every secret value before anything is written.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from clusterctl.models import MASK, Command, Inventory, looks_secret
from clusterctl.job.container import host_path
from clusterctl.collect.unpack import (  # noqa: F401  (callers use them as fetch.*)
    StreamMask, UnsafeArchive, _identity, extract, extract_stream, mask_values, safe_member_path)
from clusterctl.transport import batch_command, split_batch

MANIFEST = "manifest.json"

LISTED = "clusterctl-listing-done"  # the listing's last line: a listing without it did not run to the end

# $1: base dir, $2: a run id whose files to find anywhere but logs/ ("" for none), the rest:
# paths relative to the base. Prints "size<TAB>mtime<TAB>path" per file, and "link<TAB>path<TAB>
# target" per symbolic link: links are never followed (one to /etc would fetch the node's /etc).
_LIST = r'''
base=$1 pattern=$2; shift 2
cd "$base" 2>/dev/null || { echo clusterctl-listing-done; exit 0; }
for p in "$@"; do [ -e "$p" ] && find "$p" \( -type f ! -name env ! -name lease ! -name '*.pid' -printf '%s\t%T@\t%p\n' \) \
  -o \( -type l -printf 'link\t%p\t%l\n' \) 2>/dev/null; done
[ -n "$pattern" ] && find . -path ./logs -prune -o -path "*$pattern*" \( -type f -printf '%s\t%T@\t%p\n' -o -type l \
  -printf 'link\t%p\t%l\n' \) 2>/dev/null
echo clusterctl-listing-done
exit 0
'''

# $1: base dir, $2: gzip|none; file list on stdin (NUL-separated). Writes a tar stream.
_TAR = r'''
cd "$1" || exit 3
if [ "$2" = gzip ]; then exec tar --null -T - -czf - --ignore-failed-read 2>/dev/null
else exec tar --null -T - -cf - --ignore-failed-read 2>/dev/null; fi
'''

_KERNEL_EVENTS = ("(dmesg -T 2>/dev/null || journalctl -k --no-pager -n 5000 2>/dev/null)"
                  " | grep -iE 'oom|killed process|out of memory|nvrm|xid|segfault' | tail -n 200")


@dataclass(frozen=True)
class RemoteFile:
    path: str  # relative to the base dir
    size: int
    mtime: float


def list_command(base: str, paths: Iterable[str], in_container: Optional[str], run_id_pattern: str = "") -> Command:
    return _wrap(("sh", "-c", _LIST, "clusterctl-list", base, run_id_pattern, *paths), in_container, timeout=120)


def tar_command(base: str, files: list[str], in_container: Optional[str], compress: bool) -> Command:
    stdin = b"".join(f.encode() + b"\0" for f in files)
    command = _wrap(("sh", "-c", _TAR, "clusterctl-tar", base, "gzip" if compress else "none"), in_container,
                    timeout=3600, interactive=True)
    return Command(command.argv, timeout=command.timeout, stdin=stdin, privileged=command.privileged)


def probe_command(probe: str, in_container: Optional[str], remove: bool = False) -> Command:
    """Leave (or remove) the file that tells whether the outputs directory is shared by the nodes."""
    return _wrap(("rm", "-f", probe) if remove else ("touch", probe), in_container, timeout=20)


def in_place(argv: tuple, container: Optional[str]) -> Command:
    """argv run where the files are: in the container when they are not on a bind mount."""
    return _wrap(argv, container, timeout=20)


@dataclass(frozen=True)
class Survey:
    """What one round trip to a node found: its files (None: the listing failed) and which of the
    asked-about run directories exist there."""

    files: Optional[list]
    listing_error: str
    run_dirs: frozenset
    links: tuple = ()  # (path, target) of symbolic links: reported, not followed


# $1: base dir, the rest: directories relative to it. Prints those that exist.
_DIRS = 'cd "$1" 2>/dev/null || exit 0; shift; for d in "$@"; do [ -d "$d" ] && printf "%s\\n" "$d"; done; exit 0'


def survey_command(inventory: Inventory, base: str, paths: list[str], in_container: Optional[str],
                   run_id_pattern: str, run_dirs: list[str]) -> Command:
    """One round trip per node: the listing and which run directories it sees (the diagnostics
    are read by `diag_command` while the files stream)."""
    sections = [("clusterctl-listing", list_command(base, paths, in_container, run_id_pattern))]
    if run_dirs:
        sections.append(("clusterctl-run-dirs", _wrap(("sh", "-c", _DIRS, "clusterctl-dirs", base, *run_dirs),
                                                      in_container, timeout=20)))
    return batch_command(sections, timeout=120)


def parse_survey(stdout: str) -> Survey:
    sections = split_batch(stdout)
    listing = sections.pop("clusterctl-listing", "")
    lines = listing.rstrip("\n").splitlines()
    done = bool(lines) and lines[-1] == LISTED
    files = parse_listing("\n".join(lines[:-1])) if done else None
    dirs = frozenset(line for line in sections.pop("clusterctl-run-dirs", "").splitlines() if line)
    return Survey(files, "" if done else (listing.strip()[-300:] or "no output"), dirs, tuple(parse_links(listing)))


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


def parse_links(stdout: str) -> list[tuple[str, str]]:
    """(path, target) of the symbolic links a listing found: reported, never followed."""
    links = []
    for line in stdout.splitlines():
        parts = line.split("\t", 2)
        if len(parts) == 3 and parts[0] == "link":
            links.append((parts[1].removeprefix("./"), parts[2]))
    return links


def parse_listing(stdout: str) -> list[RemoteFile]:
    files = []
    for line in stdout.splitlines():
        parts = line.split("\t", 2)
        if len(parts) == 3:
            try:
                files.append(RemoteFile(parts[2].removeprefix("./"), int(parts[0]), float(parts[1])))
            except ValueError:
                continue
    return files


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


def changed_files(listing: list[RemoteFile], known: dict) -> list[RemoteFile]:
    """Files whose (size, mtime) differ from what the last collect fetched."""
    return [f for f in listing if known.get(f.path) != [f.size, f.mtime]]
