"""Each rank's CPU time, every few seconds, from /proc (issue 49: is a rank held from outside the one its peers'
CPU outruns?). Usage: python cpu_sample.py OUTFILE [PERIOD_S]; runs until killed. One line per rank per sample:
time, pid, RANK (its environ), cluster, state, utime+stime in clock ticks."""
import os
import sys
import time

out, period = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
with open(out, "a") as f:
    while True:
        now = time.time()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                env = dict(item.split("=", 1) for item in open(f"/proc/{pid}/environ", "rb").read().decode(
                    errors="replace").split("\0") if "=" in item)
                if "LOCAL_RANK" not in env or "CLUSTERCTL_CLUSTER" not in env:
                    continue
                fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                print(f"{now:.2f} {pid} {env.get('RANK')} {env['CLUSTERCTL_CLUSTER']} {fields[0]} "
                      f"{int(fields[11]) + int(fields[12])}", file=f, flush=True)
            except (OSError, ValueError):
                continue
        time.sleep(period)
