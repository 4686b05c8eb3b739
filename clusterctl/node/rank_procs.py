"""The ranks of one run on this node, found in /proc, and what /proc says of each (the straggler watch's).

A rank is a process whose environment carries the run's marker (plan/marker.py's lines KEY=value, which every
process clusterctl starts inherits) and a RANK; a launcher's shell and a rank's own child with the same RANK (a
DataLoader worker) are passed over. Read by the keeper's py-spy samples (node_stragglers.py) and by each
flight-recorder round (collective_waits.py), attached or detached. The standard library only, Python 3.8+:
shipped beside either.
"""
import os

RUNS_ON_NODES = True
MAX_RANKS = 64  # found on one node
MARKER = ("CLUSTERCTL_CLUSTER", "CLUSTERCTL_HOST", "CLUSTERCTL_RUN_ID")  # plan/marker.py's names
SHELLS = ("sh", "dash", "bash", "busybox")
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read(1 << 20).decode("utf-8", "replace").split("\0")
    except OSError:
        return []


def _rank_of(lines):
    for line in lines:
        if line.startswith("RANK=") and line[5:].isdigit():
            return int(line[5:])
    return None


def _shell(pid):
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) in SHELLS
    except OSError:
        return False


def stat_fields(pid, thread=None):
    """The fields of /proc's `stat` of the process (or of its `thread`) after the command's name, its state
    first; [] where /proc cannot say (the name may hold spaces and parentheses: split after its last ")")."""
    path = f"/proc/{pid}/task/{thread}/stat" if thread else f"/proc/{pid}/stat"
    try:
        with open(path) as f:
            return f.read(4096).rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _parent(pid):
    fields = stat_fields(pid)
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def find_ranks(marker):
    """{pid: rank} of the processes carrying `marker` (the lines KEY=value) and a RANK: the ranks themselves."""
    ranks = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        lines = _environ(entry)
        rank = _rank_of(lines) if all(m in lines for m in marker) else None
        if rank is None or _shell(entry):
            continue
        parent = _parent(entry)
        if parent and _rank_of(_environ(parent)) == rank and not _shell(parent):
            continue  # a rank's child (a DataLoader worker)
        ranks[int(entry)] = rank
        if len(ranks) >= MAX_RANKS:
            break
    return ranks


def cpu_seconds(pid):
    """The CPU time (user + system, every thread) the process has had so far, None where /proc cannot say."""
    fields = stat_fields(pid)
    try:
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (ValueError, IndexError):
        return None
