"""collect-logs: a node's tar stream unpacked into the destination as it arrives.

Only regular files and directories are written; absolute paths, `..`, links, special files
and names this machine cannot hold are refused (and named), never followed. Every secret
value is masked before anything is written (`StreamMask`, also across the stream's pieces),
and each file's sha256 is computed on the way for the manifest.
"""
from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable, Optional

from clusterctl.models import MASK, written_forms
from clusterctl.collect.tarstream import Member, TarStream


def mask_values(data: bytes, secrets: set[str]) -> bytes:
    return _mask_forms(data, sorted({form.encode() for form in written_forms(secrets)}, key=len, reverse=True))


def _mask_forms(data: bytes, forms: list[bytes]) -> bytes:
    """`forms` longest first: a secret that contains another is masked whole."""
    for form in forms:
        data = data.replace(form, MASK.encode())
    return data


class UnsafeArchive(Exception):
    pass


# A node names the members it sends: refused ones are kept for the report, but only so many and each cut
# short (issue 47: a gzip stream of 647 KiB made 2.4 GB of refused names on the controller).
REFUSED_KEPT = 20
NAME_SHOWN = 200


def shown(name: str) -> str:
    """A member's name as a report shows it: at most NAME_SHOWN characters."""
    return name if len(name) <= NAME_SHOWN else name[:NAME_SHOWN] + f"... ({len(name)} characters)"


class Refusals(list):
    """The refused members' lines: the first REFUSED_KEPT, then one line that counts the rest."""

    def __init__(self) -> None:
        super().__init__()
        self.more = 0

    def add(self, line: str) -> None:
        if len(self) < REFUSED_KEPT:
            self.append(line)
            return
        self.more += 1
        tail = f"... and {self.more} more refused member(s)"
        if len(self) == REFUSED_KEPT:
            self.append(tail)
        else:
            self[-1] = tail


def safe_member_path(dest: Path, name: str) -> Path:
    """The destination of a tar member, or UnsafeArchive for absolute paths and escapes."""
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts:
        raise UnsafeArchive(f"refused {shown(name)!r}: absolute path or '..'")
    if "\0" in name:  # no file name holds one (a pax header can): resolve() would raise ValueError
        raise UnsafeArchive(f"refused {shown(name)!r}: a NUL in the name")
    target = (dest / pure).resolve()
    root = dest.resolve()
    if target != root and root not in target.parents:
        raise UnsafeArchive(f"refused {shown(name)!r}: escapes {dest}")
    return target


def extract(archive: Path, dest: Path, secrets: set[str], digests: Optional[dict] = None,
            compressed: bool = False) -> tuple[list[Path], list[str]]:
    """Unpack regular files and directories only; returns (written files, refused names).
    Raises tarstream.DamagedStream for what is not a (whole) tar archive, and for a gzip stream
    unless `compressed`."""
    with open(archive, "rb") as handle:
        return extract_stream(handle, dest, secrets, digests, compressed)


def extract_stream(stream: BinaryIO, dest: Path, secrets: set[str], digests: Optional[dict] = None,
                   compressed: bool = False) -> tuple[list[Path], list[str]]:
    """Like `extract`, from a tar stream as it arrives (the SSH channel itself: no archive on disk)."""
    tar = TarStream(stream.read, compressed)
    written, refused = [], Refusals()
    for member in tar:
        try:
            target = safe_member_path(dest, member.name)
        except UnsafeArchive as exc:
            refused.add(str(exc))
            continue
        if not member.isdir() and not member.isfile():
            refused.add(f"refused {shown(member.name)!r}: {'link' if member.islink() else 'special file'}")
            continue
        if member.isfile() and target == dest.resolve():  # "" or ".": it would be written beside dest
            refused.add(f"refused {shown(member.name)!r}: a file without a name")
            continue
        try:
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            digest = _write_member(tar, member, target, secrets)
        except (FileExistsError, IsADirectoryError, NotADirectoryError) as exc:
            # a file and a directory of the same name in one stream (tar writes no such thing; a
            # node that sends it gets the member refused, not the whole collect)
            refused.add(f"refused {shown(member.name)!r}: {exc.strerror} (a file and a directory of the same name)")
            continue
        except OSError as exc:
            if exc.errno != errno.ENAMETOOLONG:  # a name the node's file system holds and this one does not
                raise
            refused.add(f"refused {shown(member.name)!r}: {exc.strerror} here")
            continue
        if digests is not None:
            digests[_identity(target.stat())] = digest
        written.append(target)
    return written, refused


def _write_member(tar: TarStream, member: Member, target: Path, secrets: set[str]) -> str:
    """Write one member (secrets masked); returns the sha256 of what was written, computed on the way."""
    tmp = target.with_name(target.name + ".cc-part")
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as handle:
            def write(data) -> None:
                digest.update(data)  # hashlib and write release the GIL: hosts hash in parallel
                handle.write(data)

            if secrets:
                masking = StreamMask(secrets, write)
                for piece in tar.data():
                    masking.write(bytes(piece))
                masking.close()
            else:
                for piece in tar.data():
                    write(piece)
        try:
            os.utime(tmp, (member.mtime, member.mtime))
        except (OverflowError, OSError):  # an mtime this filesystem cannot hold: keep the time of writing
            pass
        os.replace(tmp, target)
    except BaseException:  # a full disk, an interrupt: no half-written file stays behind
        tmp.unlink(missing_ok=True)
        raise
    return digest.hexdigest()


class StreamMask:
    """`mask_values` over a stream of pieces, for files of any size: a secret split between two
    pieces is masked too. What could be the start of a secret is held back until the next piece."""

    def __init__(self, secrets: set[str], write: Callable[[bytes], None]):
        self.secrets = sorted({form.encode() for form in written_forms(secrets)}, key=len, reverse=True)
        self.keep = max(len(secret) for secret in self.secrets) - 1
        self.write_out = write
        self.pending = b""

    def write(self, data: bytes) -> None:
        data = self.pending + data if self.pending else data
        cut = self._safe_cut(data, max(0, len(data) - self.keep))
        self.pending = data[cut:]
        if cut:
            self.write_out(_mask_forms(data[:cut], self.secrets))

    def close(self) -> None:
        if self.pending:
            self.write_out(_mask_forms(self.pending, self.secrets))
        self.pending = b""

    def _safe_cut(self, data: bytes, cut: int) -> int:
        """`cut`, moved back to the start of any secret that would straddle it."""
        moved = True
        while moved and cut:
            moved = False
            for secret in self.secrets:
                found = data.find(secret, max(0, cut - len(secret) + 1), cut + len(secret) - 1)
                if found != -1 and found < cut < found + len(secret):
                    cut, moved = found, True
        return cut


def _identity(stat: os.stat_result) -> tuple:
    """A file as it was written: renames keep it, any rewrite changes it."""
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns
