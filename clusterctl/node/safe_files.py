"""The one way a clusterctl process touches a run's files on a node: no symlink followed, no special
file opened, no size unbounded, no directory used that is not ours (issue 47).

Why: a run's directories are a bind mount the job writes into (as root in its container), and on a
shared `job.outputs` (mode 1777) any local user may create names there first. A path string handed to
`open()` follows every link in it, so root on the host would read or write wherever the job points.
Here each component is opened from its parent's descriptor with O_NOFOLLOW; files are opened
non-blocking and refused unless regular (a FIFO or a device node swapped in between a check and the
open is caught by the `fstat` of what was opened, not by an earlier `lstat`); every read is bounded;
a write replaces its name atomically (a fresh exclusive temp file renamed over it: rename replaces a
link itself, never its target). Directories clusterctl creates are created exclusively with 0700;
one it reuses must be proven ours (a real directory, our uid, no access for group or others), else
`Refused` names the path and the fix.

The base a caller names (`job.outputs`, the checkout of state) is the operator's own configuration and
is opened as given; everything below it is held to the rules above.

Stdlib only: shipped to the nodes beside the programs that use it, imported by the controller too.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import PurePosixPath

RUNS_ON_NODES = True

READ_LIMIT = 16 * 1024 * 1024  # the most any one read returns unless the caller says otherwise
DEPTH_LIMIT = 64  # deeper trees are refused, not walked (a job can nest a directory 1000 levels deep)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Refused(Exception):
    """A path clusterctl will not touch: `path` is where, `why` what is wrong, `fix` what to do."""

    def __init__(self, path: str, why: str, fix: str = "") -> None:
        self.path, self.why, self.fix = path, why, fix
        super().__init__(f"{path}: {why}" + (f"; {fix}" if fix else ""))


@dataclass(frozen=True)
class Entry:
    """One name in a directory, as `lstat` sees it: kind is file, dir, link or other."""

    name: str
    kind: str
    size: int
    mtime: float


def _parts(rel: str | os.PathLike | tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(rel, tuple):
        parts = rel
    else:
        parts = PurePosixPath(os.fspath(rel)).parts
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\0" in part:
            raise Refused("/".join(parts), f"the path component {part!r} is not a plain name")
    return tuple(parts)


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


def prove_ours(fd: int, path: str) -> None:
    """Refused unless the open directory `fd` is a directory of our uid that nobody else may enter."""
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(path, "is not a directory")
    if st.st_uid != os.geteuid():
        raise Refused(path, f"is owned by uid {st.st_uid}, not by {os.geteuid()} (someone else made it first)",
                      "remove it (or choose another job.outputs) and run again")
    if st.st_mode & 0o077:
        raise Refused(path, f"has mode {stat.S_IMODE(st.st_mode):o}: others may change what is in it",
                      f"`chmod 700 {path}` if it is yours, else remove it and run again")


class Dir:
    """An open directory; every operation on a name in it is relative to its descriptor."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd, self.path = fd, path

    @classmethod
    def open(cls, base: str | os.PathLike, rel: str | os.PathLike | tuple[str, ...] = (), *,
             create: bool = False, private: bool = False) -> Dir:
        """`base` (trusted: the operator's own setting), then each component of `rel` without following
        links. `create` makes missing components (exclusively, 0700); `private` proves every component
        of `rel` ours (the ones created here are, by construction)."""
        base = os.fspath(base)
        if create:
            os.makedirs(base, mode=0o755, exist_ok=True)
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        opened = cls(fd, base)
        try:
            for part in _parts(rel):
                child = opened._child(part, create=create, private=private)
                opened.close()
                opened = child
        except BaseException:
            opened.close()
            raise
        return opened

    def sub(self, rel: str | os.PathLike | tuple[str, ...], *, create: bool = False,
            private: bool = False) -> Dir:
        """A directory below this one, opened the same way as `open`'s `rel`; this one stays open."""
        opened = Dir(os.dup(self.fd), self.path)
        try:
            for part in _parts(rel):
                child = opened._child(part, create=create, private=private)
                opened.close()
                opened = child
        except BaseException:
            opened.close()
            raise
        return opened

    def _child(self, name: str, *, create: bool, private: bool) -> Dir:
        path = f"{self.path}/{name}"
        made = False
        if create:
            try:
                os.mkdir(name, 0o700, dir_fd=self.fd)
                made = True
            except FileExistsError:
                pass
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=self.fd)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Refused(path, "is a symbolic link or not a directory", "remove it and run again") from None
            raise
        child = Dir(fd, path)
        try:
            if private or made:
                prove_ours(fd, path)
        except BaseException:
            child.close()
            raise
        return child

    def make_private(self, name: str) -> Dir:
        """A new directory `name` here, created exclusively with 0700: Refused when the name exists."""
        path = f"{self.path}/{_parts(name)[0]}"
        try:
            os.mkdir(name, 0o700, dir_fd=self.fd)
        except FileExistsError:
            raise Refused(path, "exists already (clusterctl makes this directory itself)",
                          "remove it and run again") from None
        return self._child(name, create=False, private=True)

    # files
    def _open_file(self, name: str, flags: int, mode: int = 0o600) -> int:
        path = f"{self.path}/{name}"
        if "/" in name or name in ("", ".", ".."):
            raise Refused(path, "is not a plain name")
        try:
            fd = os.open(name, flags | _FILE_FLAGS, mode, dir_fd=self.fd)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise Refused(path, "is a symbolic link: not followed") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise Refused(path, f"is not a regular file ({_kind(st.st_mode)})")
        return fd

    def open_fd(self, name: str, *, new: bool = False) -> int:
        """A descriptor of the regular file `name` to stream (the caller closes it): for reading, or with
        `new` a file created here exclusively (0600) for writing. Links and special files are refused."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL if new else os.O_RDONLY
        return self._open_file(name, flags)

    def read(self, name: str, limit: int = READ_LIMIT, *, tail: bool = False) -> bytes:
        """At most `limit` bytes of a regular file: its first, or with `tail` its last."""
        fd = self._open_file(name, os.O_RDONLY)
        try:
            if tail:
                size = os.fstat(fd).st_size
                os.lseek(fd, max(0, size - limit), os.SEEK_SET)
            chunks, left = [], limit
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def read_text(self, name: str, limit: int = READ_LIMIT, *, tail: bool = False) -> str:
        return self.read(name, limit, tail=tail).decode("utf-8", "replace")

    def write(self, name: str, data: bytes | str, mode: int = 0o600) -> None:
        """Replace `name` with `data` atomically: a fresh exclusive temp file renamed over the name."""
        if isinstance(data, str):
            data = data.encode()
        temp = f".{name}.{os.getpid()}.tmp"
        fd = self._open_file(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        try:
            os.rename(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self.remove(temp)
            raise

    def append(self, name: str, data: bytes | str, mode: int = 0o600) -> None:
        """Append to a regular file (created when missing): a link or special file there is refused."""
        if isinstance(data, str):
            data = data.encode()
        fd = self._open_file(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def touch(self, name: str, mode: int = 0o600) -> None:
        """Create `name` or set its times to now (a lease renewal): never through a link."""
        fd = self._open_file(name, os.O_WRONLY | os.O_CREAT, mode)
        try:
            os.utime(fd)
        finally:
            os.close(fd)

    def exists(self, name: str) -> bool:
        return self.entry(name) is not None

    def entry(self, name: str) -> Entry | None:
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        return Entry(name, _kind(st.st_mode), st.st_size, st.st_mtime)

    def entries(self, limit: int = 100_000) -> list[Entry]:
        """The names here, links and all, as `lstat` sees them (at most `limit`)."""
        found: list[Entry] = []
        with os.scandir(self.fd) as scan:
            for item in scan:
                if len(found) >= limit:
                    break
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                found.append(Entry(item.name, _kind(st.st_mode), st.st_size, st.st_mtime))
        return sorted(found, key=lambda e: e.name)

    def remove(self, name: str) -> None:
        """Unlink a name (a link is removed, never its target); missing is fine."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def remove_tree(self, name: str, depth: int = DEPTH_LIMIT) -> None:
        """Remove `name` and all below it, no link followed, at most `depth` levels (Refused deeper)."""
        found = self.entry(name)
        if found is None:
            return
        if found.kind != "dir":
            self.remove(name)
            return
        if depth <= 0:
            raise Refused(f"{self.path}/{name}", f"is nested deeper than {DEPTH_LIMIT} levels")
        with self.sub(name) as below:
            for item in below.entries(limit=1 << 62):
                below.remove_tree(item.name, depth - 1)
        os.rmdir(name, dir_fd=self.fd)

    def rename(self, old: str, new: str) -> None:
        """Rename within this directory (a link is moved as a link)."""
        os.rename(old, new, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Dir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_under(base: str | os.PathLike, rel: str | os.PathLike, limit: int = READ_LIMIT, *,
               tail: bool = False) -> bytes:
    """The bytes of `base/rel` read through the layer: the one-call form for a single file."""
    parts = _parts(rel)
    with Dir.open(base, parts[:-1]) as where:
        return where.read(parts[-1], limit, tail=tail)


def write_under(base: str | os.PathLike, rel: str | os.PathLike, data: bytes | str, *,
                create: bool = False) -> None:
    """Replace `base/rel` with `data` through the layer (`create` makes missing directories, 0700)."""
    parts = _parts(rel)
    with Dir.open(base, parts[:-1], create=create) as where:
        where.write(parts[-1], data)
