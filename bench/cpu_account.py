"""Every CPU second clusterctl spends during a run, by process kind and node, beside the job's own
(issue 52). CPU seconds are what to trust on a loaded machine: wall time stretches with every other
process on the cores, the CPU a process spends barely does.

One `clusterctl run --json` of examples/allreduce.py (2 ranks per node, holding HOLD_S after its
barrier) while a thread reads /proc every SAMPLE_S: on the rehearsal every node's processes (its sshd,
its Docker Engine, its container) live in this machine's /proc; a `connection: local` run's are its
own children. Each process gets a kind from its own argv or, failing that, its parent's:
- a node program run inline (`python -I -S -c PROGRAM OP ...`) is OP (`poll`, `follow`, `top`, ...);
- an argv element `clusterctl-NAME` (the name clusterctl gives each `sh -c` it starts: `wrapper` and
  its lease watcher, `follow` the live-log stream, `poll`, `pyspy-forget`, ...) is NAME;
- `node_metrics.py` the metrics sampler, `py-spy`/`node_stragglers.py` the straggler rounds,
  `node_healing.py`/`node_agent.py` the keeper/supervisor of a detached run;
- `torch.distributed.run`: the job (torchrun and its ranks);
- a node's sshd (every session, and the `docker exec` client in it, which carries the kind of what it
  runs: `sshd:poll`), its dockerd/containerd (`engine`), its container's shim (`shim`: with what it
  reaped that was never seen, the execs shorter than SAMPLE_S).
What a process spent in the window is its own + reaped-children CPU at its last sample minus at its
first, less the totals its ended children had at their last sample (theirs already): each CPU second
counts once. Also the controller's (`phases_cpu`, run/phases.py) and the end of the run: from the last
node's `agent.exit` (its mtime: torchrun's exit) to each end phase.

    python3 bench/cpu_account.py --nodes 2,8 --local      # as root for the rehearsal
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shlex
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, WORK, clusterctl_argv, clusterctl_env, fresh_dir, load, log, save, timed  # noqa: E402
import launch_vs_hand  # noqa: E402
from launch_vs_hand import JOB, bench_inventory  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.5
HOLD_S = 20.0
NODE_PROGRAMS = {"node_metrics.py": "metrics sampler", "py-spy": "straggler py-spy", "node_stragglers.py":
                 "straggler py-spy", "node_healing.py": "keeper", "node_agent.py": "keeper"}


def _read(pid: str):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    own, reaped = int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
    return (int(pid), int(fields[19])), int(fields[1]), own, reaped, argv


def snapshot() -> dict:
    """{(pid, start): (ppid, own ticks, reaped ticks, argv)} of every process now."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            row = _read(entry)
            if row is not None:
                table[row[0]] = row[1:]
    return table


_NAMED = re.compile(r"(?:^|[\s'\"])clusterctl-([a-z][a-z-]*)(?=$|[\s'\"])")  # an argv element, or a word of a `sh -c` string


INLINE = ["-I", "-S", "-c"]  # a node program run inline (clusterctl/node inline_argv): python -I -S -c PROGRAM OP ...


def kind_of_argv(argv: list[str]):
    for index in range(len(argv) - 4):  # its operation (`poll`, `follow`, ...): the program's text names others
        if argv[index:index + 3] == INLINE:
            return argv[index + 4]
    for arg in argv:  # the same inside a `sh -c` string (`become`'s `case ... sudo -n -- python3 -I -S -c ...`)
        if " -I -S -c " in arg:
            try:
                words = shlex.split(arg)
            except ValueError:
                continue
            found = kind_of_argv(words) if words != [arg] else None
            if found is not None:
                return found
    for arg in argv:
        named = _NAMED.search(arg)
        if named and named.group(1) != "sandbox":  # the rehearsal's own directories (its roots' argv)
            return named.group(1)
    for arg in argv:
        base = arg.rsplit("/", 1)[-1]
        if base in NODE_PROGRAMS:
            return NODE_PROGRAMS[base]
    if "torch.distributed.run" in argv:
        return "job"
    return None


class Roots:
    """Where a process belongs: the rehearsal's node roots (sshd, dockerd, shims) or, for a local
    run, processes whose argv names `mine` (the run's outputs directory)."""

    def __init__(self, sandbox=None, mine: str = "", inventory: str = ""):
        self.sandbox, self.mine, self.inventory = sandbox, mine, inventory

    def root(self, pid: int, argv: list[str]):
        """(node, kind) when `pid` is a root, else None. The controller (`clusterctl run -i INVENTORY`) is
        the node `controller` on the rehearsal; on a local run the node's, as what it starts there."""
        if self.inventory and self.inventory in argv and "clusterctl" in argv:
            return ("controller" if self.sandbox is not None else "local"), "controller"
        if self.sandbox is None:
            kind = kind_of_argv(argv)
            return ("local", kind) if kind and any(self.mine in a for a in argv) else None
        for node in self.sandbox.nodes:
            if pid in (_pid(node.sshd_pid),):
                return node.name, "sshd"
            if pid == _pid(node.docker_pid):
                return node.name, "engine"
            if argv and "containerd-shim" in argv[0] and any(f"/{node.name}/" in a for a in argv):
                return node.name, "shim"
        return None


class Kept:
    """The roots of kept samples as they were classified: each tree's top and the nodes' own processes."""
    KINDS = ("engine", "shim", "controller")  # a node's sshd is its tree's top

    def __init__(self, tops: dict):
        self.tops = tops

    def root(self, pid: int, _argv: list[str]):
        return self.tops.get(pid)


def _pid(path):
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def classify(table: dict, roots: Roots) -> dict:
    """{key: (node, kind)} for every process that belongs to a node."""
    by_pid = {key[0]: key for key in table}
    out: dict = {}

    def walk(key, depth=0):
        if key in out or depth > 64:
            return out.get(key)
        ppid, _own, _reaped, argv = table[key]
        found = roots.root(key[0], argv)
        if found is None and ppid in by_pid and ppid != key[0]:
            parent = walk(by_pid[ppid], depth + 1)
            if parent is not None:
                found = (parent[0], _child_kind(parent[1], kind_of_argv(argv)))
        out[key] = found
        return found

    for key in table:
        walk(key)
    return {key: where for key, where in out.items() if where is not None}


def _child_kind(parent: str, own):
    """A process's kind from its parent's and its own argv's: an ssh session's command is `sshd:KIND`,
    the job's processes stay the job's, else its own kind where it has one, else its parent's."""
    if own is None or parent == "job":
        return parent
    if parent.startswith("sshd"):
        return f"sshd:{own}"
    return own


class Sampler(launch_vs_hand.Sampler):
    """launch_vs_hand's thread, reading every process (its kind and node) each SAMPLE_S."""

    def __init__(self, roots: Roots):
        super().__init__(None)
        self.roots = roots

    def _loop(self):
        while True:
            table = snapshot()
            self.samples.append((time.time(), table, classify(table, self.roots)))
            if self._stop.wait(SAMPLE_S):
                return


def account(samples: list, start: float, end: float, tails: bool = True) -> dict:
    """{node: {kind: CPU seconds}} spent between the samples nearest `start` and `end`; `tails=False`:
    what an ended child spent after its last reading stays its parent's (the rule before 2026-11-29 12:30)."""
    inside = [s for s in samples if start - SAMPLE_S <= s[0] <= end + SAMPLE_S]
    if len(inside) < 2:
        return {}
    first, last = inside[0][1], inside[-1][1]
    seen: dict = {}  # key -> (first (own, reaped), last (own, reaped), ppid, where)
    last_at: dict = {}  # key -> the index of the last sample it was in
    reaped_at: dict = {}  # key -> {index: its reaped children's ticks at that sample}
    for index, (_t, table, where) in enumerate(inside):
        for key, (ppid, own, reaped, argv) in table.items():
            if key in where:
                begin = seen[key][0] if key in seen else ((own, reaped) if key in first else (0, 0))
                # an exiting process's cmdline reads empty (its memory is gone): it keeps the kind it had,
                # else it would take its parent's and carry its whole life there (torchrun's to `wrapper`)
                kind = seen[key][3] if key in seen and not any(argv) else where[key]
                seen[key] = (begin, (own, reaped), ppid, kind)
                last_at[key] = index
                reaped_at.setdefault(key, {})[index] = reaped
    spent: dict = {}
    for key, (begin, now, _ppid, (node, kind)) in seen.items():
        ticks = sum(now) - sum(begin)
        spent.setdefault(node, {}).setdefault(kind, 0)
        spent[node][kind] += ticks
    by_pid = {key[0]: key for key in seen}
    children: dict = {}
    for key, (_begin, _now, ppid, _where) in seen.items():
        if ppid in by_pid:
            children.setdefault(by_pid[ppid], []).append(key)

    def final(key, depth=0) -> int:
        """A process's total as its parent reaped it: at its last reading, plus what it reaped itself
        after that reading (children read last no earlier than it)."""
        late = [c for c in children.get(key, ()) if c not in last and last_at[c] >= last_at[key]]
        return sum(seen[key][1]) + (sum(final(c, depth + 1) for c in late) if depth < 32 else 0)

    def heirs(key, depth=0) -> list:
        """`key` and the children that ended with it (read last no earlier), theirs too: (key, weight)."""
        late = [c for c in children.get(key, ()) if c not in last and last_at[c] >= last_at[key]]
        return [(key, sum(seen[key][1]) + 1)] + [h for c in late for h in (heirs(c, depth + 1) if depth < 32 else ())]

    def settle(group: list, tail: float) -> None:
        """`tail` ticks to the processes of `group` and those that ended with them, by size (a short exec
        unseen in the same interval goes with them: it cannot be told apart)."""
        parts = [h for k in group for h in heirs(k)]
        for key, weight in parts:
            node, kind = seen[key][3]
            spent[node][kind] = spent[node].get(kind, 0) + tail * weight / sum(w for _, w in parts)

    ended: dict = {}  # parent -> its children that ended in the window
    for key in seen:  # an ended child's total moved into its parent's
        if key not in last:  # (where the parent was read after the child's end: its figure holds it)
            parent = by_pid.get(seen[key][2])
            if parent is not None and last_at[parent] > last_at[key]:
                node, kind = seen[parent][3]
                spent[node][kind] -= final(key)
                ended.setdefault(parent, []).append(key)
    # what children spent after their last reading (a round's last dumps, ranks' teardown) is theirs:
    # the parent's reaped growth beyond their readings, over the interval in which they ended
    for parent, kids in (ended.items() if tails else ()):
        node, kind = seen[parent][3]
        readings = sorted(reaped_at[parent].items())
        for (i, before), (j, after) in zip(readings, readings[1:]):
            group = [k for k in kids if i <= last_at[k] < j]
            tail = after - before - sum(final(k) for k in group)
            if not group or tail <= 0:
                continue
            spent[node][kind] -= tail
            settle(group, tail)
    return {node: {kind: round(max(0, t) / TICK, 2) for kind, t in sorted(kinds.items())} for node, kinds in spent.items()}


def per_node_minute(spent: dict, seconds: float) -> dict:
    """{kind: CPU seconds per node per minute}, the mean over the nodes; the rehearsal's controller
    (one, on this machine) as `controller` per minute, not per node."""
    spent = dict(spent)
    controller = spent.pop("controller", {})
    kinds = sorted({k for kinds in spent.values() for k in kinds})
    n = max(1, len(spent))
    out = {k: round(sum(v.get(k, 0) for v in spent.values()) / n * 60 / seconds, 3) for k in kinds}
    return {**out, **{f"controller:{k}" if k != "controller" else k: round(v * 60 / seconds, 3)
                      for k, v in controller.items()}}


def _end_of_run(outputs: Path, run_id: str, phases: dict, started: float) -> dict:
    """Seconds from the last node's torchrun exit (its agent.exit's mtime) to each end phase."""
    exits = [p.stat().st_mtime for p in (outputs / "logs" / run_id).glob("*/agent.exit")]
    if not exits:
        return {}
    last = max(exits) - started
    ranks = [json.loads(p.read_text()) for p in (outputs / "bench-ranks" / run_id).glob("rank*.json")]
    return {"last_torchrun_exit": round(last, 3), "first_torchrun_exit": round(min(exits) - started, 3),
            **({"last_rank_end": round(max(r["t_end"] for r in ranks) - started, 3)} if ranks else {}),
            **{name: round(phases[name] - last, 3) for name in
               ("torchrun_exits", "watch_ended", "streams_ended", "recorded", "returned") if name in phases}}


def accounted(samples: list, windows: dict, phases: dict) -> dict:
    """The account over each window: the whole run and steady state per node per minute, the launch in
    CPU seconds per node, and the run's stretches between its phases (`by_phase`, CPU s per node)."""
    started, ended = windows["whole"]
    whole = account(samples, started, ended)
    out = {"whole": whole, "whole_per_node_minute": per_node_minute(whole, ended - started)}
    if "steady" in windows:
        start, end = windows["steady"]
        out.update(steady_per_node_minute=per_node_minute(account(samples, start, end), end - start),
                   steady_s=round(end - start, 1),  # and as the earlier runs were accounted, to compare
                   steady_parent_tails=per_node_minute(account(samples, start, end, tails=False), end - start))
    if "late" in windows:
        start, end = windows["late"]
        out.update(late_per_node_minute=per_node_minute(account(samples, start, end), end - start))
    if "launch" in windows:
        start, end = windows["launch"]
        out.update(launch_per_node=per_node_minute(account(samples, start, end), 60.0), launch_s=round(end - start, 1))
    stretches = [("probe and launch", started, started + phases.get("launch", 0)),
                 ("ranks start, import torch, init", started + phases.get("launch", 0), windows.get("launch", (0, 0))[1]),
                 ("ranks run", windows.get("launch", (0, 0))[1], started + phases.get("last_rank_done", 0)),
                 ("end of the run", started + phases.get("last_rank_done", 0), ended)]
    if {"launch", "last_rank_done"} <= set(phases) and "launch" in windows:
        out["by_phase"] = {name: {"s": round(end - start, 1), "per_node": per_node_minute(account(samples, start, end), 60.0)}
                           for name, start, end in stretches if end - start > 2 * SAMPLE_S}
    return out


def reaccount(label: str, result: dict) -> dict:
    """The account of a kept run done again (the accounting changed since). Samples kept before their
    windows were (before 2026-11-29 12:30) take them from the result (launch_s, steady_s: 0.1 s rounded)."""
    kept = pickle.loads((WORK / f"cpu-account-samples-{label}.pkl").read_bytes())
    started, ended, samples = kept[:3]
    for _t, table, where in samples:  # the kinds as kind_of_argv gives them now, under the roots found then
        classified = {key[0] for key in where}
        where.update(classify(table, Kept({key[0]: at for key, at in where.items()
                                           if table[key][0] not in classified or at[1] in Kept.KINDS})))
    windows = kept[3] if len(kept) > 3 else {"whole": (started, ended)}
    if len(kept) == 3 and "launch_s" in result:
        collective = started + result["launch_s"]
        windows["launch"] = (started, collective)
        if "steady_s" in result:
            windows["steady"] = (collective + 3, collective + 3 + result["steady_s"])
    return accounted(samples, windows, result.get("phases", {}))


def one_run(inventory: Path, env: dict, roots: Roots, outputs: Path) -> dict:
    env = dict(env, PYTHONPATH=str(REPO))  # this checkout's clusterctl, ahead of an editable install elsewhere
    started = time.time()
    with Sampler(roots) as sampler:
        sample = timed(clusterctl_argv("run", "-i", inventory, REPO / "examples" / "prompt.txt", "--json"),
                       env=env, timeout=600)
    ended = time.time()
    document = json.loads(sample.pop("_stdout", b"").decode() or "{}")
    run_id, phases = document.get("run_id", ""), document.get("phases", {})
    ranks = [json.loads(path.read_text()) for path in (outputs / "bench-ranks" / run_id).glob("rank*.json")]
    windows = {"whole": (started, ended)}
    if ranks:  # steady state: from 3 s after the last rank's first collective to 2 s before the first end
        steady = (max(r["t_first_collective"] for r in ranks) + 3, min(r["t_end"] for r in ranks) - 2)
        if steady[1] - steady[0] > 3:
            windows["steady"] = steady
        if steady[1] - steady[0] > 60:  # a long hold: its last 30 s, the straggler watch at its steady pace
            windows["late"] = (steady[1] - 30, steady[1])
        windows["launch"] = (started, max(r["t_first_collective"] for r in ranks))
    label = "local" if roots.sandbox is None else str(len(roots.sandbox.nodes))
    keep = Path(os.environ.get("CPU_ACCOUNT_KEEP") or WORK / f"cpu-account-samples-{label}.pkl")
    keep.write_bytes(pickle.dumps((started, ended, sampler.samples, windows)))  # to redo the account (--reaccount)
    result = {"rc": sample["rc"], "wall": sample["wall"], "controller_cpu": round(sample["user"] + sample["sys"], 2),
              "phases": phases, "phases_cpu": document.get("phases_cpu", {}),
              "end_of_run": _end_of_run(outputs, run_id, phases, started), "ranks": len(ranks),
              **accounted(sampler.samples, windows, phases)}
    if sample["rc"]:
        result["err"] = sample.get("err", "")[-400:]
        (WORK / "cpu-account-failed.json").write_text(json.dumps(document, indent=1))  # why, in full
    return result


def rehearsal(n: int, hold_s: float = HOLD_S) -> dict:
    from clusterctl.sandbox import down, up

    sandbox = up(n, docker=True)
    try:
        state = fresh_dir(WORK / f"cpu-account-{n}-state")
        env = dict(clusterctl_env(state), PYTHONPATH=str(REPO))  # the same clusterctl as the run's
        converged = timed(clusterctl_argv("up", sandbox.inventory_path), env=env, timeout=900)
        if converged["rc"] != 0:
            raise RuntimeError(f"`clusterctl up` on {n} nodes failed: {converged.get('err', '')[-300:]}")
        inventory = bench_inventory(sandbox, hold_s)
        return one_run(inventory, env, Roots(sandbox, inventory=str(inventory)), Path(sandbox.shared_outputs))
    finally:
        down(sandbox.state_dir)


def local(hold_s: float = HOLD_S) -> dict:
    outputs = fresh_dir(WORK / "cpu-account-local")
    inventory = WORK / "cpu-account-local.yml"
    inventory.write_text(yaml.safe_dump({
        "name": f"cpu-account-{os.getpid()}", "hosts": [{"name": "local", "connection": "local"}],
        "rendezvous": {"port": 29631}, "checks": {"ib": "off"},
        "job": {"command": [str(REPO / JOB)], "args": [str(outputs / "bench-ranks" / "{run_id}"), str(hold_s)],
                "nproc_per_node": 2, "outputs": str(outputs)}}, sort_keys=False))
    env = clusterctl_env(fresh_dir(WORK / "cpu-account-local-state"))
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return one_run(inventory, env, Roots(None, str(outputs), str(inventory)), outputs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="clusterctl's CPU during a run, by process kind and node")
    parser.add_argument("--nodes", default="2,8", help="rehearsal sizes ('' for none)")
    parser.add_argument("--local", action="store_true", help="a `connection: local` run too")
    parser.add_argument("--hold", type=float, default=HOLD_S,
                        help="seconds the ranks hold after their barrier (the straggler watch takes its steady pace "
                             "once its window holds 40 samples: ~45 s into the run)")
    parser.add_argument("--reaccount", default="", help="redo the account of kept runs (labels: local,2,8)")
    args = parser.parse_args(argv)
    if args.reaccount:
        results = load()
        for label in args.reaccount.split(","):
            results["cpu_account"][label].update(reaccount(label, results["cpu_account"][label]))
            log(f"cpu account {label} redone: {json.dumps(results['cpu_account'][label]['whole_per_node_minute'])}")
        save(results)
        return 0
    sizes = [int(x) for x in args.nodes.split(",") if x]
    runs = ([("local", lambda: local(args.hold))] if args.local else []) + \
        [(str(n), lambda n=n: rehearsal(n, args.hold)) for n in sizes]
    for label, measure in runs:
        result = dict(measure(), measured=time.strftime("%Y-%m-%d %H:%M"), hold_s=args.hold)
        log(f"cpu account {label}: {json.dumps({k: v for k, v in result.items() if k != 'whole'})}")
        results = load()  # read again: another measurement may have saved meanwhile
        results.setdefault("cpu_account", {})[label] = result
        save(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
