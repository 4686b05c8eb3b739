"""What one round of the straggler watch costs a node, in CPU seconds (issue 52): the node script of
watch/sampler.py (`sample_command`, non-blocking, as watch/straggler_watch.py runs it) on this machine,
against RANKS Python processes that carry a run's marker and a RANK (a busy loop that sleeps half of every
0.1 s: each sample finds some ranks running, some asleep; `--asleep`: ranks in one long sleep, a job
holding between steps). The CPU is the script's and everything it starts
(getrusage of the children), over SAMPLES samples INTERVAL_S apart; the py-spy is the wheel's, kept in a
directory of the round's own (as a run's later rounds run it), with what the node keeps there between rounds
and the dumps the controller holds. No ssh, no container: the script alone.

    python bench/straggler_round.py [--ranks 2] [--samples 15] [--interval 1] [--rounds 2]

With CLUSTERCTL_SRC=DIR the clusterctl package of DIR is measured (a checkout of an older commit: the
before of docs/benchmarks.md section 4a').
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.environ.get("CLUSTERCTL_SRC") or str(Path(__file__).resolve().parents[1]))

from clusterctl.watch import sampler  # noqa: E402

ASLEEP = "import time; time.sleep(3600)"
RANK = r"""
import time
while True:
    end = time.monotonic() + 0.05
    while time.monotonic() < end:
        pass
    time.sleep(0.05)
"""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--asleep", action="store_true", help="ranks asleep all along (a job between steps)")
    args = parser.parse_args()
    inventory = argparse.Namespace(name="bench-round")  # the script on the host: only the inventory's name is read
    run_id = f"round-{os.getpid()}"
    marker = {"CLUSTERCTL_CLUSTER": "bench-round", "CLUSTERCTL_HOST": "local", "CLUSTERCTL_RUN_ID": run_id}
    ranks = [subprocess.Popen([sys.executable, "-c", ASLEEP if args.asleep else RANK], env={**os.environ, **marker, "RANK": str(r),
                                                                                          "LOCAL_WORLD_SIZE": str(args.ranks)})
             for r in range(args.ranks)]
    keep = f"clusterctl-bench-round.{os.getpid()}"
    results, dumps = [], {}
    try:
        time.sleep(1.0)
        for index in range(args.rounds + 1):  # the first round ships py-spy and keeps it: not counted
            extra = {"known": dumps} if "known" in sampler.sample_command.__code__.co_varnames else {}
            command = sampler.sample_command(inventory, "local", run_id, args.samples, args.interval, nonblocking=True,
                                             keep=keep, ship=index == 0, **extra)
            before, started = children_cpu(), time.monotonic()
            done = subprocess.run(list(command.argv), input=command.stdin, capture_output=True, timeout=command.timeout)
            cpu, wall = children_cpu() - before, time.monotonic() - started
            node = sampler.parse_node_output(done.stdout.decode(errors="replace"), "local", *([dumps] if extra else []))
            dumps = getattr(node, "dumps", {})  # what the controller holds for the next round (watch/pyspy_kept.py)
            read = sum(1 for sample in node.samples for rank in sample if rank.frames)
            if index:
                results.append({"cpu_s": round(cpu, 4), "wall_s": round(wall, 2), "samples": len(node.samples),
                                "rank_samples_read": read, "problem": node.problem,
                                "cpu_ms_per_rank_sample": round(1000 * cpu / max(1, args.ranks * args.samples), 2),
                                "share_of_a_core": round(cpu / wall, 4)})
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()
        subprocess.run(["sh", "-c", f'rm -rf "${{TMPDIR:-/tmp}}/{keep}" /var/tmp/{keep} /dev/shm/{keep}'])
    print(json.dumps({"ranks": args.ranks, "asleep": args.asleep, "samples": args.samples, "interval_s": args.interval,
                      "source": os.environ.get("CLUSTERCTL_SRC") or "this checkout", "rounds": results}, indent=1))


if __name__ == "__main__":
    main()
