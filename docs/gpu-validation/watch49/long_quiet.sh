#!/bin/bash
# Issue 49, session 22 on `nvidia-h200-x2`: what session 21 left. Runs in the background (setsid) because it outlasts
# one device call; writes $OUT/DONE at the end. In order: FSDP2 rank 1 held 23% DETACHED (the keepers' rounds carry
# each rank's CPU time; the supervisor's CPU rule), FSDP2 left alone 600 s under the CPU rule (attached), DeepSpeed
# ZeRO-2 (Trainer) left alone 600 s. cpu_sample.py reads every rank's CPU time beside them all.
# Usage: OUT=/tmp/s22 PY=... setsid bash docs/gpu-validation/watch49/long_quiet.sh &
set -u
OUT=${OUT:?}; mkdir -p "$OUT"
D=docs/gpu-validation/watch49
${PY:-python3} $D/cpu_sample.py "$OUT/cpu_readings.txt" 5 & SAMPLER=$!
for step in "fsdp2 detached 0.23 100" "fsdp2 quiet 0.6 600" "deepspeed quiet 0.6 600"; do
  set -- $step
  mkdir -p "$OUT/$1-$2"
  echo "=== $(date +%T) LOOP=$1 CASES=$2 HOLD=$3 RUN_TIMEOUT=$4" >> "$OUT/progress.txt"
  LOOP=$1 CASES=$2 HOLD=$3 RUN_TIMEOUT=$4 OUT="$OUT/$1-$2" bash $D/run.sh > "$OUT/$1-$2/driver.txt" 2>&1
done
kill $SAMPLER
echo "=== $(date +%T) done" >> "$OUT/progress.txt"; touch "$OUT/DONE"
