#!/bin/bash
# Issue 49, session 24 on `nvidia-h200-x2`: the public DDP tutorial's multinode.py over NCCL (run.sh's LOOP=ddp,
# unchanged, one GPU per `connection: local` host) in the cells section 6b of docs/benchmarks.md left empty: rank 1
# held 23% (+30%) and 44% (+80%) of every 0.1 s from outside, named within 60 s?; rank 1's GPU shared with another
# process's matmuls (gpu_neighbour.py at full duty; the tutorial's model is small, its CPU sets the pace): named, and
# how much slower did it get?; left alone 600 s: nobody named? Every 5 s the epochs each rank has printed so far are
# counted (pace.txt: "epoch_lines <unix time> <log> <count>"), so each case's slowdown is measured, not assumed.
# Runs in the background (setsid: it outlasts one device call) and writes $OUT/DONE at the end.
# Usage, from the repository root: OUT=/tmp/s24 PY=... setsid bash docs/gpu-validation/watch49/session24.sh &
set -u
OUT=${OUT:?}; mkdir -p "$OUT"
D=docs/gpu-validation/watch49
bash $D/pace.sh > "$OUT/pace.txt" 2>&1 &
PACER=$!
for step in "slowed 0.23 100 1" "slowed 0.44 100 1" "gpuslowed 0.6 100 1" "quiet 0.6 600 1"; do
  set -- $step
  name=$1; [ "$1" = slowed ] && name="slow${2#0.}"
  mkdir -p "$OUT/$name"
  echo "=== $(date +%T) CASES=$1 HOLD=$2 RUN_TIMEOUT=$3" >> "$OUT/progress.txt"
  if [ "$1" = slowed ]; then
    LOOP=ddp CASES=none HOLDS=$2 RUN_TIMEOUT=$3 OUT="$OUT/$name" bash $D/run.sh > "$OUT/$name/driver.txt" 2>&1
  else
    LOOP=ddp CASES=$1 HOLD=$2 RUN_TIMEOUT=$3 NEIGHBOUR_DUTY=$4 OUT="$OUT/$name" bash $D/run.sh > "$OUT/$name/driver.txt" 2>&1
  fi
done
kill $PACER
echo "=== $(date +%T) done" >> "$OUT/progress.txt"; touch "$OUT/DONE"
