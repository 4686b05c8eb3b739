#!/bin/bash
# Issue 49, session 26 on `nvidia-h200-x4` (lent for the first time): the watch over more than 2 NCCL ranks, as a
# 2-node job is shaped: two `connection: local` hosts of two GPUs and two ranks each (run.sh SHAPE=2x2), every job
# unchanged. The DDP tutorial's multinode.py with one rank held 23% (+30%) and 44% (+80%) of every 0.1 s from
# outside (named within 60 s?) and frozen for good (named with host and rank within the stall timeout + 15 s?);
# pytorch/examples' FSDP2 example and the DeepSpeed ZeRO-2 Trainer held 23%; the DDP tutorial left alone 600 s with
# every judged round logged (nobody named among 4?). The held rank varies (a node's first or second rank).
# Runs in the background (setsid: it outlasts one device call) and writes $OUT/DONE at the end.
# Usage, from the repository root: OUT=/tmp/s26 PY=... setsid bash docs/gpu-validation/watch49/session26.sh &
set -u
OUT=${OUT:?}; mkdir -p "$OUT"
D=docs/gpu-validation/watch49
bash $D/pace.sh > "$OUT/pace.txt" 2>&1 &
PACER=$!
for step in ${STEPS:-"ddp:slow23:0.23:100:2" "ddp:frozen:f:100:3" "fsdp2:fsdp2_slow23:0.23:100:3" \
            "deepspeed:ds_slow23:0.23:130:2" "ddp:slow44:0.44:100:1" "ddp:quiet:0:600:0"}; do
  IFS=: read -r loop name hold timeout rank <<< "$step"
  mkdir -p "$OUT/$name"
  echo "=== $(date +%T) LOOP=$loop case=$name HOLD=$hold RUN_TIMEOUT=$timeout HELD_RANK=$rank" >> "$OUT/progress.txt"
  cases="CASES=none HOLDS=$hold"
  [ "$hold" = 0 ] && cases="CASES=quiet HOLDS="
  [ "$hold" = f ] && cases="CASES=frozen HOLDS="
  env SHAPE=2x2 LOOP=$loop $cases HELD_RANK=$rank RUN_TIMEOUT=$timeout ROUNDS_LOG="$OUT/$name/rounds.jsonl" \
    OUT="$OUT/$name" bash $D/run.sh > "$OUT/$name/driver.txt" 2>&1
done
kill $PACER
echo "=== $(date +%T) done" >> "$OUT/progress.txt"; touch "$OUT/DONE"
