#!/bin/sh
# On nvidia-h100-x4 (4 GPUs): a rank 20% slower named; the same job healthy with and without sampling.
cd "$(dirname "$0")/../../.." && export PATH="$PWD/build:$PATH"
nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.cuda.device_count())"
# the step: --per_step 200 matmuls; a first run measures it, the CPU-side straggler sleeps 20% of it
for case in "healthy_unsampled 4 0" "healthy_sampled 4 1" "slowgpu20 4 1 --slow_rank 2 --slow_factor 1.2" \
            "slowcpu20 4 1 --slow_rank 2 --slow_cpu_s STEP20"; do
  step20=$(python3 -c "import json; r=[json.loads(l) for l in open('$OUT/results.jsonl')]; print(round(0.2*sum(r[0]['mean_step_s'])/len(r[0]['mean_step_s']), 4))" 2>/dev/null || echo 0.06)
  set -- $(echo "$case" | sed "s/STEP20/$step20/")
  timeout 150 python3 docs/gpu-validation/stragglers/harness.py "$@" --steps 200 --per_step 200 | tee -a "$OUT/results.jsonl"
done
