#!/bin/bash
# Issue 41 on a lent GPU machine: what the node-side metrics sampler reads, captured under load as
# fixtures (idle, then while every GPU runs matmuls), and what one `nvidia-smi --query-gpu` call costs
# (wall and CPU time). Usage, from the repository root, OUT set:  bash docs/gpu-validation/metrics/capture.sh
set -u
PY=${PY:-python3}
OUT=${OUT:?set OUT to an output folder}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
Q=index,uuid,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,clocks.sm,clocks_throttle_reasons.active,ecc.errors.uncorrected.volatile.total
nvidia-smi --query-gpu=$Q --format=csv,noheader,nounits > "$OUT/query_idle.csv" 2>&1
nvidia-smi --query-gpu=$Q --format=csv > "$OUT/query_idle_header.csv" 2>&1
$PY - <<'PYEOF' &
import time, torch
xs = [torch.randn(8192, 8192, device=f"cuda:{i}") for i in range(torch.cuda.device_count())]
end = time.time() + 25
while time.time() < end:
    for x in xs:
        x @ x
PYEOF
load=$!
sleep 8
for i in $(seq 1 10); do
  TIMEFORMAT="%R %U %S"
  { time nvidia-smi --query-gpu=$Q --format=csv,noheader,nounits > "$OUT/query_load_$i.csv" 2>&1 ; } 2>> "$OUT/query_cost.txt"
  sleep 1
done
wait $load
head -c 2000 /proc/stat > "$OUT/proc_stat.txt"; cat /proc/meminfo > "$OUT/proc_meminfo.txt"; cat /proc/net/dev > "$OUT/proc_net_dev.txt"
nvidia-smi --version > "$OUT/versions.txt" 2>&1; nvidia-smi -L >> "$OUT/versions.txt"
echo "wall user sys (s) per nvidia-smi --query-gpu call under load:"; cat "$OUT/query_cost.txt"
cat "$OUT/query_load_5.csv"
