"""Benchmark: `clusterctl diagnose` of a 1 GB log (issue 18's goal: <= 10 s, <= 200 MB peak RSS).

    .venv/bin/python bench/diagnose_bench.py [--size-mb 1024] [--keep]

Writes a synthetic log in a temporary directory: torchrun/tqdm-style training lines of varying
ranks and numbers, a repeated warning every few thousand lines, NCCL INFO lines at the start, and
a real failure at the end (a rank killed by SIGKILL and torchrun's root-cause block). Then runs the
CLI in a child process and reports its wall time and peak resident memory (ru_maxrss of the
child), and checks that the diagnosis is killed_by_signal (a SIGKILL with no record of an OOM kill).
Prints one JSON document.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEAD = ("node-a:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "node-a:4242:4242 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation\n"
        "NCCL version 2.21.5+cuda12.4\n")
TAIL = """[2024-05-01 10:05:12,000] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 4243 closing signal SIGTERM
[2024-05-01 10:05:12,100] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 1 (pid: 4242) of binary: /usr/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-01_10:05:12
  host      : node-b
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242
============================================================
"""


def write_log(path: Path, size: int, seed: int = 18) -> None:
    """HEAD, then ~4 MiB blocks of training output (one generated block repeated with a new step
    prefix: generating 1 GB line by line in Python would take minutes), then TAIL."""
    block = _block(random.Random(seed))
    with open(path, "w") as out:
        out.write(HEAD)
        written, index = len(HEAD), 0
        while written < size:
            index += 1
            chunk = f"[2024-05-01 09:00:00,000] torch.distributed.run: [INFO] block {index}\n" + block
            out.write(chunk)
            written += len(chunk)
        out.write(TAIL)


def write_distinct_log(path: Path, size: int, seed: int = 51) -> None:
    """The worst case for the reader: every line distinct even with its digits aside (a random hex id on each, as
    request or trace ids print), so the first 2 MiB and last 4 MiB are diagnosed line by line (reader.MAX_KEPT)."""
    rng = random.Random(seed)
    with open(path, "w") as out:
        out.write(HEAD)
        written, step = len(HEAD), 0
        while written < size:
            step += 1
            line = (f"[rank{rng.randrange(16)}]: step {step} | trace {rng.getrandbits(64):016x} | loss "
                    f"{rng.random() * 3:.4f} | lr {rng.random():.2e} | tokens/s {rng.randrange(9000, 13000)}\n")
            out.write(line)
            written += len(line)
        out.write(TAIL)


def _block(rng: random.Random) -> str:
    lines, size, step = [], 0, 0
    while size < 4 << 20:
        step += 1
        rank = rng.randrange(16)
        lines.append(f"[rank{rank}]: [2024-05-01 09:{step // 6000 % 60:02d}:{step // 100 % 60:02d},{step % 1000:03d}] "
                     f"step {step} | loss {rng.random() * 3:.4f} | lr 3.00e-04 | grad_norm {rng.random():.3f} "
                     f"| tokens/s {rng.randrange(9000, 13000)} | mem 61.2GiB\n")
        if step % 5000 == 0:
            lines.append(f"[rank{rank}]: /opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:90: "
                         "UserWarning: None of the inputs have requires_grad=True. Gradients will be None\n")
        if step % 1000 == 0:
            lines.append(f" {step % 100:3d}%|{'#' * (step % 50):<50}| {step}/100000 [01:02<03:04, 9.87it/s]\r\n")
        size += len(lines[-1])
    return "".join(lines)


def run(log: Path) -> dict:
    env = {**os.environ, "CLUSTERCTL_STATE": str(log.parent / "state")}
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, cpu_before = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "clusterctl", "diagnose", str(log), "--json"],
                            capture_output=True, text=True, env=env, cwd=REPO)
    seconds = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_kb, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime - cpu_before
    document = json.loads(result.stdout) if result.stdout.strip() else {}
    top = (document.get("findings") or [{}])[0]
    return {"exit_code": result.returncode, "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
            "cpus": os.cpu_count(), "load_average": round(os.getloadavg()[0], 2), "peak_rss_mb": round(max(peak_kb, before) / 1024, 1),
            "cause": top.get("cause"), "rank": top.get("rank"), "confidence": top.get("confidence"),
            "stderr_tail": result.stderr[-300:]}


def in_process(log: Path) -> float:
    """The diagnosis alone (read, evidence, ranking, similar cases), without the CLI's start-up."""
    sys.path.insert(0, str(REPO))
    from clusterctl.diagnose import engine
    engine.diagnose(REPO / "bench" / "diagnose_bench.py")  # warm the corpus index and the regex caches
    started = time.monotonic()
    engine.diagnose(log)
    return round(time.monotonic() - started, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    parser.add_argument("--distinct", action="store_true", help="every line distinct (the reader's worst case)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="diagnose-bench-") as tmp:
        log = Path(tmp) / "train-1g.log"
        started = time.monotonic()
        (write_distinct_log if args.distinct else write_log)(log, args.size_mb << 20)
        generated = time.monotonic() - started
        report = {"log_bytes": log.stat().st_size, "generate_seconds": round(generated, 1), **run(log),
                  "in_process_seconds": in_process(log)}
        report["ok"] = (report["exit_code"] == 0 and report["cause"] == "killed_by_signal" and report["seconds"] <= 10
                        and report["peak_rss_mb"] <= 200)
        if args.keep:
            kept = REPO / "bench" / "out" / log.name
            kept.parent.mkdir(exist_ok=True)
            log.replace(kept)
            report["kept"] = str(kept)
        print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
