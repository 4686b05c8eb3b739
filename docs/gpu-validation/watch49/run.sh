#!/bin/bash
# Issue 49 on a lent 2-GPU machine: the public PyTorch DDP tutorial's multinode.py, UNCHANGED (pytorch/examples,
# distributed/ddp-tutorial-series; not in this repository: carried in .gl/ddp-tutorial/), on NCCL under
# `clusterctl run` with two `connection: local` hosts, one GPU each. Three cases: left alone (nobody named),
# rank 1 held 60% of the time FROM OUTSIDE (SIGSTOP/SIGCONT duty cycle, tests/fixtures/noisy.py: named as the
# straggler?; each of these two ends by `--timeout 100`), rank 1 frozen for good (SIGSTOP: the run ends naming g1 rank 1 and its state?).
# LOOP=trainer runs the same three cases on a plain Hugging Face Trainer loop (docs/gpu-validation/hf-trainer/);
# LOOP=deepspeed the same Trainer loop under DeepSpeed ZeRO-2 (its `--deepspeed` config, as HF users pass it);
# LOOP=fsdp2 pytorch/examples' distributed/FSDP2/example.py (carried in .gl/fsdp2/), one host with both GPUs (the
# script refuses fewer than two visible), its one change the step count (10, then it saves and exits).
# FSDP2_SIZE=gpu: the FSDP2 example's model made GPU-bound; CASES=gpuslowed: rank 1's GPU shared with
# gpu_neighbour.py's matmuls from SETTLE s (a rank slowed on its GPU, not its CPU; NEIGHBOUR_DUTY: its share, 1).
# RUN_TIMEOUT: each run's `--timeout` (100 s; the DeepSpeed Trainer takes ~45 s to its first step).
# ROUNDS_LOG: a file; every flight-recorder round the watch judges is appended to it (rounds_logged.py).
# HOLD: the share of each second the slowed rank is held (0.6: its steps ~2.5x as long; 0.23: 1.3x; 0.44: 1.8x).
# SHAPE=2x2 (a 4-GPU machine): two hosts of two GPUs and two ranks each, every loop; HELD_RANK: the rank slowed or
# frozen from outside (1).
# Usage, from the repository root, OUT set, wheels in .whl/:  [LOOP=trainer] bash docs/gpu-validation/watch49/run.sh
set -u
PY=${PY:-python3}
OUT=${OUT:?set OUT to an output folder}
R=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 COLUMNS=200
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$R:/tmp/site PATH=/tmp/site/bin:$PATH
LOOP=${LOOP:-ddp} HOLD=${HOLD:-0.6} HOSTS=two ARGS=
W=/tmp/watch49-$LOOP; rm -rf "$W"; mkdir -p "$W"; echo go > "$W/prompt.txt"
NOLS='NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1"'
JOB=$R/.gl/ddp-tutorial/multinode.py G0="gpus: [0]" G1="gpus: [1]" ENV=$NOLS BACKEND=nccl SETTLE=15
[ "$LOOP" = trainer ] && JOB=$R/docs/gpu-validation/hf-trainer/trainer_job.py SETTLE=30  # transformers imports slowly
if [ "$LOOP" = deepspeed ]; then
  JOB=$R/docs/gpu-validation/hf-trainer/trainer_job.py SETTLE=45
  echo '{"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto",
 "gradient_accumulation_steps": "auto", "zero_allow_untested_optimizer": true}' > "$W/zero2.json"
  ARGS=", --deepspeed, $W/zero2.json"
fi
if [ "$LOOP" = fsdp2 ]; then
  mkdir -p "$W/fsdp2"; cp "$R"/.gl/fsdp2/*.py "$W/fsdp2/"
  sed -i 's/    for _ in range(10):/    for _ in range(1000000):/' "$W/fsdp2/example.py"
  grep -q 'range(1000000)' "$W/fsdp2/example.py" || { echo "FSDP2 example: its loop was not found"; exit 1; }
  if [ "${FSDP2_SIZE:-}" = gpu ]; then  # GPU-bound: dim 2048 (500M parameters), 8 x 512 tokens a step
    sed -i -e 's/    batch_size = 32/    batch_size = 8/' -e 's/    seq_len = 64/    seq_len = 512/' \
      -e 's/        n_heads=4,/        n_heads=16, dim=2048,/' "$W/fsdp2/example.py"
    grep -q 'dim=2048' "$W/fsdp2/example.py" || { echo "FSDP2 example: its model arguments were not found"; exit 1; }
  fi
  JOB=$W/fsdp2/example.py SETTLE=20 HOSTS=one
fi
if [ "$(nvidia-smi -L | wc -l)" -lt 2 ] && [ "$LOOP" = trainer ]; then
  G0="gpus: none" G1="gpus: none" ENV="$NOLS, CUDA_VISIBLE_DEVICES: \"0\"" BACKEND=gloo  # the Trainer's own ddp_backend
elif [ "$(nvidia-smi -L | wc -l)" -lt 2 ]; then
  # one GPU: NCCL refuses two ranks on one device, so both hosts share it over gloo (issue 49's own allowance:
  # `gpus: none` plus CUDA_VISIBLE_DEVICES); the one line changed is the backend the script picks
  sed 's/backend = torch.distributed.get_default_backend_for_device(device)/backend = "gloo"/' "$JOB" > "$W/multinode.py"
  cp "$R/.gl/ddp-tutorial/datautils.py" "$W/"; JOB=$W/multinode.py G0="gpus: none" G1="gpus: none"
  ENV="$NOLS, CUDA_VISIBLE_DEVICES: \"0\""
fi
inventory() {  # $1 name, $2 epochs (steps for the Trainer)
  local args="\"$2\", \"1000000\""
  local hosts="  - {name: g0, connection: local, $G0, slots: 1}
  - {name: g1, connection: local, $G1, slots: 1}" nproc=1
  [[ "$LOOP" = trainer || "$LOOP" = deepspeed ]] && args="--backend, $BACKEND, --steps, \"$2\", --out, $W/trainer-$1$ARGS"
  [ "$LOOP" = fsdp2 ] && args=""
  [ "$HOSTS" = one ] && hosts="  - {name: g0, connection: local, gpus: [0, 1], slots: 2}" nproc=2
  [ "${SHAPE:-}" = 2x2 ] && hosts="  - {name: g0, connection: local, gpus: [0, 1], slots: 2}
  - {name: g1, connection: local, gpus: [2, 3], slots: 2}" nproc=2
  cat > "$W/$1.yaml" <<YAML
name: $1
hosts:
$hosts
rendezvous: {port: 29720}
job:
  command: [$JOB]
  args: [$args]
  nproc_per_node: $nproc
  python: $PY
  outputs: $W/outputs-$1
  env: {$ENV${EXTRA_ENV:+, $EXTRA_ENV}}
checks: {ib: off, shm_min: 64m, disk_min: 1g}
YAML
}
case_run() {  # $1 name, $2 epochs, $3 what to do from outside (none|slow|freeze), $4 stall timeout
  inventory "$1" "$2"
  $PY - "$1" "$3" "$W" "$4" "$SETTLE" "$HOLD" <<'PYEOF'
import json, os, subprocess, sys, threading, time
sys.path.insert(0, "tests")
from fixtures.noisy import DutyCycle, find_rank, freeze, thaw
name, what, w, stall, settle, hold = sys.argv[1:]
t0 = time.time()
entry = ["docs/gpu-validation/watch49/rounds_logged.py"] if os.environ.get("ROUNDS_LOG") else ["-m", "clusterctl"]
proc = subprocess.Popen([sys.executable, *entry, "run", "-i", f"{w}/{name}.yaml", "--json",
                         "--stall-timeout", stall, "--timeout", os.environ.get("RUN_TIMEOUT", "100"),
                         f"{w}/prompt.txt"],
                        stdout=subprocess.PIPE, stderr=open(f"{os.environ['OUT']}/{name}.stderr.txt", "w"), text=True)
marker = [f"CLUSTERCTL_CLUSTER={name}"]
held = {}
def outside():
    pid = None
    while pid is None and proc.poll() is None:
        pid = find_rank(marker, int(os.environ.get("HELD_RANK", "1"))); time.sleep(0.5)
    if pid is None:
        return
    held["pid"], held["up"] = pid, time.time() - t0
    time.sleep(float(settle))  # past NCCL's setup (and the Trainer's imports), into the steps
    held["at"] = time.time() - t0
    if what == "slow":
        cycle = DutyCycle(pid, float(hold))
        probe = os.environ.get("FR_PROBE")  # issue 49: torch's flight recorder dumped on demand (its pipe) mid-run
        rank0, k = find_rank(marker, 0), 0
        while proc.poll() is None:
            time.sleep(0.5)
            if probe and k < 6 and time.time() - t0 > float(settle) + 20 + 10 * k:
                k += 1
                stamp = time.time()
                for r in (0, 1):
                    try:
                        fd = os.open(f"{probe}{r}.pipe", os.O_WRONLY | os.O_NONBLOCK); os.write(fd, b"1"); os.close(fd)
                    except OSError as e:
                        print("pipe", r, e, file=sys.stderr)
                time.sleep(3)
                dest = f"{os.environ['OUT']}/fr/{k}"; os.makedirs(dest, exist_ok=True)
                subprocess.run(f"find {w}/outputs-{name} -name 'nccl_trace_rank_*' -newermt @{stamp:.0f} "
                               f"-exec cp {{}} {dest}/ \\;; ls -la {dest}", shell=True)
                if rank0 and k <= 2:
                    with open(f"{os.environ['OUT']}/native_rank0_{k}.txt", "w") as f:
                        subprocess.run(["py-spy", "dump", "--native", "--pid", str(rank0)], stdout=f,
                                       stderr=subprocess.STDOUT, timeout=60)
        cycle.stop()
    elif what == "gpu":  # rank 1's GPU shared with another process's matmuls: slowed on the GPU, not the CPU
        burner = subprocess.Popen([sys.executable, "docs/gpu-validation/watch49/gpu_neighbour.py", "1",
                                   os.environ.get("NEIGHBOUR_DUTY", "1")])
        proc.wait()
        burner.kill()
    elif what == "freeze":
        freeze(pid)
        if os.environ.get("CAPTURE"):  # the stall watch's raw input, kept whole as a test fixture
            time.sleep(4)
            run_id = next(l[18:] for l in open(f"/proc/{pid}/environ", "rb").read().decode().split("\0")
                          if l.startswith("CLUSTERCTL_RUN_ID="))
            for host in ("g0", "g1"):
                with open(f"{os.environ['OUT']}/node_{name}_{host}.txt", "w") as f:
                    subprocess.run([sys.executable, "docs/gpu-validation/round2/node_sample.py", name, host, run_id],
                                   stdout=f, stderr=subprocess.STDOUT, timeout=120)
if what != "none":
    threading.Thread(target=outside, daemon=True).start()
out, _ = proc.communicate(timeout=float(os.environ.get("RUN_TIMEOUT", "100")) + 120)
if "pid" in held:
    thaw(held["pid"])
t1 = time.time() - t0
doc = json.loads(out) if out.strip() else {}
f = doc.get("first_failure") or {}
hang = next((d for d in f.get("diagnosis") or [] if d.get("cause") == "rank_hang"), {})
print(json.dumps({"case": name, "outside": what, "held_rank": int(os.environ.get("HELD_RANK", "1")),
                  "hold": float(hold) if what == "slow" else None, "rank1_up_s": round(held.get("up", -1), 1),
                  "outside_from_s": round(held.get("at", -1), 1), "returned_s": round(t1, 1),
                  "exit_code": doc.get("exit_code"), "ok": doc.get("ok"),
                  "stragglers": doc.get("stragglers"), "first_failure": {k: f.get(k) for k in ("host", "rank", "cause")},
                  "rank_hang": hang.get("evidence")}, indent=1))
json.dump(doc, open(f"{os.environ['OUT']}/{name}.json", "w"), indent=1)
PYEOF
  grep -h "straggler\|no output\|hang" "$OUT/$1.stderr.txt" | cut -c1-400 | head -8  # what the run said live
}
{
  echo "=== machine"; nvidia-smi -L; $PY -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())'
  py-spy --version
  CASES=${CASES:-quiet slowed frozen}  # e.g. CASES=quiet for the untouched run only
  [[ " $CASES " == *" quiet "* ]] && case_run quiet 100000 none 60
  [[ " $CASES " == *" slowed "* ]] && case_run slowed 100000 slow 0
  for share in ${HOLDS:-}; do HOLD=$share case_run "slow${share#0.}" 100000 slow 0; done  # e.g. HOLDS="0.23 0.44"
  [[ " $CASES " == *" gpuslowed "* ]] && case_run gpuslowed 100000 gpu 0
  [[ " $CASES " == *" frozen "* ]] && case_run frozen 100000 freeze 20
  if [[ " $CASES " == *" detached "* ]]; then  # the keepers' rounds and the supervisor's verdict
    inventory detached 100000
    $PY docs/gpu-validation/watch49/detached_case.py "$W/detached.yaml" "$W/prompt.txt" "$SETTLE" "$OUT/detached.json"
  fi
  echo "=== left over"; ps -eo pid,stat,cmd | grep -E 'multinode|trainer_job|example.py|torch.distributed' | grep -v grep || echo none
} 2>&1 | tee "$OUT/session.log"
