"""Following a run's files on a node without following a link (issue 47): `run_files.py follow` (the
run's live stream) and `run_files.py logs` (`clusterctl logs`), in place of the `tail -v -F` they were,
whose `open()` of a path went wherever a link the job made pointed (a root-only key printed as a rank's
log). The stream is tail's, byte for byte, so watch/follow.py reads it unchanged: a line
`clusterctl-follow <launcher dir>/attempt_0` first, then each file's bytes as written, every switch of
file marked `\\n==> NAME <==\\n` (the first header without its newline). Like `tail -F` a file that is
missing yet is waited for, one replaced (a new inode at its name) is read again from its start, one
truncated from its new end. No fork while the job runs: the files are read four times a second.
"""
from __future__ import annotations

import os
import select
import sys
import time

if __package__:  # imported by the controller
    from clusterctl.node.safe_files import Dir, Refused, first_word
else:  # on the node: the files sent with it
    from safe_files import Dir, Refused, first_word

RUNS_ON_NODES = True

ATTEMPT = "attempt_0"
CHUNK = 1 << 20  # the most read from one file in one round: the others are not starved
TAIL_BYTES = 1 << 20  # where `-n K` looks for its K lines
PERIOD_S = 0.25


def _split(rel: str) -> tuple[str, ...]:
    return tuple(p for p in rel.split("/") if p)


class Follower:
    """The files `names` (relative to the open run dir `d`), read as tail -v [-F] would show them."""

    def __init__(self, d: Dir, names: list[str], lines: str) -> None:
        self.d, self.names, self.lines = d, names, lines
        self.held: dict[str, tuple[int, tuple[int, int]]] = {}  # name -> (fd, (dev, inode))
        self.current: str | None = None
        self.refused: set[str] = set()

    def _lstat(self, name: str):
        parts = name.split("/")
        try:
            with self.d.sub(tuple(parts[:-1])) as where:
                found = os.stat(parts[-1], dir_fd=where.fd, follow_symlinks=False)
        except (OSError, Refused):
            return None
        return found

    def _open(self, name: str, first: bool) -> None:
        parts = name.split("/")
        try:
            with self.d.sub(tuple(parts[:-1])) as where:
                fd = where.reader(parts[-1])
        except Refused as refused:
            if name not in self.refused:
                self.refused.add(name)
                print(f"clusterctl: refused {refused}", file=sys.stderr)
            return
        except OSError:
            return
        st = os.fstat(fd)
        self.held[name] = (fd, (st.st_dev, st.st_ino))
        if first and not self.lines.startswith("+"):  # -n K: from where the last K lines start
            start = max(0, st.st_size - TAIL_BYTES)
            data = os.pread(fd, st.st_size - start, start)
            os.lseek(fd, start + len(data) - len(last_lines(data, int(self.lines))), os.SEEK_SET)

    def pump(self, first: bool = False) -> bool:
        """One round over every file: what is new in each, under its header. True if anything was."""
        wrote = False
        for name in self.names:
            found = self._lstat(name)
            held = self.held.get(name)
            if held and found is not None and (found.st_dev, found.st_ino) != held[1]:
                os.close(held[0])  # replaced (tail -F): the new file from its start
                del self.held[name]
                held = None
            if held is None and found is not None:
                self._open(name, first)
                held = self.held.get(name)
            if held is None:
                continue
            fd = held[0]
            size, at = os.fstat(fd).st_size, os.lseek(fd, 0, os.SEEK_CUR)
            if size < at:  # truncated
                os.lseek(fd, 0, os.SEEK_SET)
            data = os.read(fd, CHUNK)
            if not data and not first:  # tail -v heads every file it was asked for, empty or not
                continue
            if name != self.current or first:
                sys.stdout.buffer.write((b"" if self.current is None else b"\n") + f"==> {name} <==\n".encode())
                self.current = name
            sys.stdout.buffer.write(data)
            wrote = wrote or bool(data)
        sys.stdout.flush()
        return wrote

    def close(self) -> None:
        for fd, _ in self.held.values():
            os.close(fd)
        self.held.clear()


def last_lines(data: bytes, count: int) -> bytes:
    """The last `count` lines of `data` (a last line without its newline counts, as in tail)."""
    if count <= 0:
        return b""
    lines = data.split(b"\n")
    ended = lines[-1] == b""
    if ended:
        lines.pop()
    if not lines:
        return b""
    return b"\n".join(lines[-count:]) + (b"\n" if ended else b"")


def attempt_of(d: Dir) -> str:
    """`<launcher dir>/attempt_0` of the run dir, the last by name (the shell's `*/attempt_0`), or ""."""
    found = ""
    for entry in d.entries():
        if entry.kind != "dir":
            continue
        try:
            with d.sub((entry.name,)) as launcher:
                below = launcher.entry(ATTEMPT)
        except (Refused, OSError):
            continue
        if below is not None and below.kind == "dir":
            found = f"{entry.name}/{ATTEMPT}"
    return found


def _wait_attempt(d: Dir, follow: bool, between=lambda: True) -> str:
    while True:
        att = attempt_of(d)
        if att or d.entry("agent.exit") or not follow or not between():
            return att
        time.sleep(PERIOD_S)


RENEWED = "clusterctl-lease renewed\n"  # on stderr: the answer to a renewal (run/runner.py counts it as a poll's)
# on stderr, the lease-carrying stream's last line: what a poll would answer once torchrun ended ("exit N",
# "exit N stopped"), so the run's end needs no poll after its stream (issue 52: one round trip per node)
EXITED = "clusterctl-exited "


def _renew_asked(d: Dir) -> bool:
    """The lease renewed for each request (a line) the controller sent on stdin since, each answered on
    stderr: its poll, on this stream (issue 52: no process on the node for it). False once stdin ended
    (the controller gone): nothing renews the lease any more."""
    readable, _, _ = select.select([0], [], [], 0)
    if not readable:
        return True
    data = os.read(0, 4096)
    if not data:
        return False
    try:
        d.touch("lease")
    except (Refused, OSError) as error:  # not renewed, not answered: the controller polls instead
        sys.stderr.write(f"clusterctl: lease not renewed: {error}\n")
    else:
        sys.stderr.write(RENEWED * max(1, data.count(b"\n")))
    sys.stderr.flush()
    return True


def _stdin_closed(timeout: float) -> bool:
    readable, _, _ = select.select([0], [], [], timeout)
    return bool(readable) and not os.read(0, 4096)


def follow(base: str, rel: str, nproc: str, lease: str = "0") -> None:
    """The run's live stream: every local rank's stdout and stderr and agent.log, from their start,
    until agent.exit appears (all of them read to their end then). With `lease` "1" it renews the run's lease
    when asked on stdin (`_renew_asked`), ends with stdin, and its last line on stderr is the node's exit."""
    asked = (lambda: _renew_asked(d)) if lease == "1" else (lambda: True)
    d = None
    for _ in range(121):
        try:
            d = Dir.open(base, _split(rel))
            break
        except (FileNotFoundError, NotADirectoryError):
            time.sleep(PERIOD_S)
    if d is None:
        sys.exit(1)
    with d:
        att = _wait_attempt(d, True, asked)
        sys.stdout.buffer.write(f"clusterctl-follow {att}\n".encode())
        names = [f"{att}/{i}/{s}.log" for i in range(int(nproc)) for s in ("stdout", "stderr")] if att else []
        tailer = Follower(d, names + ["agent.log"], "+1")
        watch = names_appearing(d)
        try:
            while not d.entry("agent.exit"):
                if not asked():
                    return
                if not tailer.pump():  # quiet: the next read in PERIOD_S, or at once when a name appears here
                    quiet(watch, lease == "1")
            while tailer.pump():  # agent.exit comes after torchrun's end: its lines and its ranks' are all there
                pass
            if lease == "1":
                _say_exit(d)
        finally:
            tailer.close()
            if watch is not None:
                os.close(watch)


_IN_CREATE, _IN_MOVED_TO = 0x100, 0x80


def names_appearing(d: Dir) -> int | None:
    """A descriptor that turns readable when a name appears in the open run dir `d` (agent.exit, renamed into
    place when torchrun ended), so the stream ends then rather than at its next look (issue 52: the run's
    return waits for it) without looking more often; None where the kernel gives none (the stream then looks
    every PERIOD_S). The watch is on the directory already open (/proc/self/fd), never a path a link could
    redirect; no link or file of the job's is opened by it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, AttributeError, ImportError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, f"/proc/self/fd/{d.fd}".encode(), _IN_CREATE | _IN_MOVED_TO) < 0:
        os.close(fd)
        return None
    return fd


def quiet(watch: int | None, stdin: bool, period_s: float = PERIOD_S) -> bool:
    """Up to `period_s`, less when a name appears in the run dir or (a lease-carrying stream) stdin has a question;
    whether a name appeared."""
    waited = ([watch] if watch is not None else []) + ([0] if stdin else [])
    if not waited:
        time.sleep(period_s)
        return False
    readable, _, _ = select.select(waited, [], [], period_s)
    if watch not in readable:
        return False
    try:
        os.read(watch, 4096)  # the events themselves say nothing the next look does not
    except BlockingIOError:
        pass
    return True


def _say_exit(d: Dir) -> None:
    try:
        code = first_word(d, "agent.exit") or "?"  # one word: what the job may have written there stays off this stream
        stopped = d.is_file("stopped")
    except (Refused, OSError):  # the controller polls as before
        return
    sys.stderr.write(f"{EXITED}exit {code}" + (" stopped" if stopped else "") + "\n")
    sys.stderr.flush()


def logs(base: str, rel: str, count: str, following: str, agent: str, *ranks: str) -> None:
    """`clusterctl logs`: the ranks' files asked for (agent.log too, or alone without the ranks'
    directory), their last `count` lines (`+1`: all); following, until agent.exit (all read to their end then)
    or the end of stdin (the controller gone)."""
    try:
        d = Dir.open(base, _split(rel))
    except (FileNotFoundError, NotADirectoryError):
        print("clusterctl-logs: no run directory", file=sys.stderr)
        sys.exit(3)
    with d:
        live = following == "1" and not d.entry("agent.exit")
        att = _wait_attempt(d, live)
        sys.stdout.buffer.write(f"clusterctl-follow {att}\n".encode())
        names = [f"{att}/{r}/{s}.log" for r in ranks for s in ("stdout", "stderr")] if att else []
        if agent == "1" or not att:
            names.append("agent.log")
        tailer = Follower(d, names, count)
        try:
            tailer.pump(first=True)
            if not live:
                while tailer.pump():  # the rest of files longer than one round's chunk
                    pass
                return
            watch = names_appearing(d)
            try:
                while not d.entry("agent.exit"):
                    if not tailer.pump():
                        quiet(watch, True, PERIOD_S * 2)
                        if _stdin_closed(0):
                            return
            finally:
                if watch is not None:
                    os.close(watch)
            while tailer.pump():  # as the live stream: everything written before agent.exit is there
                pass
        finally:
            tailer.close()
