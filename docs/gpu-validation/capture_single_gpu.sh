#!/usr/bin/env bash
# Issue 23, the single-GPU parts, on one lent H100 (nvidia-h100-x1): what the node tools print there
# (fixtures for the facts parsers and the diagnosis), a planted CUDA out-of-memory through torchrun,
# and py-spy stacks of a process inside a CUDA call. Run from the repo root with the py-spy wheel
# carried in .whl/ (see docs/gpu-validation.md); everything lands in $OUT/single_gpu_capture.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/py_spy-*.whl
PYSPY=/tmp/site/bin/py-spy
[ -x "$PYSPY" ] || PYSPY=$(find /tmp/site -name py-spy -type f | head -1)
mkdir -p /tmp/cap && cd /tmp/cap
nvidia-smi > nvidia_smi_table_h100.txt 2>&1
nvidia-smi -q > nvidia_smi_q_h100.txt 2>&1
nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,CLOCK > nvidia_smi_q_ecc_pages_clocks_h100.txt 2>&1
nvidia-smi topo -m > nvidia_smi_topo_h100x1.txt 2>&1
nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,driver_version,pci.bus_id,ecc.errors.uncorrected.volatile.total,retired_pages.pending --format=csv > nvidia_smi_query_gpu_h100.csv 2>&1
nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv > nvidia_smi_apps_h100.csv 2>&1
{ echo "# uname -a; python3 torch/cuda/nccl versions"; uname -a
  python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.get_device_name(0))'; } > versions_h100.txt 2>&1
# A planted CUDA out-of-memory, as a rank launched by torchrun prints it
cat > /tmp/oom_rank.py <<'PY'
import torch
def allocate_activations():
    return torch.empty(200 * 2**30, dtype=torch.uint8, device="cuda")  # 200 GiB on an 80 GiB card
allocate_activations()
PY
timeout 120 torchrun --nproc-per-node 1 /tmp/oom_rank.py > torchrun_cuda_oom_h100.log 2>&1
echo "exit $?" >> torchrun_cuda_oom_h100.log
# py-spy: a process inside a CUDA call (a long kernel), stacks taken from outside
cat > /tmp/cuda_busy.py <<'PY'
import torch
def spin_on_the_gpu():
    while True:
        torch.cuda._sleep(2_000_000_000)  # a ~1 s kernel, again and again
        torch.cuda.synchronize()
spin_on_the_gpu()
PY
python3 /tmp/cuda_busy.py & pid=$!
sleep 8
"$PYSPY" dump --pid "$pid" > pyspy_dump_cuda_h100.txt 2>&1
"$PYSPY" dump --pid "$pid" --json > pyspy_dump_cuda_h100.json 2>&1
"$PYSPY" dump --pid "$pid" --native > pyspy_dump_cuda_native_h100.txt 2>&1
kill "$pid"; wait "$pid" 2>/dev/null
ls -la /tmp/cap; head -c 3000 pyspy_dump_cuda_h100.txt; tail -n 25 torchrun_cuda_oom_h100.log
tar czf "$OUT/single_gpu_capture.tgz" -C /tmp/cap .
