#!/bin/bash
# Every 5 s, how many epochs each DDP-tutorial rank has printed so far ("epoch_lines <unix time> <log> <count>"), so a
# case's slowdown is measured, not assumed. Runs until killed. Usage: bash pace.sh > "$OUT/pace.txt" &
while :; do
  for log in $(find /tmp/watch49-ddp -name stdout.log 2>/dev/null); do
    echo "epoch_lines $(date +%s.%N) $log $(grep -c 'Epoch' "$log")"
  done
  sleep 5
done
