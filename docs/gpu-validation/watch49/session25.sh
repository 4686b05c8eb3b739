#!/bin/bash
# Issue 49, session 25 on `nvidia-h200-x2`: the rule session 24 left checked only by replay (the shares name a rank
# where they do not saturate only if its CPU is at most 93% of its peers', or over 1/0.93, or its GPU has another
# tenant) run for real: the public DDP tutorial's multinode.py (LOOP=ddp, unchanged) with rank 1 held 23% (+30%,
# twice) and 44% (+80%) of every 0.1 s from outside, named within 60 s?; pytorch/examples' FSDP2 example held 23%
# (named as before the rule?); the DDP tutorial left alone 600 s with every judged round logged (nobody named?).
# Every 5 s the epochs each DDP rank has printed are counted (pace.txt), so each slowdown is measured.
# Runs in the background (setsid: it outlasts one device call) and writes $OUT/DONE at the end.
# Usage, from the repository root: OUT=/tmp/s25 PY=... setsid bash docs/gpu-validation/watch49/session25.sh &
set -u
OUT=${OUT:?}; mkdir -p "$OUT"
D=docs/gpu-validation/watch49
bash $D/pace.sh > "$OUT/pace.txt" 2>&1 &
PACER=$!
for step in "ddp slow23a 0.23 100" "ddp slow23b 0.23 100" "ddp slow44 0.44 100" "fsdp2 fsdp2_slow23 0.23 100" \
            "ddp quiet 0 600"; do
  set -- $step
  mkdir -p "$OUT/$2"
  echo "=== $(date +%T) LOOP=$1 case=$2 HOLD=$3 RUN_TIMEOUT=$4" >> "$OUT/progress.txt"
  if [ "$3" = 0 ]; then
    LOOP=$1 CASES=quiet RUN_TIMEOUT=$4 ROUNDS_LOG="$OUT/$2/rounds.jsonl" OUT="$OUT/$2" bash $D/run.sh \
      > "$OUT/$2/driver.txt" 2>&1
  else
    LOOP=$1 CASES=none HOLDS=$3 RUN_TIMEOUT=$4 ROUNDS_LOG="$OUT/$2/rounds.jsonl" OUT="$OUT/$2" bash $D/run.sh \
      > "$OUT/$2/driver.txt" 2>&1
  fi
done
kill $PACER
echo "=== $(date +%T) done" >> "$OUT/progress.txt"; touch "$OUT/DONE"
