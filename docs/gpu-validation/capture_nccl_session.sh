#!/bin/bash
# The GPU evidence of docs/gpu-validation.md, in one pass on a lent 2x H200 machine.
# Usage (repository root, OUT set to an empty folder): bash docs/gpu-validation/capture_nccl_session.sh
# Writes to $OUT (7 files): query_gpu.csv q.txt topo.txt table.txt versions.json session.log results.json
# NVLink multicast stays off everywhere (the lending host's rule): NVLS, symmetric-memory multicast, NVSHMEM NVLS.
set -u
OUT=${OUT:?set OUT to an output folder}
R=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# clusterctl from this checkout; its SSH/Docker dependencies are imported only for SSH/Docker hosts.
export PYTHONPATH=$R${PYTHONPATH:+:$PYTHONPATH}
LOG=$OUT/session.log
J=/tmp/ctl/json; mkdir -p "$J" /tmp/ctl
DATE=$(date -u +%Y-%m-%d)
SRC="# source: lent H200 machine (nvidia-h200-x2), $DATE, by docs/gpu-validation/capture_nccl_session.sh"
step() { echo; echo "=== $(date -u +%H:%M:%S) $*"; }
cc() { timeout 240 python3 -m clusterctl "$@"; }
Q='--query-gpu=index,uuid,name,memory.total,memory.used,driver_version,pci.bus_id'

{ echo "$SRC"; echo "# command: nvidia-smi $Q --format=csv,noheader,nounits"; nvidia-smi "$Q" --format=csv,noheader,nounits; } >"$OUT/query_gpu.csv" 2>&1
{ echo "$SRC"; echo "# command: nvidia-smi -q"; nvidia-smi -q; } >"$OUT/q.txt" 2>&1
{ echo "$SRC"; echo "# command: nvidia-smi topo -m"; nvidia-smi topo -m; } >"$OUT/topo.txt" 2>&1
{ echo "$SRC"; echo "# command: nvidia-smi (idle)"; nvidia-smi; } >"$OUT/table.txt" 2>&1
python3 - >"$OUT/versions.json" 2>&1 <<'EOF'
import json, platform, subprocess, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout
nccl = torch.cuda.nccl.version() if torch.cuda.is_available() else None
print(json.dumps({"python": platform.python_version(), "kernel": platform.release(), "torch": torch.__version__,
                  "cuda": torch.version.cuda, "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl,
                  "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
                  "nvidia_smi": smi.strip().splitlines()}, indent=1))
EOF

# nic: lo: one machine, and its hostname resolves to loopback (no `ip` to name an interface otherwise)
hosts_two='  - {name: gpu0, connection: local, gpus: [0], nic: lo}
  - {name: gpu1, connection: local, gpus: [1], nic: lo}'
hosts_one='  - {name: gpus01, connection: local, gpus: [0, 1]}'
hosts_fault='  - {name: gpus01, connection: local, gpus: [0, 1], env: {CUDA_VISIBLE_DEVICES: "0"}}'
inventory() {  # NAME HOSTS NPROC
  cat >"/tmp/ctl/$1.yaml" <<EOF
name: h200-$1
hosts:
$2
rendezvous: {port: 29500}
job:
  command: [examples/generate.py]
  args: [--task, t2v-tiny, --size, "64*48", --frame_num, "8", --ulysses_size, "{world_size}",
         --prompt, "{prompt}", --save_file, "{outputs}/{run_id}.gif"]
  nproc_per_node: $3
  world_size_divides: 8
  outputs: /tmp/ctl/outputs-$1
  env: {NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1"}
checks: {ib: off, shm_min: 256m, disk_min: 1g}
EOF
}
inventory two "$hosts_two" auto
inventory one "$hosts_one" auto
inventory fault "$hosts_fault" 2

{
  step "versions"; cat "$OUT/versions.json"; hostname; getent hosts "$(hostname)"; command -v ip || echo "no ip command"
  step "clusterctl check (two local nodes)"; cc check -i /tmp/ctl/two.yaml --json >"$J/check.json"; echo "exit $?"
  step "clusterctl run example job (two local nodes, gpus [0] and [1])"
  cc run -i /tmp/ctl/two.yaml examples/prompt.txt --json >"$J/run.json"; echo "exit $?"
  step "reference: plain torch.distributed loop, torchrun 2 ranks on GPUs 0,1"
  timeout 240 torchrun --nproc-per-node 2 clusterctl/node/allreduce_bench.py --reference --min-size 1M --max-size 4G \
    2>&1 | tee "$J/reference1.txt"; echo "exit ${PIPESTATUS[0]}"
  step "clusterctl nccl-test --max-size 1G (one local node, gpus [0,1], nproc auto)"
  cc nccl-test -i /tmp/ctl/one.yaml --max-size 1G --json >"$J/nccl_one.json"; echo "exit $?"
  step "clusterctl nccl-test --min-size 256M --max-size 4G (one local node): the large sizes"
  cc nccl-test -i /tmp/ctl/one.yaml --min-size 256M --max-size 4G --json >"$J/nccl_one_4g.json"; echo "exit $?"
  step "clusterctl nccl-test --max-size 1G (two local nodes, gpus [0] and [1])"
  cc nccl-test -i /tmp/ctl/two.yaml --max-size 1G --json >"$J/nccl_two.json"; echo "exit $?"
  step "reference again (noise between runs)"
  timeout 240 torchrun --nproc-per-node 2 clusterctl/node/allreduce_bench.py --reference --min-size 64M --max-size 1G \
    2>&1 | tee "$J/reference2.txt"; echo "exit ${PIPESTATUS[0]}"
  step "clusterctl nccl-test --pairs --stage small (two local nodes)"
  cc nccl-test -i /tmp/ctl/two.yaml --pairs --stage small --json >"$J/pairs.json"; echo "exit $?"
  step "planted gpu_ordinal: nproc_per_node 2, host env CUDA_VISIBLE_DEVICES=0"
  cc nccl-test -i /tmp/ctl/fault.yaml --stage connect --json >"$J/fault.json"; echo "exit $?"
  cc collect-logs -i /tmp/ctl/fault.yaml --json >"$J/collect.json"; echo "collect-logs exit $?"
  fault_run=$(python3 -c "import json; print(json.load(open('$J/fault.json')).get('run_id', 'none'))")
  cc diagnose "logs/$fault_run" --json >"$J/diagnose.json"; echo "diagnose exit $?"
  cc diagnose "logs/$fault_run"
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
    else:
        doc[path.stem] = [json.loads(l.split(" ", 1)[1]) for l in text.splitlines() if l.startswith("REFERENCE ")]
json.dump(doc, open(dest, "w"), indent=1)
EOF
ls -la "$OUT"
