#!/bin/bash
# Issue 49: what the straggler watch's NCCL evidence costs a training step. The public PyTorch DDP tutorial's
# multinode.py, UNCHANGED (.gl/ddp-tutorial/, as run.sh), one rank on one GPU over NCCL (a lent 1-GPU machine),
# four runs in a row: no flight-recorder settings (base); the settings clusterctl gives its ranks
# (plan/torchrun.flight_recorder_env: the ring buffer, dump on timeout, the FIFO, TORCH_NCCL_ENABLE_TIMING=1) with no
# dump asked (timing); the same with a dump asked through the FIFO every second (dumps: 15x the watch's pace, so
# one dump's cost shows above the noise); base again (the noise). Each epoch's line is stamped as it arrives; the
# step time is the median epoch's wall time over its steps, epochs 10 and on.
# Usage, from the repository root, OUT set:  bash docs/gpu-validation/watch49/fr_cost.sh
set -u
PY=${PY:-python3}
OUT=${OUT:?set OUT to an output folder}
R=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$R:/tmp/site
W=/tmp/frcost; rm -rf "$W"; mkdir -p "$W"; cp "$R"/.gl/ddp-tutorial/*.py "$W/"; cd "$W" || exit 1
TV=$($PY -c 'import torch; print(torch.__version__)')
read -r -a FR <<< "$($PY -c "from clusterctl.plan.torchrun import flight_recorder_env as f
print(' '.join(k + '=' + v for k, v in f('$W', set(), '$TV').items()))")"
EPOCHS=${EPOCHS:-300}
STAMP='import sys, time
for line in sys.stdin: sys.stdout.write("%.4f %s" % (time.time(), line)); sys.stdout.flush()'
run() {  # $1 label, then the env
  local label=$1; shift
  rm -f "$W"/fr_pipe_* "$W"/nccl_trace_rank_* "$W"/snapshot.pt
  env "$@" $PY -m torch.distributed.run --standalone --nproc-per-node 1 multinode.py "$EPOCHS" 1000000 2>&1 \
    | $PY -c "$STAMP" > "$OUT/$label.log"
}
poke() {  # a dump asked every second, as node/collective_waits.py asks for one every 15 s
  while sleep 1; do for p in "$W"/fr_pipe_*.pipe; do [ -p "$p" ] && timeout 1 sh -c "echo 1 > '$p'"; done; done
}
echo "torch $TV; flight-recorder settings: ${FR[*]}" > "$OUT/settings.txt"
nvidia-smi -L >> "$OUT/settings.txt" 2>&1
run base
run timing "${FR[@]}"
poke & POKER=$!
run dumps "${FR[@]}"
kill $POKER 2>/dev/null
run base2
$PY - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import re, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
for label in ("base", "timing", "dumps", "base2"):
    stamps = [(float(l.split(" ", 1)[0]), int(m.group(1)), int(m.group(2))) for l in (out / f"{label}.log").read_text().splitlines()
              if (m := re.search(r"\] Epoch (\d+) \| Batchsize: \d+ \| Steps: (\d+)", l))]
    gaps = [(b[0] - a[0]) / b[2] * 1000 for a, b in zip(stamps, stamps[1:]) if a[1] >= 10]
    dumps = (out / f"{label}.log").read_text().count("preparing to dump debug info")
    span = stamps[-1][0] - stamps[0][0] if stamps else 0.0
    print(f"{label}: {len(stamps)} epochs in {span:.1f} s, {dumps} dumps, median step {statistics.median(gaps):.4f} ms, "
          f"mean {statistics.mean(gaps):.4f} ms, p90 {sorted(gaps)[int(len(gaps) * .9)]:.4f} ms" if gaps else f"{label}: no epochs")
PY
ls -la "$W" > "$OUT/run_dir.txt"
