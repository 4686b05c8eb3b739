#!/bin/bash
# Issue 49, session 23: a saturated FSDP2 job slowed on one rank's GPU (another process's matmuls there), named from
# who runs on each rank's GPU (nvidia-smi pmon, read by each flight-recorder round: node/collective_waits.py) where
# the shares and the CPU cannot (waits_verdict.judge_gpu). Runs run.sh's FSDP2_SIZE=gpu cases "quiet gpuslowed"
# (RUN_TIMEOUT each), with `nvidia-smi pmon -c 1 -s u` captured every 10 s beside them (pmon.txt: the parser's
# fixtures) and the cost of one pmon read measured alone first (pmon_cost.txt).
# Usage, from the repository root, OUT set:  bash docs/gpu-validation/watch49/gpu_tenants.sh
set -u
OUT=${OUT:?set OUT to an output folder}
PY=${PY:-python3}
$PY - > "$OUT/pmon_cost.txt" 2>&1 <<'PYEOF'
import resource, subprocess, time
walls = []
for _ in range(5):
    t = time.monotonic()
    subprocess.run(["nvidia-smi", "pmon", "-c", "1", "-s", "u"], stdout=subprocess.DEVNULL)
    walls.append(time.monotonic() - t)
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"5 reads: wall {min(walls):.2f}-{max(walls):.2f} s each, CPU {(used.ru_utime + used.ru_stime) / 5 * 1000:.0f} ms each")
PYEOF
cat "$OUT/pmon_cost.txt"
( while :; do echo "=== $(date +%s.%N)"; nvidia-smi pmon -c 1 -s u; sleep 10; done ) > "$OUT/pmon.txt" 2>&1 &
SAMPLER=$!
LOOP=fsdp2 FSDP2_SIZE=gpu CASES="${CASES:-quiet gpuslowed}" RUN_TIMEOUT=${RUN_TIMEOUT:-120} \
  bash docs/gpu-validation/watch49/run.sh
kill $SAMPLER
