#!/bin/bash
# Issue 49's accuracy bench (bench/stragglers.py) on a lent GPU machine's CPUs: a quiet 16-core node instead of
# this project's loaded 2-core machine. Each KIND runs as its own bench process, side by side (separate ports,
# cluster names and state dirs). Usage from the repository root, OUT set, wheels in .whl/:
#   RUNS="ddp:slowed,frozen fsdp2:healthy,cost fsdp2:slowed:0.23" bash docs/gpu-validation/watch49/bench_on_device.sh
# (kind:parts[:shares]; a kind's results go to stragglers_<kind>[_n].json, one file per entry)
set -u
PY=${PY:-python3}
OUT=${OUT:?set OUT to an output folder}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$(pwd):/tmp/site PATH=/tmp/site/bin:$PATH
{ nproc; uptime; $PY -c "import torch; print('torch', torch.__version__)"; $PY -c "import deepspeed; print('deepspeed', deepspeed.__version__)" 2>&1 | tail -1; } > "$OUT/machine.txt"
n=0
for run in ${RUNS:-ddp:slowed,frozen fsdp2:slowed,frozen}; do
  IFS=: read -r kind parts shares <<< "$run"; n=$((n + 1))
  $PY bench/stragglers.py --kinds "$kind" --parts "$parts" --shares "${shares:-0.23,0.44}" \
    --out "$OUT/stragglers_${kind}_$n.json" > /dev/null 2> "$OUT/stragglers_${kind}_$n.stderr.txt" &
done
wait
uptime >> "$OUT/machine.txt"
ps -eo pid,stat,etime,args | grep -E "torchrun|ddp_plain|ds_plain|py-spy" | grep -v grep >> "$OUT/leftovers.txt"
true
