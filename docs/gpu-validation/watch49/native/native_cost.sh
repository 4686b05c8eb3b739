#!/bin/bash
# Issue 49: what a `py-spy dump --native` of a CUDA rank costs (wall time of the dump, the rank's pause), against
# the `--nonblocking` dump the straggler rounds take. One rank, a small CUDA loop that syncs every step (.item()).
set -u
PY=${PY:-python3}; OUT=${OUT:?}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cat > /tmp/loop.py <<'PYEOF'
import time, torch
x = torch.randn(4096, 4096, device="cuda")
t = time.time(); n = 0; gaps = []
last = time.perf_counter()
while time.time() - t < 70:
    y = (x @ x).sum().item()
    now = time.perf_counter(); gaps.append(now - last); last = now; n += 1
gaps.sort()
print("steps", n, "median_ms", 1000 * gaps[len(gaps) // 2], "p99_ms", 1000 * gaps[int(len(gaps) * .99)], "max_ms", 1000 * gaps[-1], flush=True)
PYEOF
$PY /tmp/loop.py > $OUT/loop.txt 2>&1 &
pid=$!; sleep 15
for mode in nonblocking native; do
  for i in 1 2 3 4 5 6 7 8; do
    s=$(date +%s%N)
    if [ $mode = native ]; then py-spy dump --native --pid $pid > $OUT/dump_$mode.txt 2>&1; else py-spy dump --nonblocking --pid $pid > $OUT/dump_$mode.txt 2>&1; fi
    e=$(date +%s%N); echo "$mode $i $(( (e - s) / 1000000 )) ms" >> $OUT/times.txt
    sleep 2
  done
done
/usr/bin/time -v py-spy dump --native --pid $pid > /dev/null 2> $OUT/native_time_v.txt
wait $pid
cat $OUT/times.txt $OUT/loop.txt; grep -E "Elapsed|Maximum resident|User time|System time" $OUT/native_time_v.txt
