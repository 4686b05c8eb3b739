"""The one way a clusterctl process touches a run's files on a node: no symlink followed, no special
file opened, no size unbounded, no directory used that is not ours (issue 47).

Why: a run's directories are a bind mount the job writes into (as root in its container), and on a shared
`job.outputs` (mode 1777) any local user may create names there first. A path string handed to `open()` follows
every link in it, so root on the host would read or write wherever the job points. Here each component is opened
from its parent's descriptor with O_NOFOLLOW; files are opened non-blocking and refused unless regular (a FIFO or a
device node swapped in between a check and the open is caught by the `fstat` of what was opened, not by an earlier
`lstat`); every read is bounded; a write replaces its name atomically (a fresh exclusive temp file renamed over it:
rename replaces a link itself, never its target). Directories clusterctl creates are created exclusively with 0700;
one it reuses must be proven ours (a real directory, our uid, no access for group or others), else `Refused` names
the path and the fix.

The base a caller names (`job.outputs`, the checkout of state) is the operator's own configuration and
is opened as given; everything below it is held to the rules above.

Stdlib only: shipped to the nodes beside the programs that use it, imported by the controller too.
"""
from __future__ import annotations

import errno
import os
import stat

RUNS_ON_NODES = True

READ_LIMIT = 16 * 1024 * 1024  # the most any one read returns unless the caller says otherwise
DEPTH_LIMIT = 64  # deeper trees are refused, not walked (a job can nest a directory 1000 levels deep)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_PATH_FLAGS = getattr(os, "O_PATH", 0) | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """A path clusterctl will not touch: `path` is where, `why` what is wrong, `fix` what to do."""

    def __init__(self, path: str, why: str, fix: str = "") -> None:
        self.path, self.why, self.fix = path, why, fix
        super().__init__(f"{path}: {why}" + (f"; {fix}" if fix else ""))


class Entry:
    """One name in a directory, as `lstat` sees it: kind is file, dir, link or other. (A plain class,
    not a dataclass: importing dataclasses would triple the start of every poll on the node.)"""

    __slots__ = ("name", "kind", "size", "mtime", "uid")

    def __init__(self, name: str, kind: str, size: int, mtime: float, uid: int = -1) -> None:
        self.name, self.kind, self.size, self.mtime, self.uid = name, kind, size, mtime, uid

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Entry) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __repr__(self) -> str:
        return f"Entry({self.name!r}, {self.kind!r}, {self.size}, {self.mtime})"


def _parts(rel: str | os.PathLike | tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(rel, tuple):
        parts = rel
    else:
        text = os.fspath(rel)
        if isinstance(text, bytes):
            text = text.decode()
        if text.startswith("/"):
            raise Refused(text, "is an absolute path, not a path below the base")
        parts = tuple(p for p in text.split("/") if p not in ("", "."))
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


def prove_ours(fd: int, path: str, uid: int | None = None) -> None:
    """Refused unless the open directory `fd` is a directory of our uid (or `uid`) that nobody else may enter."""
    st = os.fstat(fd)
    uid = os.geteuid() if uid is None else uid
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(path, "is not a directory")
    if st.st_uid != uid:
        raise Refused(path, f"is owned by uid {st.st_uid}, not by {uid} (someone else made it first)",
                      "remove it (or choose another job.outputs) and run again")
    if st.st_mode & 0o077:
        raise Refused(path, f"has mode {stat.S_IMODE(st.st_mode):o}: others may change what is in it",
                      f"`chmod 700 {path}` if it is yours, else remove it and run again")


def prove_shared(fd: int, path: str) -> None:
    """Refused unless the open directory `fd` (a run's shared directory: `logs`, `logs/<run id>`) is
    one where nobody but us and root can replace the names we put in it: owned by us or by root, and
    not writable by group or others unless sticky (1777, as /tmp: then only an entry's owner moves it)."""
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(path, "is not a directory")
    if st.st_uid not in (os.geteuid(), 0):
        raise Refused(path, f"is owned by uid {st.st_uid}, neither {os.geteuid()} nor root: its owner may replace "
                      "what clusterctl puts in it", "remove it (or have root make it, mode 1777, once) and run again")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise Refused(path, f"has mode {stat.S_IMODE(st.st_mode):o}: others may replace what is in it",
                      f"`chmod +t {path}` (or `chmod go-w`) and run again")


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
        return cls(fd, base)._descend(rel, create=create, private=private)

    def sub(self, rel: str | os.PathLike | tuple[str, ...], *, create: bool = False,
            private: bool = False) -> Dir:
        """A directory below this one, opened the same way as `open`'s `rel`; this one stays open."""
        return Dir(os.dup(self.fd), self.path)._descend(rel, create=create, private=private)

    def _descend(self, rel: str | os.PathLike | tuple[str, ...], *, create: bool, private: bool) -> Dir:
        """The directory `rel` below this one; this Dir is handed over (closed, or returned when `rel` is empty)."""
        opened = self
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

    def shared(self, name: str, mode: int) -> Dir:
        """The run's shared directory `name` here (made with `mode` when missing, whoever wins a race),
        proven safe to put names in (`prove_shared`)."""
        path = f"{self.path}/{_parts(name)[0]}"
        try:
            os.mkdir(name, 0o700, dir_fd=self.fd)
            _chmod_at(self.fd, name, mode)
        except FileExistsError:
            pass
        child = self._child(name, create=False, private=False)
        try:
            prove_shared(child.fd, path)
        except BaseException:
            child.close()
            raise
        return child

    def mode(self) -> int:
        return stat.S_IMODE(os.fstat(self.fd).st_mode)

    # files
    def reader(self, name: str) -> int:
        """A descriptor open for reading on the regular file `name` (no link followed); the caller closes it."""
        return self._open_file(name, os.O_RDONLY)

    def _open_file(self, name: str, flags: int, mode: int = 0o600) -> int:
        """`name` opened with `flags`, never through a link and never a FIFO or a device node: an existing
        name is first opened O_PATH (which opens nothing: no FIFO waits, no device acts on an open), its
        kind checked on that descriptor, and only a regular file reopened through /proc/self/fd (the same
        inode, whatever the job renames meanwhile); a new name is created exclusively."""
        path = f"{self.path}/{name}"
        if "/" in name or name in ("", ".", ".."):
            raise Refused(path, "is not a plain name")
        for _ in range(8):
            if flags & os.O_EXCL:
                return self._created(name, flags, mode)
            try:
                handle = os.open(name, _PATH_FLAGS, dir_fd=self.fd)
            except FileNotFoundError:
                if not flags & os.O_CREAT:
                    raise
                try:
                    return self._created(name, flags | os.O_EXCL, mode)
                except FileExistsError:
                    continue  # made meanwhile: look at what it is
            try:
                kind = _kind(os.fstat(handle).st_mode)
                if kind == "link":
                    raise Refused(path, "is a symbolic link: not followed")
                if kind != "file":
                    raise Refused(path, f"is not a regular file ({kind})")
                fd = _reopen(handle, flags & ~(os.O_CREAT | os.O_EXCL), name, self.fd)
            finally:
                os.close(handle)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise Refused(path, "is not a regular file")
            return fd
        raise Refused(path, "keeps changing while it is opened")

    def _created(self, name: str, flags: int, mode: int) -> int:
        try:
            return os.open(name, flags | _FILE_FLAGS, mode, dir_fd=self.fd)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise Refused(f"{self.path}/{name}", "is a symbolic link: not followed") from None
            raise

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
        # a random temp name, not the pid: containers on nodes sharing one filesystem share pids
        temp = f".{name}.{os.urandom(6).hex()}.tmp"
        fd = self._open_file(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        os.fchmod(fd, mode)  # the mode asked for, whatever the umask
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

    def is_file(self, name: str) -> bool:
        """`name` is a regular file here (a mark such as `stopped`: a link or FIFO the job put there is none)."""
        found = self.entry(name)
        return found is not None and found.kind == "file"

    def entry(self, name: str) -> Entry | None:
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        return Entry(name, _kind(st.st_mode), st.st_size, st.st_mtime, st.st_uid)

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
                found.append(Entry(item.name, _kind(st.st_mode), st.st_size, st.st_mtime, st.st_uid))
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

    def poke_fifo(self, name: str) -> bool:
        """One byte into the FIFO `name`, never blocking, never through a link and never anything but a FIFO
        (looked at through O_PATH first, then the same inode reopened): False where it is something else or
        nobody reads it (ENXIO). A full FIFO (EAGAIN) already holds the same request."""
        try:
            handle = os.open(name, _PATH_FLAGS, dir_fd=self.fd)
        except OSError:
            return False
        try:
            if not stat.S_ISFIFO(os.fstat(handle).st_mode):
                return False
            fd = os.open(f"/proc/self/fd/{handle}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return False
        finally:
            os.close(handle)
        try:
            os.write(fd, b"1")
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
        return True

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


def _reopen(handle: int, flags: int, name: str, dir_fd: int) -> int:
    """The file behind the O_PATH descriptor `handle`, opened with `flags`: through /proc/self/fd (the same
    inode); where /proc is not mounted, `name` again with O_NOFOLLOW|O_NONBLOCK (the caller's fstat then
    refuses a FIFO or a device swapped in meanwhile)."""
    try:
        return os.open(f"/proc/self/fd/{handle}", flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        if os.path.isdir("/proc/self/fd"):
            raise
        return os.open(name, flags | _FILE_FLAGS, dir_fd=dir_fd)


def _chmod_at(dir_fd: int, name: str, mode: int) -> None:
    """chmod of a directory just made: through a descriptor of it (Linux has no lchmod)."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


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


def first_word(where: Dir, name: str, width: int = 12, limit: int = 64) -> str | None:
    """The first word of small file `name` (<= `width` ASCII chars; "?": none; None: no file): agent.exit's code."""
    try:
        words = where.read(name, limit).decode("ascii", "replace").split()
    except FileNotFoundError:
        return None
    return words[0][:width] if words else "?"
