#!/bin/bash
# Issue 38 on a lent 4-GPU machine: `job.launcher: deepspeed` through `clusterctl run`, two
# `connection: local` hosts with two GPUs each (g0: 0,1; g1: 2,3), DeepSpeed 0.19.8 ZeRO-1 over NCCL.
# 1. the job runs to the end: each rank's view (RANK/WORLD_SIZE/CUDA_VISIBLE_DEVICES) from its log;
# 2. rank 3 (g1) raises at step 10: clusterctl must name g1 rank 3 and its error, stop g0, leave nothing.
# DeepSpeed and its needs come from .whl/deepspeed (built from the sdist, no ops), installed into the
# Python that has the machine's torch. Usage, from the repository root, OUT set:  bash docs/gpu-validation/launchers/run.sh
set -u
PY=${PY:-python3}
OUT=${OUT:?set OUT to an output folder}
R=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 COLUMNS=200
$PY -c 'import deepspeed' 2>/dev/null || $PY -m pip install -q --no-index \
  --find-links .whl/deepspeed deepspeed > "$OUT/pip.log" 2>&1   # the machine's torch stays: pip sees it installed
$PY -c 'import paramiko, docker, rich, yaml, prometheus_client' 2>/dev/null || \
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$R:/tmp/site PATH=/tmp/site/bin:$PATH
VPY=$PY
W=/tmp/ds38; rm -rf "$W"; mkdir -p "$W"; echo go > "$W/prompt.txt"
NOLS='NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1"'
inventory() {  # inventory FILE EXTRA_ENV
  cat > "$1" <<YAML
name: ds38
hosts:
  - {name: g0, connection: local, gpus: [0, 1], slots: 2}
  - {name: g1, connection: local, gpus: [2, 3], slots: 2}
rendezvous: {port: 29740}
job:
  launcher: deepspeed
  command: [docs/gpu-validation/launchers/ds_job.py]
  nproc_per_node: 2
  python: $VPY
  outputs: $W/outputs
  env: {$NOLS$2}
checks: {ib: off, shm_min: 256m, disk_min: 1g}
YAML
}
inventory "$W/ok.yaml" ""; inventory "$W/fail.yaml" ', DS_FAIL_RANK: "3"'
{
  echo "=== machine"; nvidia-smi -L; $VPY -c 'import torch, deepspeed; print(torch.__version__, torch.version.cuda, deepspeed.__version__)'
  start=$SECONDS
  timeout 400 $VPY -m clusterctl run -i "$W/ok.yaml" --no-straggler-watch "$W/prompt.txt" --json > "$OUT/run_ok.json" 2> "$OUT/run_ok.err"
  echo "ok run: exit $? in $((SECONDS - start)) s"
  grep -h "CUDA_VISIBLE_DEVICES=" "$W"/outputs/logs/*/*/*_deepspeed/attempt_0/*/stdout.log | sort
  timeout 400 $VPY -m clusterctl run -i "$W/fail.yaml" --no-straggler-watch "$W/prompt.txt" --json > "$OUT/run_fail.json" 2> "$OUT/run_fail.err"
  echo "failing run: exit $?"
  $VPY -c "import json; d=json.load(open('$OUT/run_fail.json')); print(json.dumps({k: d.get(k) for k in ('ok', 'exit_code', 'first_failure', 'diagnosis', 'nodes')}, indent=1)[:3000])"
  grep -E "rank3|gives up" "$OUT/run_fail.err" | head -8
  echo "=== left behind (expect nothing)"; pgrep -af "deepspeed.launcher|ds_job.py" || echo none
} > "$OUT/session.log" 2>&1
cat "$OUT/session.log"
