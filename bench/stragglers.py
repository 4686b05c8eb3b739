"""The watch on loops as users write them (issue 49): how soon a rank slowed or frozen from outside is
named, whether a healthy run stays quiet, and what the watch costs.

  python bench/stragglers.py [--kinds ddp,fsdp2,deepspeed] [--shares 0.23,0.44] [--out FILE]

On this machine, `clusterctl run` of tests/fixtures/jobs/ddp_plain.py (DDP or FSDP2) or ds_plain.py
(DeepSpeed ZeRO-2), 3 gloo ranks on a `connection: local` host, no torch.distributed call in the job.
- slowed: 5 s after rank 2 is up, it is held (SIGSTOP) `share` of every 0.1 s from outside
  (tests/fixtures/noisy.py): it gets (1 - share) of its time, so it is 1/(1 - share) - 1 slower (0.23:
  +30%, 0.44: +80%); measured: seconds from the slowdown to the `[straggler]` naming (the record's
  `since`), and whom it named. The run ends at `--timeout` (90 s).
- frozen: rank 2 stopped for good 10 s after it is up, stall timeout 20 s: seconds from the freeze to the
  run's end, and the host/rank of its first failure.
- healthy: 120 s untouched: the ranks named (none expected); its mean step time with the watch and with
  `--no-straggler-watch`.
- cost: the node's sampling script (watch/sampler.py, the straggler watch's non-blocking round) run on the
  healthy job's 3 ranks for 20 samples 1 s apart: its CPU seconds (py-spy included) per wall second, i.e.
  the share of one core it takes on the node.
Prints one JSON document (and writes it to --out).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from fixtures.noisy import DutyCycle, find_rank, freeze, thaw  # noqa: E402

JOBS = ROOT / "tests" / "fixtures" / "jobs"
LOOPS = {"ddp": ("ddp_plain.py", ["--kind", "ddp"]), "fsdp2": ("ddp_plain.py", ["--kind", "fsdp2"]),
         "deepspeed": ("ds_plain.py", [])}
RANK = 2


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(kind: str, options: list[str], outside=None) -> tuple[dict, str, dict]:
    """`clusterctl run --json` of the loop, `outside(pid, hold)` once rank 2 is up: (document, live log, hold)."""
    where = Path(tempfile.mkdtemp(prefix=f"bench-stragglers-{kind}-"))
    job, args = LOOPS[kind]
    cluster = f"bench-{kind}-{os.getpid()}-{int(time.time())}"
    (where / "inventory.yaml").write_text(f"""name: {cluster}
hosts:
  - {{name: local, connection: local}}
rendezvous: {{port: {_port()}}}
job:
  command: [{JOBS / job}]
  args: {json.dumps([*args, "--steps", "100000", "--every", "20"])}
  nproc_per_node: 3
  python: {sys.executable}
  outputs: {where / 'outputs'}
checks: {{ib: off}}
""")
    (where / "prompt.txt").write_text("a cat\n")
    env = {**os.environ, "CLUSTERCTL_STATE": str(where / "state"), "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "clusterctl", "run", "--json", "-i", str(where / "inventory.yaml"),
                             *options, str(where / "prompt.txt")], cwd=where, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    hold: dict = {}

    def helper():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            pid = find_rank([f"CLUSTERCTL_CLUSTER={cluster}"], RANK)
            if pid:
                hold["pid"] = pid
                outside(pid, hold)
                return
            time.sleep(0.5)

    thread = threading.Thread(target=helper, daemon=True) if outside else None
    if thread:
        thread.start()
    out, err = proc.communicate(timeout=900)
    if "pid" in hold:
        thaw(hold["pid"])
    hold["ended"] = time.time()
    return (json.loads(out) if out.strip() else {}), err, hold


def slowed(kind: str, share: float) -> dict:
    def outside(pid, hold):
        time.sleep(5)
        cycle = DutyCycle(pid, share)
        hold["since"] = time.time()
        while os.path.exists(f"/proc/{pid}") and not hold.get("stop"):
            time.sleep(0.5)
        cycle.stop()

    doc, _err, hold = _run(kind, ["--stall-timeout", "0", "--timeout", "90"], outside)
    named = doc.get("stragglers") or []
    first = named[0] if named else None
    return {"kind": kind, "share_held": share, "slower_by": round(1 / (1 - share) - 1, 2),
            "named": [(s["host"], s["rank"]) for s in named],
            "right": bool(first and (first["host"], first["rank"]) == ("local", RANK)),
            "named_after_s": round(first["since"] - hold["since"], 1) if first and "since" in hold else None,
            "evidence": first["evidence"] if first else None, "ratio": first["ratio"] if first else None}


def frozen(kind: str, stall_s: int = 20) -> dict:
    def outside(pid, hold):
        time.sleep(10)
        freeze(pid)
        hold["since"] = time.time()

    doc, _err, hold = _run(kind, ["--stall-timeout", str(stall_s)], outside)
    failure = doc.get("first_failure") or {}
    finding = next((f for f in failure.get("diagnosis") or [] if f.get("cause") == "rank_hang"), {})
    return {"kind": kind, "stall_timeout_s": stall_s, "named": [failure.get("host"), failure.get("rank")],
            "right": (failure.get("host"), failure.get("rank")) == ("local", RANK),
            "ended_after_s": round(hold["ended"] - hold["since"], 1) if "since" in hold else None,
            "evidence": finding.get("evidence", "")[:300]}


_STEP = re.compile(r"\(([0-9.]+)s/step\)")


def healthy(kind: str, watch: bool, seconds: int = 120) -> dict:
    options = ["--stall-timeout", "0", "--timeout", str(seconds)] + ([] if watch else ["--no-straggler-watch"])
    doc, err, _hold = _run(kind, options, None)
    steps = [float(x) for x in _STEP.findall(err)]
    return {"kind": kind, "watch": watch, "named": [(s["host"], s["rank"]) for s in doc.get("stragglers") or []],
            "mean_step_s": steps[-1] if steps else None}


def cost(kind: str, samples: int = 20) -> dict:
    """The node script's CPU per wall second over `samples` non-blocking samples of a running healthy loop."""
    from clusterctl.watch import sampler

    result: dict = {}

    def outside(pid, hold):
        time.sleep(8)
        env = dict(os.environ)
        for key in ("CLUSTERCTL_CLUSTER", "CLUSTERCTL_HOST", "CLUSTERCTL_RUN_ID"):
            env[key] = next((line.split("=", 1)[1] for line in open(f"/proc/{pid}/environ", "rb").read()
                             .decode(errors="replace").split("\0") if line.startswith(key + "=")), "")
        data, arch, _sha = sampler.payload()
        argv = ["sh", "-c", sampler._SCRIPT, "bench", env["CLUSTERCTL_CLUSTER"], env["CLUSTERCTL_HOST"],
                env["CLUSTERCTL_RUN_ID"], str(samples), "1", arch, "--nonblocking", "", "", "ship"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        out = subprocess.run(argv, input=data, capture_output=True, timeout=300).stdout.decode()
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        node = sampler.parse_node_output(out, env["CLUSTERCTL_HOST"])
        result.update({"samples": len(node.samples), "ranks_read": sum(1 for s in node.samples for r in s if r.frames),
                       "wall_s": round(wall, 2), "cpu_s": round(cpu, 3), "core_share": round(cpu / wall, 4),
                       "per_rank_sample_ms": round(1000 * cpu / max(1, sum(len(s) for s in node.samples)), 1)})

    _run(kind, ["--stall-timeout", "0", "--timeout", "45", "--no-straggler-watch"], outside)
    return {"kind": kind, **result}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kinds", default="ddp")
    parser.add_argument("--shares", default="0.23,0.44")
    parser.add_argument("--parts", default="slowed,frozen,healthy,cost")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    kinds, parts = args.kinds.split(","), args.parts.split(",")
    report: dict = {"machine": f"{os.cpu_count()} CPUs", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "slowed": [], "frozen": [], "healthy": [], "cost": []}
    for kind in kinds:
        if "slowed" in parts:
            report["slowed"] += [slowed(kind, float(share)) for share in args.shares.split(",")]
        if "frozen" in parts:
            report["frozen"].append(frozen(kind))
        if "healthy" in parts:
            report["healthy"] += [healthy(kind, True), healthy(kind, False)]
        if "cost" in parts:
            report["cost"].append(cost(kind))
        print(json.dumps(report, indent=1), file=sys.stderr, flush=True)
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
