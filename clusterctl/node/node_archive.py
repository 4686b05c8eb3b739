"""collect-logs on the node: find what changed and archive it in one step, following no symlink.

Runs on the node (standard library only, Python 3.8+), as `python3 -c SOURCE BASE PATTERN
gzip|none ROOT...`, with what the controller already has on stdin (JSON: {path: [size, mtime]}).
Writes a tar stream of the regular files under each ROOT (relative to BASE) whose size or mtime
changed, and, with PATTERN, of every file outside `logs/` whose path holds it; on stderr one
JSON line per file sent, link not followed, file skipped or renamed, then DONE.

Why one program and not `find` then `tar`: between a listing and a second command that opens
the listed paths, a job can swap a directory for a symlink (the archive then follows it, as
root). Here every path component is opened relative to its parent's descriptor with O_NOFOLLOW,
and a file is archived from the descriptor it was checked on: nothing outside BASE is reachable
whatever the job does meanwhile. A file with characters that are not printable or bytes that are
not UTF-8 in its name is sent under a safe name (each such byte as %XX) and named in the report; a hard link
to a file of another owner is skipped (where the kernel lets users link files they do not own).
"""
import json
import os
import stat
import sys
import tarfile

DONE = "clusterctl-archive-done"
PRIVATE = ("env", "lease", "supervision.json", "mpi.key")  # the job's secrets, the run's keys (supervisor, mpirun gate)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def report(**entry):
    sys.stderr.write(json.dumps(entry) + "\n")


def safe_name(name):
    """`name` (str, surrogateescape) with each character that is not printable (control characters,
    line and paragraph separators), each byte that is not UTF-8, and each % as %XX of its bytes;
    `name` itself when it has none of the first two."""
    if all(char.isprintable() and not 0xDC80 <= ord(char) <= 0xDCFF for char in name):
        return name
    out = []
    for char in name:
        if 0xDC80 <= ord(char) <= 0xDCFF:
            out.append("%%%02X" % (ord(char) - 0xDC00))
        elif char == "%" or not char.isprintable():
            out.append("".join("%%%02X" % byte for byte in char.encode("utf-8")))
        else:
            out.append(char)
    return "".join(out)


class Archive:
    def __init__(self, out, known, compress):
        self.tar = tarfile.open(fileobj=out, mode="w|gz" if compress else "w|", format=tarfile.PAX_FORMAT)
        self.tar.copybufsize = 1 << 20
        self.known, self.sent = known, set()

    def walk(self, dir_fd, rel, owner, wanted, private, prune=None):
        """Every entry of the open directory `dir_fd` (at `rel`); `wanted(path)` says which files to send."""
        with os.scandir(dir_fd) as entries:
            names = sorted(entry.name for entry in entries)
        for name in names:
            path = rel + "/" + name if rel else name
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISLNK(st.st_mode):
                if wanted(path):
                    report(link=path, target=_readlink(name, dir_fd))
            elif stat.S_ISDIR(st.st_mode):
                if prune == path:
                    continue
                child = _open_dir(name, dir_fd)
                if child is None:
                    report(skipped=path, why="changed while it was read (a directory no more)")
                    continue
                try:
                    self.walk(child, path, owner, wanted, private)
                finally:
                    os.close(child)
            elif stat.S_ISREG(st.st_mode) and wanted(path) and not (private and _private(name)):
                self.file(dir_fd, name, path, owner)

    def file(self, dir_fd, name, path, owner):
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:  # a symlink now (ELOOP), gone, unreadable
            report(skipped=path, why="cannot open without following links: " + exc.strerror)
            return
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                report(skipped=path, why="not a regular file when opened")
                return
            if st.st_nlink > 1 and st.st_uid != owner:
                report(skipped=path, why="a hard link to a file of another owner (uid %d)" % st.st_uid)
                return
            name_sent = safe_name(path)
            if self.known.get(name_sent) == [st.st_size, st.st_mtime]:
                return
            if name_sent != path:
                if name_sent in self.sent:
                    report(skipped=path, why="its safe name %s is taken" % name_sent)
                    return
                report(renamed=path, to=name_sent)
            self.sent.add(name_sent)
            info = tarfile.TarInfo(name_sent)
            info.size, info.mtime, info.mode = st.st_size, st.st_mtime, 0o644
            self.tar.addfile(info, _Exactly(handle, st.st_size))
            report(sent=name_sent, size=st.st_size, mtime=st.st_mtime)


class _Exactly:
    """A file read as `size` bytes: one that shrank meanwhile is padded with zeros (the stream stays a
    tar stream); one that grew is cut at the size it had when it was opened."""

    def __init__(self, handle, size):
        self.handle, self.left = handle, size

    def read(self, count):
        count = min(count, self.left)
        data = self.handle.read(count) if count else b""
        if len(data) < count:
            data += bytes(count - len(data))
        self.left -= len(data)
        return data


def _private(name):
    return name in PRIVATE or name.endswith(".pid") or name.startswith(".supervision.json")


def _readlink(name, dir_fd):
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return "?"


def _open_dir(path, dir_fd):
    """`path` (relative, '/'-separated) opened one component at a time, none of them a symlink."""
    fd = os.dup(dir_fd)
    try:
        for part in path.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                return None
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except OSError:
        os.close(fd)
        return None
    return fd


def main(argv):
    base, pattern, compress, roots = argv[1], argv[2], argv[3] == "gzip", argv[4:]
    known = json.load(sys.stdin)
    archive = Archive(sys.stdout.buffer, known if isinstance(known, dict) else {}, compress)
    try:
        base_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)  # BASE is the inventory's: trusted
    except FileNotFoundError:  # no run ever wrote there: nothing to send
        roots, pattern, base_fd = [], "", None
    for root in roots:
        fd = _open_dir(root, base_fd)
        if fd is None:
            continue  # not there (yet), or reached through a link: nothing of it is sent
        try:
            rel = "/".join(part for part in root.split("/") if part not in ("", "."))
            archive.walk(fd, rel, os.fstat(fd).st_uid, lambda path: True, private=True)
        finally:
            os.close(fd)
    if pattern and base_fd is not None:
        def wanted(path):
            return pattern in path and path.split("/", 1)[0] != "logs"

        archive.walk(base_fd, "", os.fstat(base_fd).st_uid, wanted, private=False, prune="logs")
    archive.tar.close()
    sys.stdout.flush()
    sys.stderr.write(DONE + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
