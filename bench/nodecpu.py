"""What the node-side machinery costs each rehearsal node while a job runs: CPU seconds read from
/proc on this machine, where every node's processes live (bench/launch_vs_hand.py).

Per node, the sum of utime+stime+cutime+cstime over
- `sshd`: the node's sshd and every process under it (the controller's sessions: the output
  stream's `tail`, the polls, the lease; a hand-typed `docker exec` client);
- `docker`: the node's dockerd and containerd, and the container's shim (its own time, and that of
  the `docker exec`s it reaped), not the container's processes;
- `wrapper`: clusterctl's node wrapper in the container (the `sh` processes named
  clusterctl-wrapper: its lease watcher and what that forks), not torchrun or the ranks;
- `torchrun`: torchrun's own process (its monitor loop, `--tee`), not its ranks (per process: a
  process that ended in between is left out).
A process that ends between two samples moves its time into its parent's cutime, so a tree's sum
is conserved and the difference of two samples is what the tree spent between them.
"""
from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int):
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), sum(int(f) for f in fields[11:15]), sum(int(f) for f in fields[11:13])


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def processes() -> dict[int, tuple]:
    """{pid: (ppid, own+children ticks, own ticks, cmdline)} of every process now."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                table[int(entry)] = (*stat, _cmdline(int(entry)))
    return table


def _tree(table: dict, root: int, stop=lambda cmd: False) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            out.append(pid)
            todo += [c for c in children.get(pid, ()) if not stop(table[c][3])]
    return out


def _pid(path: Path):
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _is_shim(cmd: list[str]) -> bool:
    return bool(cmd) and "containerd-shim" in cmd[0]


def sample(sandbox) -> dict[str, dict[str, float]]:
    """{node: {part: CPU seconds so far}} for every node of the sandbox."""
    table = processes()
    out = {}
    for node in sandbox.nodes:
        parts = {"sshd": 0.0, "docker": 0.0, "wrapper": 0.0}
        sshd = _pid(node.sshd_pid)
        if sshd:
            parts["sshd"] = sum(table[p][1] for p in _tree(table, sshd)) / TICK
        dockerd = _pid(node.docker_pid)
        if dockerd:
            parts["docker"] = sum(table[p][1] for p in _tree(table, dockerd, _is_shim)) / TICK
        out[node.name] = parts
    names = [node.name for node in sandbox.nodes]
    for pid, (ppid, total, own, cmd) in table.items():
        node = _node_of(cmd, names)
        if node is None:
            continue
        if "clusterctl-wrapper" in cmd:
            out[node]["wrapper"] += total / TICK
        elif "torch.distributed.run" in cmd and "python" in cmd[0].rsplit("/", 1)[-1]:
            out[node].setdefault("torchrun_by_pid", {})[pid] = own / TICK
    for pid, (ppid, total, own, cmd) in table.items():  # the shims: their own time and what they reaped
        if _is_shim(cmd):
            owner = _shim_node(table, pid, out)
            if owner is not None:
                out[owner]["docker"] += total / TICK  # cutime: only the reaped children (exec'd, ended)
    return out


def _node_of(cmd: list[str], names: list[str]):
    """The node of a wrapper or torchrun: by its --node-rank (the inventory's order, clusterctl's and
    the hand-typed way's alike)."""
    for arg in cmd:
        if arg.startswith("--node-rank="):
            rank = int(arg.split("=", 1)[1])
            return names[rank] if rank < len(names) else None
    return None


def _shim_node(table: dict, pid: int, nodes: dict):
    """A shim's node: the -namespace/-id are the same on every node, so by its socket's address
    under the node's exec root, which carries the node's name (STATE/<node>/exec)."""
    for arg in table[pid][3]:
        for name in nodes:
            if f"/{name}/" in arg:
                return name
    return None


def per_minute(first: dict, last: dict, seconds: float) -> dict[str, dict[str, float]]:
    """{node: {part: CPU seconds per minute}} between two samples `seconds` apart."""
    out = {}
    for node in first:
        if node in last:
            out[node] = {part: round((last[node][part] - first[node][part]) * 60 / seconds, 3)
                         for part in first[node] if part != "torchrun_by_pid"}
            before, after = first[node].get("torchrun_by_pid", {}), last[node].get("torchrun_by_pid", {})
            out[node]["torchrun"] = round(sum(t - before.get(pid, 0.0) for pid, t in after.items()) * 60 / seconds, 3)
    return out
