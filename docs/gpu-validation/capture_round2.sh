#!/bin/bash
# Issue 23, round 2 on a lent 4-GPU machine (nvidia-h200-x4; it may come as 4 x H100): a planted NCCL hang on
# 2 GPUs (stall watch, py-spy stacks, flight-recorder dumps read by diagnose) and all_reduce bandwidth on 4 GPUs
# (clusterctl nccl-test against the plain torch.distributed reference, same call).
#
# Usage, from a folder holding clusterctl/ (the code under test), docs/gpu-validation/round2/{hang_job,node_sample}.py,
# whl/py_spy-*.whl and, optionally, base/clusterctl/ (an earlier clusterctl, run first on the same hang for
# comparison), with OUT set to an empty folder:
#     STEPS="bw hang_base hang fr item" bash docs/gpu-validation/capture_round2.sh
# Writes $OUT/session.log, $OUT/results.json and $OUT/round2.tgz (every log, JSON document, stack and dump).
# NVLink multicast stays off everywhere (the lending host's rule), in this shell and in every inventory's job.env.
# (A CPU rehearsal of the hang steps: PY=.venv/bin/python GPUS2=none STEPS="hang item" ...: gloo, no GPU.)
set -u
PY=${PY:-python3}
OUT=${OUT:?set OUT to an output folder}
R=$(pwd)
STEPS=${STEPS:-bw hang_base hang fr item}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 COLUMNS=200
$PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site whl/py_spy-*.whl >/dev/null 2>&1
export PATH=/tmp/site/bin:$PATH
PYSPY=$(command -v py-spy || echo /tmp/site/bin/py-spy)
W=/tmp/r2; J=$W/json; C=$W/cap; mkdir -p "$J" "$C" "$W/inv"
echo hang > "$W/prompt.txt"
LOG=$OUT/session.log
NOLS='NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1"'
step() { echo; echo "=== $(date -u +%H:%M:%S) $*"; }
cc() { PYTHONPATH=$R:/tmp/site timeout 240 $PY -m clusterctl "$@"; }              # the code under test
# the earlier code: PYTHONSAFEPATH, or `-m` puts the current folder (the code under test) first on sys.path,
# which is what happened to round 2's first call (its "hang_base" step ran the code under test)
cc_base() { PYTHONSAFEPATH=1 PYTHONPATH=$R/base:/tmp/site timeout 240 $PY -m clusterctl "$@"; }

inventory() {  # NAME GPUS PORT EXTRA_ENV
  cat >"$W/inv/$1.yaml" <<EOF
name: r2-$1
hosts:
  - {name: gpus01, connection: local, gpus: $2, slots: 2}
rendezvous: {port: $3}
job:
  command: [docs/gpu-validation/round2/hang_job.py]
  nproc_per_node: auto
  python: $PY
  outputs: $W/outputs-$1
  env: {$NOLS$4}
checks: {ib: off, shm_min: 256m, disk_min: 1g}
EOF
}
inventory four "[0, 1, 2, 3]" 29600 ""
G2=${GPUS2:-"[0, 1]"}
inventory sync "$G2" 29610 ', HANG_WAIT: sync, HANG_NCCL_TIMEOUT_S: "300"'
inventory item "$G2" 29620 ', HANG_WAIT: item, HANG_NCCL_TIMEOUT_S: "300"'
inventory fr "$G2" 29630 ', HANG_WAIT: sync, HANG_NCCL_TIMEOUT_S: "30"'

stop_ranks() {  # end the ranks of the run this step started (by pid, from their CLUSTERCTL_RUN_ID), if any remain
  local run=$(last_run) e
  [ -n "$run" ] || return 0
  for e in $(grep -lzxF "CLUSTERCTL_RUN_ID=$run" /proc/[0-9]*/environ 2>/dev/null); do e=${e#/proc/}; kill "${e%/environ}" 2>/dev/null; done
  sleep 1
}
last_run() { ls -t "$R/.clusterctl/runs" 2>/dev/null | head -1; }

spy_ranks() {  # LABEL CLUSTER DELAY: py-spy from outside on each rank of the running hang, and clusterctl's node script
  sleep "$3"
  for p in $(pgrep -f 'round2/hang_job.py'); do
    r=$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | sed -n 's/^RANK=\([0-9]*\)$/\1/p')
    [ -n "$r" ] || continue
    "$PYSPY" dump --pid "$p" > "$C/$1_rank$r.pyspy.txt" 2>&1
    "$PYSPY" dump --pid "$p" --json > "$C/$1_rank$r.pyspy.json" 2>&1
    "$PYSPY" dump --pid "$p" --native > "$C/$1_rank$r.pyspy_native.txt" 2>&1
    a=$(cut -d' ' -f14,15 /proc/$p/task/$p/stat); sleep 3; b=$(cut -d' ' -f14,15 /proc/$p/task/$p/stat)
    echo "rank $r pid $p main-thread utime,stime ticks: $a -> $b (3 s)" >> "$C/$1_cpu.txt"
  done
  nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv > "$C/$1_compute_apps.csv" 2>&1
  PYTHONPATH=$R:/tmp/site timeout 60 $PY docs/gpu-validation/round2/node_sample.py "$2" gpus01 "$(last_run)" 2 3 \
    > "$C/$1_node_script.txt" 2>&1
}

hang_run() {  # LABEL INVENTORY CC RUN-TIMEOUT [collect]
  step "$1: clusterctl run --stall-timeout 30 --timeout $4 (inventory $2, $3)"
  $3 --version 2>/dev/null | head -1
  case $3 in cc_base) PYTHONSAFEPATH=1 PYTHONPATH=$R/base:/tmp/site $PY -c 'import clusterctl; print("clusterctl from", clusterctl.__file__)';;
             *) PYTHONPATH=$R:/tmp/site $PY -c 'import clusterctl; print("clusterctl from", clusterctl.__file__)';; esac
  spy_ranks "$1" "r2-$2" 28 &
  spy=$!
  $3 run -i "$W/inv/$2.yaml" --stall-timeout 30 --timeout "$4" "$W/prompt.txt" --json >"$J/$1_run.json" 2>"$J/$1_run.stderr.txt"
  echo "exit $?"; wait $spy
  $PY -c "import json,sys; d=json.load(open('$J/$1_run.json')); print(json.dumps({k: d.get(k) for k in ('ok','run_id','exit_code','first_failure')}, indent=1)[:3000])" 2>&1
  tail -n 30 "$J/$1_run.stderr.txt"
  run=$(last_run)
  $3 collect-logs -i "$W/inv/$2.yaml" --run "$run" --dest "$W/logs-$1" --json >"$J/$1_collect.json" 2>&1; echo "collect-logs exit $?"
  $3 diagnose "$W/logs-$1" --json >"$J/$1_diagnose.json" 2>&1; echo "diagnose exit $?"
  $3 diagnose "$W/logs-$1" 2>&1
  stop_ranks  # nothing of a hang outlives its step
}

{
  step "machine"; nvidia-smi -L; nvidia-smi topo -m; uname -r; hostname; nproc
  $PY -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])'
  "$PYSPY" --version; env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)='
  for s in $STEPS; do
  # a step starts only while the call has time left for it (the device's limit is 600 s a command)
  [ "$SECONDS" -gt "${BUDGET_S:-430}" ] && { step "$s skipped: ${SECONDS}s spent, over BUDGET_S"; continue; }
  case $s in
  bw)
    step "reference: plain torch.distributed loop, torchrun 4 ranks on GPUs 0-3, 1G..4G"
    timeout 240 $PY -m torch.distributed.run --nproc-per-node 4 clusterctl/node/allreduce_bench.py --reference --min-size 1G --max-size 4G \
      2>&1 | tee "$J/reference1.txt"; echo "exit ${PIPESTATUS[0]}"
    step "clusterctl nccl-test --min-size 1G --max-size 4G (one local node, gpus [0,1,2,3], nproc auto)"
    cc nccl-test -i "$W/inv/four.yaml" --min-size 1G --max-size 4G --json >"$J/nccl_four_4g.json"; echo "exit $?"
    step "clusterctl nccl-test (default sweep, 8 B..1 GiB)"
    cc nccl-test -i "$W/inv/four.yaml" --json >"$J/nccl_four_1g.json"; echo "exit $?"
    step "reference again, 1G..4G"
    timeout 240 $PY -m torch.distributed.run --nproc-per-node 4 clusterctl/node/allreduce_bench.py --reference --min-size 1G --max-size 4G \
      2>&1 | tee "$J/reference2.txt"; echo "exit ${PIPESTATUS[0]}"
    python3 - "$J" <<'EOF'
import json, pathlib, sys
j = pathlib.Path(sys.argv[1])
for name in ("nccl_four_4g", "nccl_four_1g"):
    try:
        d = json.loads((j / f"{name}.json").read_text())
    except Exception as e:
        print(name, "unreadable:", e); continue
    print(name, "ok", d.get("ok"), "verdict", d.get("verdict"), "link", d.get("link"))
    for s in d.get("sizes") or []:
        if s.get("size", 0) >= 64 << 20:
            print(f"  {s['size'] >> 20:>6} MiB busbw {s.get('busbw_gbps')} correct {s.get('correct')} verdict {s.get('verdict')}")
EOF
    ;;
  hang_base) [ -d base/clusterctl ] && hang_run hang_base sync cc_base 85 ;;
  hang) hang_run hang sync cc 120 ;;
  item) hang_run item item cc 80 ;;
  fr)
    step "fr: NCCL timeout 30 s, stall watch off: the watchdog fires and the flight recorder dumps"
    spy_ranks fr r2-fr 20 &
    spy=$!
    cc run -i "$W/inv/fr.yaml" --stall-timeout 0 --timeout 150 "$W/prompt.txt" --json >"$J/fr_run.json" 2>"$J/fr_run.stderr.txt"
    echo "exit $?"; wait $spy
    tail -n 60 "$J/fr_run.stderr.txt"
    run=$(last_run)
    find "$W/outputs-fr" -name 'nccl_trace_rank_*' -exec ls -la {} \;
    cc collect-logs -i "$W/inv/fr.yaml" --run "$run" --dest "$W/logs-fr" --json >"$J/fr_collect.json" 2>&1; echo "collect-logs exit $?"
    cc diagnose "$W/logs-fr" --json >"$J/fr_diagnose.json" 2>&1; echo "diagnose exit $?"
    cc diagnose "$W/logs-fr" 2>&1
    PYTHONPATH=$R:/tmp/site $PY - "$W/logs-fr" <<'EOF'
import pickle, sys, pathlib
from clusterctl.diagnose import flight_recorder as fr
dumps = fr.find_dumps(pathlib.Path(sys.argv[1]))
print("dumps read:", [(d.rank, d.host, len(d.entries)) for d in dumps])
for d in dumps:
    print(d.rank, d.groups, [(e.seq, e.op, e.group, e.state, e.where) for e in d.entries])
print("stuck:", fr.stuck_collectives(dumps))
print("torch analyser:", fr.torch_missing_ranks(dumps))
for p in sorted(pathlib.Path(sys.argv[1]).rglob("nccl_trace_rank_*")):
    raw = pickle.loads(p.read_bytes())
    print(p.name, "keys", sorted(raw), "version", raw.get("version"))
    print("  entry keys", sorted(raw["entries"][0]) if raw.get("entries") else None)
EOF
    stop_ranks
    ;;
  esac; done
  step "done"
} >"$LOG" 2>&1

python3 - "$J" "$OUT/results.json" <<'EOF'
import json, pathlib, sys
src, dest = pathlib.Path(sys.argv[1]), sys.argv[2]
doc = {}
for path in sorted(src.iterdir()):
    text = path.read_text(errors="replace")
    if path.suffix == ".json":
        try:
            doc[path.stem] = json.loads(text)
        except ValueError:
            doc[path.stem] = {"unparsed": text[-4000:]}
    elif path.name.startswith("reference"):
        doc[path.stem] = [json.loads(l.split(" ", 1)[1]) for l in text.splitlines() if l.startswith("REFERENCE ")]
json.dump(doc, open(dest, "w"), indent=1)
EOF
cp "$R/.clusterctl/runs" -r "$W/state-runs" 2>/dev/null
tar czf "$OUT/round2.tgz" -C /tmp r2
ls -la "$OUT"; tail -n 80 "$LOG"
