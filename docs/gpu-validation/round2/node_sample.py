#!/usr/bin/env python3
"""Print the raw output of clusterctl's node stack script (clusterctl/watch/sampler.py) for the ranks of a
run on this machine: what `run`'s stall watch reads, kept whole as a test fixture.
Usage: node_sample.py CLUSTER HOST RUN_ID [SAMPLES] [INTERVAL_S]   (CLUSTER: the inventory's name)"""
import subprocess
import sys

from clusterctl.watch.sampler import sample_command
from clusterctl.models import Host, Inventory

cluster, host, run_id = sys.argv[1:4]
samples = int(sys.argv[4]) if len(sys.argv) > 4 else 2
interval = float(sys.argv[5]) if len(sys.argv) > 5 else 3.0
command = sample_command(Inventory(cluster, (Host(host, "127.0.0.1", connection="local"),)), host, run_id,
                         samples, interval)
done = subprocess.run(list(command.argv), input=command.stdin or b"", capture_output=True, timeout=120)
sys.stdout.write(done.stdout.decode(errors="replace"))
sys.stderr.write(done.stderr.decode(errors="replace"))
