#!/bin/bash
# Issue 39 on a lent 4-GPU machine: rank 2 of 4 stalls before an all_reduce, init_process_group(timeout=30 s) fires
# the NCCL watchdog on the other ranks; `clusterctl run` (stall watch off) must name rank 2 in its own first failure
# (the flight-recorder dumps read off the node before it reports), and the timeline says where the time after the
# 30 s timeout goes.
# Usage, from the repository root, OUT set to an empty folder, wheels in .whl/ (paramiko, docker, rich, PyYAML,
# py-spy and their needs, for a python3 that lacks them):  bash docs/gpu-validation/capture_round3.sh
set -u
PY=${PY:-python3}
OUT=${OUT:?set OUT to an output folder}
R=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 COLUMNS=200
$PY -c 'import paramiko, docker, rich, yaml' 2>/dev/null || \
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$R:/tmp/site PATH=/tmp/site/bin:$PATH
W=/tmp/r3; mkdir -p "$W"; echo stall > "$W/prompt.txt"
NOLS='NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1"'
cat > "$W/timeout.yaml" <<YAML
name: r3-timeout
hosts:
  - {name: gpus01, connection: local, gpus: ${GPUS:-[0, 1, 2, 3]}, slots: 4}
rendezvous: {port: 29700}
job:
  command: [docs/gpu-validation/round2/hang_job.py]
  nproc_per_node: auto
  python: $PY
  outputs: $W/outputs
  env: {$NOLS, HANG_RANK: "2", HANG_WAIT: sync, HANG_NCCL_TIMEOUT_S: "30"}
checks: {ib: off, shm_min: 256m, disk_min: 1g}
YAML
{
  echo "=== machine"; nvidia-smi -L; $PY -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())'
  env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)='
  echo "=== run: rank 2 stalls, NCCL timeout 30 s, --stall-timeout 0"
  t0=$(date +%s.%N); echo "run started $t0"
  timeout 400 $PY -m clusterctl run -i "$W/timeout.yaml" --stall-timeout 0 --timeout 300 "$W/prompt.txt" --json \
    >"$OUT/run.json" 2>"$OUT/run.stderr.txt"; code=$?
  t1=$(date +%s.%N); echo "run returned $t1 exit $code after $($PY -c "print(round($t1 - $t0, 1))") s"
  $PY -c "import json; d=json.load(open('$OUT/run.json')); f=d.get('first_failure') or {}; print(json.dumps({k: f.get(k) for k in ('host','rank','named_by','exit_code','rank_exit_code','signal')})); print(json.dumps((f.get('diagnosis') or [{}])[0], indent=1)[:1500]); print('phases', d.get('phases'))"
  run=$(ls -t .clusterctl/runs | head -1)
  log=$(find "$W/outputs/logs/$run" -name agent.log | head -1)
  echo "=== the timeline (agent.log lines with a timestamp, and the files' times)"
  grep -nE '^[EWI][0-9]{4} |Watchdog|closing signal|Sending process|failed \(exitcode|dump|Dump|flight' "$log" | cut -c1-260 | head -60
  for f in $(dirname "$log")/nccl_trace_rank_* $(dirname "$log")/agent.exit; do stat -c '%y %n' "$f"; done 2>/dev/null
  cp "$log" "$OUT/agent.log" 2>/dev/null
  tail -n 40 "$OUT/run.stderr.txt"
} 2>&1 | tee "$OUT/session.log"
