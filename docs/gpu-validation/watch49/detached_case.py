"""Issue 49 on the lent GPU machine, detached: `run --detach` of the inventory run.sh wrote (the DDP tutorial over
NCCL on g0/g1, or whatever LOOP run.sh was given), rank 1 held HOLD (0.6) of each second from outside after
SETTLE s, then `status --json` every 5 s until the run names a straggler (the keepers' rounds, the supervisor's
verdict) or 120 s pass; then `stop`. Prints one JSON document.
Usage: detached_case.py INVENTORY PROMPT SETTLE OUT_JSON"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, "tests")
from fixtures.noisy import DutyCycle, find_rank  # noqa: E402

inventory, prompt, settle, out = sys.argv[1:5]
hold = float(os.environ.get("HOLD", "0.6"))
cluster = next(line.split(": ", 1)[1].strip() for line in open(inventory) if line.startswith("name: "))
cli = [sys.executable, "-m", "clusterctl"]
t0 = time.time()
started = subprocess.run(cli + ["run", "-i", inventory, "--detach", "--json", "--stall-timeout", "0", prompt],
                         capture_output=True, text=True, timeout=300)
run_id = json.loads(started.stdout or "{}").get("run_id")
named, run, cycle, slowed_at = None, {}, None, None
try:
    pid, up = None, time.time()
    while pid is None and time.time() - up < 120:
        pid = find_rank([f"CLUSTERCTL_CLUSTER={cluster}"], 1)
        time.sleep(0.5)
    if pid is None:
        raise SystemExit(f"rank 1 not found; run --detach said: {started.stdout[-500:]} {started.stderr[-1500:]}")
    time.sleep(float(settle))
    slowed_at = time.time() - t0
    cycle = DutyCycle(pid, hold)
    while time.time() - t0 < slowed_at + 120:
        said = subprocess.run(cli + ["status", "-i", inventory, "--json"], capture_output=True, text=True, timeout=120)
        run = next((r for r in json.loads(said.stdout or "{}").get("runs") or () if r.get("run_id") == run_id), {})
        if run.get("stragglers"):
            named = time.time() - t0
            break
        time.sleep(5)
finally:
    if cycle is not None:
        cycle.stop()
    subprocess.run(cli + ["stop", "-i", inventory, run_id or ""], capture_output=True, timeout=120)
doc = {"case": "detached slowed", "hold": hold, "run_id": run_id,
       "slowed_at_s": slowed_at and round(slowed_at, 1),
       "named_at_s": round(named, 1) if named else None, "stragglers": run.get("stragglers"),
       "straggler_problems": run.get("straggler_problems"), "started_stderr": started.stderr[-800:]}
json.dump(doc, open(out, "w"), indent=1)
print(json.dumps(doc, indent=1))
