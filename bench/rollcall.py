"""The roll call's cost: one stack of every rank (watch/sampler.py + watch/rollcall.py), per node and per rank.

Issue 19's goals: 16 nodes x 2 ranks in <= 3 s on the rehearsal cluster, 32 nodes x 8 ranks in <= 5 s
(extrapolated). The stall check in `run` takes two such samples 3 s apart (the 3 s are a wait, not
a cost); `clusterctl stacks` takes one.

Two modes:

  python bench/rollcall.py --local [--nodes 1,4,8,16] [--ranks 1,2,4,8] [--reps 5]
      Fake ranks on this machine: for each (nodes, ranks) cell, nodes x ranks Python processes that
      sleep in a named function, each carrying the marker environment of its "node" (CLUSTERCTL_*,
      RANK, LOCAL_RANK); an inventory of that many `connection: local` hosts; the roll call timed
      end to end through the same code as `clusterctl stacks` (the script, py-spy shipped on stdin,
      parsing, grouping). All "nodes" share this machine's CPUs, so per-node costs here are an upper
      bound: on a cluster each node's script runs on its own machine. A least-squares fit of
      wall = a + b * nodes + c * ranks (see `fit`) gives the extrapolation to 32 x 8.

  python bench/rollcall.py --inventory INV --run RUN_ID [--reps 5]
      Against a run that goes on (e.g. `clusterctl sandbox up 16 --docker`, `clusterctl up`, then
      `clusterctl run --stall-timeout 0` of tests/fixtures/jobs/stall.py --mode hang, in the background):
      the same roll call over SSH, each node's own duration reported too (the slowest node bounds it).

Prints one JSON document: every sample, the medians, the fit and the verdicts against the goals.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clusterctl.executor import Connections, for_each_host  # noqa: E402
from clusterctl.watch import rollcall, sampler  # noqa: E402
from clusterctl.models import Host, Inventory  # noqa: E402
from clusterctl.transport import connect  # noqa: E402

FAKE_RANK = """
import time
def wait_in_collective():
    time.sleep(3600)
wait_in_collective()
"""
CLUSTER, RUN_ID = "bench-rollcall", "bench-rollcall-run"


def one_roll_call(inventory: Inventory, hosts: list, run_id: str, connections: Connections) -> dict:
    started = time.monotonic()
    results = for_each_host(hosts, sampler.sample_action(inventory, run_id, samples=1), connections)
    nodes = sampler.node_stacks(results)
    ranks = [r for n in nodes.values() for sample in n.samples for r in sample]
    call = rollcall.roll_call(ranks)
    wall = time.monotonic() - started
    return {"wall": round(wall, 4), "ranks_read": sum(1 for r in ranks if r.frames), "groups": len(call.groups),
            "slowest_node": round(max((r.duration for r in results.values()), default=0.0), 4),
            "problems": sorted({n.problem for n in nodes.values() if n.problem})}


def local_cell(nodes: int, ranks: int, reps: int) -> dict:
    script = Path(tempfile.mkdtemp(prefix="bench-rollcall-")) / "fake_rank.py"
    script.write_text(FAKE_RANK)
    procs = []
    try:
        for n in range(1, nodes + 1):
            for local in range(ranks):
                env = {**os.environ, "CLUSTERCTL_CLUSTER": CLUSTER, "CLUSTERCTL_HOST": f"node{n}",
                       "CLUSTERCTL_RUN_ID": RUN_ID, "RANK": str((n - 1) * ranks + local), "LOCAL_RANK": str(local)}
                procs.append(subprocess.Popen([sys.executable, str(script)], env=env))
        time.sleep(1.0 + 0.02 * len(procs))  # every fake rank inside wait_in_collective
        hosts = tuple(Host(f"node{n}", "127.0.0.1", connection="local") for n in range(1, nodes + 1))
        inventory = Inventory(CLUSTER, hosts)
        connections = Connections(connect)
        sampler.payload()  # gzipped once per process, as in clusterctl: not part of a roll call
        samples = [one_roll_call(inventory, list(hosts), RUN_ID, connections) for _ in range(reps)]
        connections.close()
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
        shutil.rmtree(script.parent, ignore_errors=True)
    return {"nodes": nodes, "ranks_per_node": ranks, "samples": samples,
            "median_wall": statistics.median(s["wall"] for s in samples)}


def fit(cells: list[dict]) -> dict:
    """wall = a + b * nodes + c * (nodes * ranks_per_node), least squares (normal equations, 3 x 3).

    Here every "node" shares this machine's CPUs, so every rank's py-spy costs everyone: c multiplies
    the total number of ranks. On a cluster each node samples its own ranks on its own CPUs, in
    parallel with the other nodes: there c multiplies the ranks of one node (`cluster_32x8_s`, an upper
    bound, since b here also holds each node's own script, which a cluster runs in parallel)."""
    rows = [(1.0, c["nodes"], c["nodes"] * c["ranks_per_node"], c["median_wall"]) for c in cells]
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    atb = [sum(r[i] * r[3] for r in rows) for i in range(3)]
    a, b, c = _solve(ata, atb)
    return {"a_s": round(a, 4), "per_node_s": round(b, 4), "per_rank_s": round(c, 4),
            "here_16x2_s": round(a + 16 * b + 32 * c, 3), "here_32x8_s": round(a + 32 * b + 256 * c, 3),
            "cluster_16x2_s": round(a + 16 * b + 2 * c, 3), "cluster_32x8_s": round(a + 32 * b + 8 * c, 3)}


def _solve(m: list[list[float]], v: list[float]) -> list[float]:
    m = [row[:] + [x] for row, x in zip(m, v)]
    for i in range(3):
        pivot = max(range(i, 3), key=lambda r: abs(m[r][i]))
        m[i], m[pivot] = m[pivot], m[i]
        for r in range(3):
            if r != i and m[i][i]:
                factor = m[r][i] / m[i][i]
                m[r] = [x - factor * y for x, y in zip(m[r], m[i])]
    return [m[i][3] / m[i][i] if m[i][i] else 0.0 for i in range(3)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local", action="store_true")
    parser.add_argument("--nodes", default="1,4,8,16")
    parser.add_argument("--ranks", default="1,2,4,8")
    parser.add_argument("--inventory")
    parser.add_argument("--run")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    if args.local:
        cells = [local_cell(n, r, args.reps) for n in map(int, args.nodes.split(","))
                 for r in map(int, args.ranks.split(","))]
        model = fit(cells)
        measured = {(c["nodes"], c["ranks_per_node"]): c["median_wall"] for c in cells}
        document = {"mode": "local", "cpus": os.cpu_count(), "cells": cells, "fit": model,
                    "goal_16x2_le_3s": measured.get((16, 2), model["here_16x2_s"]) <= 3.0,
                    "goal_32x8_le_5s": model["cluster_32x8_s"] <= 5.0}
    else:
        from clusterctl.inventory.load import load_inventory

        inventory = load_inventory(Path(args.inventory))
        connections = Connections(connect)
        hosts = list(inventory.hosts)
        samples = [one_roll_call(inventory, hosts, args.run, connections) for _ in range(args.reps)]
        connections.close()
        document = {"mode": "inventory", "nodes": len(hosts), "samples": samples,
                    "median_wall": statistics.median(s["wall"] for s in samples),
                    "median_slowest_node": statistics.median(s["slowest_node"] for s in samples)}
    json.dump(document, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
