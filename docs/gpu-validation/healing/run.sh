#!/bin/bash
# Issue 35 on a lent 4-GPU machine: four `connection: local` hosts, one GPU each; the job on three
# (job.nodes: 3), g3 the spare. Once the job has saved step 20, every process of g1's rank is killed
# (SIGKILL, as a node that loses its GPU or its kernel's OOM killer would): clusterctl must leave g1
# out, relaunch on g0, g2, g3 as attempt 1, and the job resume from its last complete checkpoint.
# Usage, from the repository root, OUT set to an empty folder, wheels in .whl/ (paramiko, docker, rich,
# PyYAML and their needs, for a python3 that lacks them):  bash docs/gpu-validation/healing/run.sh
set -u
PY=${PY:-python3}
OUT=${OUT:?set OUT to an output folder}
R=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 COLUMNS=200
$PY -c 'import paramiko, docker, rich, yaml' 2>/dev/null || \
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$R:/tmp/site PATH=/tmp/site/bin:$PATH
W=${W:-/tmp/heal35}; rm -rf "$W"; mkdir -p "$W/ckpt"; echo heal > "$W/prompt.txt"
G=${GPUS:-0 1 2 3}; set -- $G
gpus() { [ "$G" = cpu ] && echo ", gpus: none" || echo ", gpus: [$1]"; }   # GPUS=cpu rehearses it on a CPU machine
NOLS='NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1"'
cat > "$W/heal.yaml" <<YAML
name: heal35
hosts:
  - {name: g0, connection: local$(gpus ${1:-}), slots: 1}
  - {name: g1, connection: local$(gpus ${2:-}), slots: 1}
  - {name: g2, connection: local$(gpus ${3:-}), slots: 1}
  - {name: g3, connection: local$(gpus ${4:-}), slots: 1}
rendezvous: {port: 29710}
job:
  command: [docs/gpu-validation/healing/heal_job.py]
  nproc_per_node: 1
  nodes: 3
  restarts: 1
  checkpoint: {dir: $W/ckpt, complete: COMPLETE}
  python: $PY
  outputs: $W/outputs
  env: {$NOLS, HEAL_CKPT_DIR: $W/ckpt, HEAL_STEPS: "${STEPS:-80}", HEAL_SAVE_EVERY: "10"}
checks: {ib: off, shm_min: 64m, disk_min: 1g}
YAML
# the killer: once step 20 is saved, SIGKILL every process marked as g1's rank (modules/process.py's marker)
killer() {
  until [ -e "$W/ckpt/step-20/COMPLETE" ]; do sleep 0.2; done; sleep 1
  for p in $(grep -lz '^CLUSTERCTL_HOST=g1$' /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3); do
    tr '\0' '\n' </proc/$p/environ | grep -q '^RANK=' && { echo "killing pid $p (g1's rank) at $(date +%s.%N)"; kill -9 "$p"; }
  done
}
{
  echo "=== machine"; nvidia-smi -L 2>/dev/null; $PY -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count())'
  killer & k=$!
  t0=$(date +%s.%N); echo "run started $t0"
  timeout 500 $PY -m clusterctl run -i "$W/heal.yaml" --timeout 400 "$W/prompt.txt" --json >"$OUT/run.json" 2>"$OUT/run.stderr.txt"; code=$?
  t1=$(date +%s.%N); echo "run returned $t1 exit $code after $($PY -c "print(round($t1 - $t0, 1))") s"
  kill $k 2>/dev/null
  $PY - "$OUT/run.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
print("exit_code", d.get("exit_code"), "state", d.get("state"))
for a in d.get("attempts", []):
    print(json.dumps({k: a.get(k) for k in ("attempt", "hosts", "exit_code", "excluded", "relaunch_s", "checkpoint")}))
    f = a.get("first_failure") or {}
    if f:
        print("  first_failure", json.dumps({k: f.get(k) for k in ("host", "rank", "named_by", "signal", "cause")}))
PYEOF
  echo "=== the job's own lines"; grep -hE 'resuming|done at|killing' "$OUT/run.stderr.txt" "$W"/outputs -r 2>/dev/null | sort -u | head -20
  echo "=== left over"; ps -eo pid,cmd | grep -E 'heal_job|torch.distributed' | grep -v grep || echo none
  tail -n 30 "$OUT/run.stderr.txt"
} 2>&1 | tee "$OUT/session.log"
