#!/bin/bash
# Issue 41 (and 35, detached) on a lent 4-GPU machine, through clusterctl itself:
# 1. gpu_job.py (bf16 matmuls + a 64 MiB all_reduce a step) on one `connection: local` host with 4 GPUs,
#    the node sampler off (job.metrics_every: 0) and every second (1), alternated twice: the mean step time
#    of each; `top --once --json` and `metrics --prometheus` while the sampled run runs; collect-logs: the
#    real metrics.jsonl and run.json's summary.
# 2. A detached run that heals itself: four local hosts, one GPU each, the job on three; g1's rank SIGKILLed
#    after step 20; `status --json` polled until the run ends (no clusterctl watches it meanwhile).
# Usage, from the repository root, OUT set, wheels in .whl/:  bash docs/gpu-validation/metrics/run.sh
set -u
PY=${PY:-python3}
OUT=${OUT:?set OUT to an output folder}
R=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 COLUMNS=200
$PY -c 'import paramiko, docker, rich, yaml, prometheus_client' 2>/dev/null || \
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$R:/tmp/site PATH=/tmp/site/bin:$PATH
W=/tmp/m41; rm -rf "$W"; mkdir -p "$W"; echo go > "$W/prompt.txt"
NOLS='NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1"'
inventory() {  # inventory FILE EVERY
  cat > "$1" <<YAML
name: m41
hosts:
  - {name: gpus01, connection: local, gpus: [0, 1, 2, 3], slots: 4}
rendezvous: {port: 29720}
job:
  command: [docs/gpu-validation/stragglers/gpu_job.py]
  args: [--steps, "400", --per_step, "40"]
  nproc_per_node: auto
  metrics_every: $2
  python: $PY
  outputs: $W/outputs
  env: {$NOLS}
checks: {ib: off, shm_min: 256m, disk_min: 1g}
YAML
}
inventory "$W/off.yaml" 0; inventory "$W/on.yaml" 1
cl() { $PY -m clusterctl "$@"; }
{
  echo "=== machine"; nvidia-smi -L; $PY -c 'import torch; print(torch.__version__, torch.version.cuda)'
  for round in 1 2; do
    for mode in off on; do
      if [ $mode = on ]; then
        ( sleep 14; cl top -i "$W/on.yaml" --once --json > "$OUT/top_$round.json" 2>"$OUT/top_$round.err";
          cl metrics -i "$W/on.yaml" --prometheus > "$OUT/prometheus_$round.txt" 2>"$OUT/prometheus_$round.err" ) &
      fi
      timeout 300 $PY -m clusterctl run -i "$W/$mode.yaml" --no-straggler-watch "$W/prompt.txt" --json \
        > "$OUT/run_${mode}_$round.json" 2> "$OUT/run_${mode}_$round.err"
      echo "round $round sampler $mode: exit $? $(grep -ho 'mean step [0-9.]*s' "$OUT/run_${mode}_$round.err" | tr '\n' ' ')"
      wait
    done
  done
  run=$($PY -c "import json; print(json.load(open('$OUT/run_on_2.json'))['run_id'])")
  cl collect-logs -i "$W/on.yaml" --run "$run" --dest "$W/bundle" --json > "$OUT/collect.json" 2>/dev/null
  m=$(find "$W/bundle" -name metrics.jsonl | head -1); echo "metrics.jsonl: $(wc -l < "$m") lines"
  sed -n 10p "$m" > "$OUT/metrics_line.json"; cat "$OUT/metrics_line.json" | cut -c1-600
  $PY -c "import json; d=json.load(open('$W/bundle/run.json')); print(json.dumps(d.get('metrics'), indent=1)[:1500])"
  echo "=== top --once --json (round 2, GPU rows)"; $PY -c "import json; d=json.load(open('$OUT/top_2.json')); n=d['nodes'][0]; print(d['state'], [(g['index'], g['util_pct'], g['power_w']) for g in (n['sample'] or {}).get('gpus', [])], list(n['ranks'].items())[:2])"
  echo "=== prometheus (round 2, GPU lines)"; grep -E '^clusterctl_gpu_(utilization|power)' "$OUT/prometheus_2.txt" | head -8
  echo "=== a detached run that heals itself (issue 35): g1's rank SIGKILLed after step 20"
  H=/tmp/h35d; rm -rf "$H"; mkdir -p "$H/ckpt"
  cat > "$H/heal.yaml" <<YAML
name: h35d
hosts:
  - {name: g0, connection: local, gpus: [0], slots: 1}
  - {name: g1, connection: local, gpus: [1], slots: 1}
  - {name: g2, connection: local, gpus: [2], slots: 1}
  - {name: g3, connection: local, gpus: [3], slots: 1}
rendezvous: {port: 29730}
job:
  command: [docs/gpu-validation/healing/heal_job.py]
  nproc_per_node: 1
  nodes: 3
  restarts: 1
  checkpoint: {dir: $H/ckpt, complete: COMPLETE}
  python: $PY
  outputs: $H/outputs
  env: {$NOLS, HEAL_CKPT_DIR: $H/ckpt, HEAL_STEPS: "80", HEAL_SAVE_EVERY: "10"}
checks: {ib: off, shm_min: 64m, disk_min: 1g}
YAML
  t0=$(date +%s.%N)
  cl run -i "$H/heal.yaml" --detach "$W/prompt.txt" --json > "$OUT/detached_run.json" 2> "$OUT/detached_run.err"
  echo "run --detach returned $? after $($PY -c "print(round($(date +%s.%N) - $t0, 1))") s"
  until [ -e "$H/ckpt/step-20/COMPLETE" ]; do sleep 0.2; done; sleep 1
  for p in $(grep -lz '^CLUSTERCTL_HOST=g1$' /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3); do
    tr '\0' '\n' </proc/$p/environ | grep -q '^RANK=' && { echo "killing pid $p (g1's rank) at $(date +%s.%N)"; kill -9 "$p"; }
  done
  for i in $(seq 1 120); do
    cl status -i "$H/heal.yaml" --json > "$OUT/detached_status.json" 2>/dev/null
    state=$($PY -c "import json; r=json.load(open('$OUT/detached_status.json'))['runs'][0]; print(r['state'])")
    [ "$state" = running ] || break; sleep 2
  done
  $PY - "$OUT/detached_status.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
print("state", r.get("state"), "exit_code", r.get("exit_code"))
for a in r.get("attempts") or []:
    print(json.dumps({k: a.get(k) for k in ("attempt", "started", "ended", "hosts", "exit_code", "excluded", "relaunch_s", "checkpoint")}))
PYEOF
  grep -rh "resuming\|done at" "$H/outputs" 2>/dev/null | sort -u | head
  echo "=== left over"; ps -eo pid,cmd | grep -E 'heal_job|node_agent|torch.distributed' | grep -v grep || echo none
} 2>&1 | tee "$OUT/session.log"
