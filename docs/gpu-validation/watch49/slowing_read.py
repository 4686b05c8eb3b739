"""Issue 49, session 25: what a flight-recorder round reads of a live run's GPUs slowing themselves, on a real node.
Waits for the first run dir under /tmp/watch49-ddp holding the metrics sampler's metrics.jsonl, then every 10 s
(6 times) prints each GPU's throttle reasons in the sampler's latest line and what collective_waits.gpus_slowing
makes of them (the protective ones only). Usage: python slowing_read.py (beside a run of run.sh)."""
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
from clusterctl.node.collective_waits import gpus_slowing  # noqa: E402
from clusterctl.node.safe_files import Dir  # noqa: E402

deadline = time.time() + 120
files = []
while not files and time.time() < deadline:
    files = sorted(glob.glob("/tmp/watch49-ddp/outputs-*/logs/*/g*/metrics.jsonl"))
    time.sleep(1)
for _ in range(6):
    time.sleep(10)
    for path in files:
        last = open(path).read().splitlines()[-1]
        line = json.loads(last)
        with Dir.open(os.path.dirname(path)) as d:
            print(path.split("/")[-2], "age %.1f s" % (time.time() - line["t"]),
                  [(g["index"], g["throttle"], g["util_pct"], g["sm_clock_mhz"]) for g in line["gpus"]],
                  "-> gpus_slowing", gpus_slowing(d), flush=True)
