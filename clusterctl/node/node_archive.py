"""collect-logs on the node: find what changed and archive it in one step, following no symlink.

Runs on the node (standard library only, Python 3.8+), as `python3 -I -S -c SOURCE BASE PATTERN
gzip|none ROOT...`, with what the controller already has on stdin (JSON: {path: [size, mtime]}).
Writes a tar stream of the regular files under each ROOT (relative to BASE) whose size or mtime
changed, and, with PATTERN, of every file outside `logs/` whose path holds it; on stderr one
JSON line per file sent, link not followed, file skipped or renamed, then DONE. The report is bounded
(REPORT_MAX bytes, under what the controller reads of it): the links, skips and renames past NOTED_MAX of
each kind are counted, not listed ({"more": {kind: count}}); a field is cut at FIELD_MAX characters; and
once the files sent would pass the bound, no more is archived ({"cut": files sent, "why": ...}): the
stream stays whole, and the next collect sends what this one did not (its stdin says what it has).

Why one program and not `find` then `tar`: between a listing and a second command that opens
the listed paths, a job can swap a directory for a symlink (the archive then follows it, as
root). Here every directory and file is opened through the no-follow layer (safe_files.py, sent
with this program): each component from its parent's descriptor with O_NOFOLLOW, a file first as
O_PATH and reopened only when regular (a FIFO or device node swapped in after the listing is never
opened), and archived from the descriptor it was checked on: nothing outside BASE is reachable
whatever the job does meanwhile. A tree nested deeper than safe_files.DEPTH_LIMIT is reported, not
walked (a job's 1000 levels crashed the walk). A file with characters that are not printable or bytes that are
not UTF-8 in its name is sent under a safe name (each such byte as %XX) and named in the report; a hard link
to a file of another owner is skipped (where the kernel lets users link files they do not own).
"""
import json
import os
import sys
import tarfile

if __package__:  # imported by the controller
    from clusterctl.node.safe_files import DEPTH_LIMIT, Dir, Refused
else:  # on the node: the files sent with it
    from safe_files import DEPTH_LIMIT, Dir, Refused

RUNS_ON_NODES = True

DONE = "clusterctl-archive-done"
PRIVATE = ("env", "lease", "supervision.json", "mpi.key")  # the job's secrets, the run's keys (supervisor, mpirun gate)
ENTRIES_LIMIT = 1_000_000  # names read from one directory
REPORT_MAX = 48 << 20  # the report's bytes (the controller reads 64 MiB of it: collect/fetch.REPORT_CAP)
NOTED_MAX = 1000  # links not followed, files skipped, files renamed: listed up to this many of each kind,
NOTES_MAX = 8 << 20  # and this many bytes of them all (the rest of REPORT_MAX is the files')
FIELD_MAX = 1024  # characters of a link's target or of a reason
LINE_MAX = 64 << 10  # a line at most: a name of PATH_MAX bytes, each JSON-escaped as \\uXXXX, fits


class Full(Exception):
    """The report reached REPORT_MAX: nothing more is archived."""


class Report:
    """The report on stderr, bounded (see the module's docstring)."""

    def __init__(self):
        self.size, self.sent, self.noted, self.more, self.notes = 0, 0, {}, {}, 0

    def _line(self, entry):
        line = json.dumps(entry) + "\n"
        self.size += len(line)
        sys.stderr.write(line)
        return len(line)

    def room(self):
        """Room for one more file's line; Full once there is none."""
        if self.size + LINE_MAX > REPORT_MAX:
            raise Full()

    def file(self, **entry):
        self.sent += 1
        self._line(entry)

    def note(self, kind, **entry):
        """A link not followed, a file skipped or renamed: listed while NOTED_MAX of its kind allow, else counted."""
        if self.noted.get(kind, 0) >= NOTED_MAX or self.notes + LINE_MAX > NOTES_MAX:
            self.more[kind] = self.more.get(kind, 0) + 1
            return
        self.noted[kind] = self.noted.get(kind, 0) + 1
        self.notes += self._line({k: v[:FIELD_MAX] if isinstance(v, str) and k in ("target", "why") else v
                                  for k, v in entry.items()})

    def end(self, cut=False):
        if self.more:
            self._line({"more": self.more})
        if cut:
            self._line({"cut": self.sent, "why": "the report of this collect reached %d MiB after %d file(s): the "
                                                 "rest is left for the next collect" % (REPORT_MAX >> 20, self.sent)})
        sys.stderr.write(DONE + "\n")


REPORT = Report()  # main() starts a fresh one


def report(**entry):
    kind = next(iter(entry))
    REPORT.file(**entry) if kind == "sent" else REPORT.note(kind, **entry)


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

    def walk(self, d, rel, owner, wanted, private, prune=None, depth=DEPTH_LIMIT):
        """Every entry of the open directory `d` (at `rel`); `wanted(path)` says which files to send."""
        for entry in d.entries(ENTRIES_LIMIT):
            name = entry.name
            path = rel + "/" + name if rel else name
            if entry.kind == "link":
                if wanted(path):
                    report(link=path, target=_readlink(name, d.fd))
            elif entry.kind == "dir":
                if prune == path:
                    continue
                if depth <= 0:
                    report(skipped=path, why="nested deeper than %d levels: not walked" % DEPTH_LIMIT)
                    continue
                try:
                    child = d.sub((name,))
                except (Refused, OSError):
                    report(skipped=path, why="changed while it was read (a directory no more)")
                    continue
                with child:
                    self.walk(child, path, owner, wanted, private, depth=depth - 1)
            elif entry.kind == "file" and wanted(path) and not (private and _private(name)):
                self.file(d, name, path, owner)

    def file(self, d, name, path, owner):
        try:
            fd = d.reader(name)
        except Refused as refused:  # a link, a FIFO or a device node now
            report(skipped=path, why="not opened: " + refused.why)
            return
        except OSError as exc:  # gone, unreadable
            report(skipped=path, why="cannot open without following links: " + exc.strerror)
            return
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(fd)
            if st.st_nlink > 1 and st.st_uid != owner:
                report(skipped=path, why="a hard link to a file of another owner (uid %d)" % st.st_uid)
                return
            name_sent = safe_name(path)
            if self.known.get(name_sent) == [st.st_size, st.st_mtime]:
                return
            REPORT.room()
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


def main(argv):
    global REPORT
    REPORT = Report()
    base, pattern, compress, roots = argv[1], argv[2], argv[3] == "gzip", argv[4:]
    known = json.load(sys.stdin)
    archive = Archive(sys.stdout.buffer, known if isinstance(known, dict) else {}, compress)
    try:
        base_dir = Dir.open(base)  # BASE is the inventory's: trusted
    except FileNotFoundError:  # no run ever wrote there: nothing to send
        roots, pattern, base_dir = [], "", None
    try:
        _walk_all(archive, base_dir, roots, pattern)
        cut = False
    except Full:
        cut = True
    archive.tar.close()
    sys.stdout.flush()
    REPORT.end(cut)
    return 0


def _walk_all(archive, base_dir, roots, pattern):
    for root in roots:
        try:
            below = base_dir.sub(root)
        except (Refused, OSError):
            continue  # not there (yet), or reached through a link: nothing of it is sent
        with below:
            rel = "/".join(part for part in root.split("/") if part not in ("", "."))
            archive.walk(below, rel, os.fstat(below.fd).st_uid, lambda path: True, private=True,
                         depth=DEPTH_LIMIT - rel.count("/") - 1)
    if pattern and base_dir is not None:
        def wanted(path):
            return pattern in path and path.split("/", 1)[0] != "logs"

        archive.walk(base_dir, "", os.fstat(base_dir.fd).st_uid, wanted, private=False, prune="logs")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
