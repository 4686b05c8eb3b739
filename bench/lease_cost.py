"""What the GPU leases (issue 48) add to a run: the node program's cost per call, and what renews them.

  python3 bench/lease_cost.py [--reps 20] [--keys 8]

Runs node/leases.py as a node runs it (`python3 - OP JSON`, the script on stdin, as plan/leasing.py sends
it) on this machine against a scratch outputs directory: a run's `take` (all of a node's keys), `list`
(`status`), `live` (`up`'s cleanup) and `release`; wall time per call (median, max), the bytes each call
sends. Renewal adds nothing while the run goes on: a lease lives on the run's own `lease` file, which the
controller's poll (attached) or the keeper (detached) already rewrites; this prints the number of processes
the renewal starts per second (0) beside the calls. Over SSH each call is one more command in a round trip
the run makes anyway (its facts), plus the SSH channel. Prints one JSON document.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time

from clusterctl.plan import leasing


def _call(script: bytes, op: str, **args) -> float:
    started = time.perf_counter()
    done = subprocess.run(["python3", "-", op, json.dumps(args)], input=script, capture_output=True, check=True)
    took = time.perf_counter() - started
    assert json.loads(done.stdout)["ok"], done.stdout
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--keys", type=int, default=8, help="GPUs of the node")
    args = parser.parse_args()
    script = leasing.script()
    keys = [f"gpu{i}" for i in range(args.keys)]
    times: dict[str, list[float]] = {"take": [], "list": [], "live": [], "release": []}
    with tempfile.TemporaryDirectory() as outputs:
        common = {"outputs": outputs, "host": "node1"}
        for rep in range(args.reps):
            run_id = f"bench-{rep}"
            times["take"].append(_call(script, "take", **common, run_id=run_id, operator="bench@ctl", keys=keys,
                                       window_s=22.0))
            times["list"].append(_call(script, "list", **common))
            times["live"].append(_call(script, "live", **common, run_ids=[run_id], window_s=22.0))
            times["release"].append(_call(script, "release", **common, run_id=run_id))
    print(json.dumps({
        "script_bytes": len(script), "keys": args.keys, "reps": args.reps,
        "per_call_s": {op: {"median": round(statistics.median(t), 4), "max": round(max(t), 4)}
                       for op, t in times.items()},
        "renewal_processes_per_s": 0,
    }, indent=2))


if __name__ == "__main__":
    main()
