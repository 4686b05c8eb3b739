"""When a node's ranks last wrote output of their own: the newest change of the launcher's log and of every
rank's stdout/stderr log, less the lines the flight recorder's dumps make them print (issue 49).

A detached run's stall watch measures a node's silence by these files (node_agent.node_report). The
straggler watch's flight-recorder rounds (collective_waits.node_round) poke every rank each round, and each
dump makes the rank print DUMP_LINE to its stderr (and, through the launcher's tee, to agent.log): by the
files' mtimes alone a hung rank would be talking every round. So just before its pokes a round writes
MARKS: for each file its size, its mtime and when the job's own output last changed it. A file that has since grown by
dump lines only keeps that time; any other byte is output, and the file's mtime counts. The attached run
drops the line from its live log before its own stall watch counts output (run/runner.py).

The standard library only, Python 3.8+: shipped beside node_agent.py and beside collective_waits.py.
"""
import json
import os
import re

if __package__:  # imported by the controller's tests
    from clusterctl.node.layout import AGENT_LOG, ATTEMPT, STDERR, STDOUT
else:  # a file beside the node program that imports it
    from layout import AGENT_LOG, ATTEMPT, STDERR, STDOUT

RUNS_ON_NODES = True

MARKS = "fr_marks.json"  # in a node's run dir
MAX_MARKS_BYTES = 1 << 20
MAX_NEW_BYTES = 4096  # grown by more than this since the mark: not a round's dump lines (~200 bytes each)
# The line each dump makes a rank print (ProcessGroupNCCL.cpp, torch 2.4-2.11): not the job's output
DUMP_LINE = re.compile(r"ProcessGroupNCCL preparing to dump debug info\.")


def output_files(d):
    """(path, Entry) of the launcher's log and each rank's logs in the run dir `d` (safe_files.Dir), and the
    most ranks one launcher directory holds. A path is a tuple of names below `d`."""
    found, ranks = [], 0
    agent = d.entry(AGENT_LOG)
    if agent is not None and agent.kind == "file":
        found.append(((AGENT_LOG,), agent))
    for entry in d.entries():
        if entry.kind != "dir":
            continue
        try:
            with d.sub((entry.name, ATTEMPT)) as attempt:
                local = [r.name for r in attempt.entries() if r.name.isdigit() and r.kind == "dir"]
                ranks = max(ranks, len(local))
                for r in local:
                    with attempt.sub((r,)) as rank:
                        for name in (STDOUT, STDERR):
                            log = rank.entry(name)
                            if log is not None and log.kind == "file":
                                found.append(((entry.name, ATTEMPT, r, name), log))
        except Exception:  # gone or refused meanwhile (a link, a FIFO): not output
            continue
    return found, ranks


def last_output(d, files=None):
    """The time the job's own output last changed one of its files (None without any), dump lines left out."""
    marks = _marks(d)
    times = [_own_change(d, path, entry, marks.get("/".join(path)))
             for path, entry in (files if files is not None else output_files(d)[0])]
    return max(times) if times else None


def mark(d):
    """Before a round pokes the ranks: each file's size, mtime and the time of its own last output, in MARKS."""
    marks = _marks(d)
    fresh = {}
    for path, entry in output_files(d)[0]:
        key = "/".join(path)
        fresh[key] = [entry.size, entry.mtime, _own_change(d, path, entry, marks.get(key))]
    d.write(MARKS, json.dumps(fresh, sort_keys=True))


def _marks(d):
    """MARKS as {path: (size, mtime, time)}; anything else in it (a torn write, a job's forgery) is no mark.
    What a mark says is never later than the file's mtime (_own_change), so a forged one can make the node
    look no busier than its files do: what a job could as well do by printing."""
    try:
        raw = json.loads(d.read(MARKS, MAX_MARKS_BYTES).decode("utf-8"))
    except Exception:  # absent, refused, not JSON: no marks, every file's mtime counts
        return {}
    if not isinstance(raw, dict):
        return {}
    return {k: tuple(v) for k, v in raw.items() if isinstance(k, str) and isinstance(v, list) and len(v) == 3
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)}


def _own_change(d, path, entry, marked):
    """The file's mtime, or the marked time where it has grown since by dump lines only."""
    if marked is None:
        return entry.mtime
    size, mtime, since = marked
    since = min(since, entry.mtime)
    grown = entry.size - size
    if grown == 0 and entry.mtime == mtime:
        return since  # untouched since the mark
    if grown <= 0 or grown > MAX_NEW_BYTES:
        return entry.mtime  # truncated, rewritten, or more than a round's lines
    new = _read_at(d, path, size, grown)
    return since if new is not None and _only_dump_lines(new) else entry.mtime


def _read_at(d, path, offset, length):
    try:
        with d.sub(path[:-1]) as parent:
            fd = parent.reader(path[-1])
            try:
                return os.pread(fd, length, offset)
            finally:
                os.close(fd)
    except Exception:  # gone, refused: unknown bytes count as output
        return None


def _only_dump_lines(data):
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return bool(lines) and all(DUMP_LINE.search(line) for line in lines)
