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
- long: `--long-s` (600) untouched, with the watch: the ranks named over issue 49's 10 minutes (none expected).
- cost: the run's straggler watch (watch/straggler_watch.py as `run` drives it: its pace, window filling at
  1 s then steady rounds of 4 samples 5 s apart, its kept py-spy) run for 150 s against a healthy job's 3
  ranks: its node scripts' CPU seconds (py-spy included) per wall second, i.e. the share of one core it
  takes on the node, overall and in the steady rounds.
Each result says when it began and the range of the 1-minute load average while it ran.
Prints one JSON document (and writes it to --out, keeping the results there of other kinds or parts).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
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
  - {{name: local, connection: local, gpus: none}}  # a CPU loop, also on a GPU machine
rendezvous: {{port: {_port()}}}
job:
  command: [{JOBS / job}]
  args: {json.dumps([*args, "--steps", "100000", "--every", "20"])}
  nproc_per_node: 3
  python: {sys.executable}
  outputs: {where / 'outputs'}
  env: {{CUDA_VISIBLE_DEVICES: ""}}  # FSDP2's default mesh takes a visible GPU
checks: {{ib: off}}
""")
    (where / "prompt.txt").write_text("a cat\n")
    env = {**os.environ, "CLUSTERCTL_STATE": str(where / "state"), "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "clusterctl", "run", "--json", "-i", str(where / "inventory.yaml"),
                             *options, str(where / "prompt.txt")], cwd=where, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    hold: dict = {"where": where}

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
    if thread:
        thread.join(30)  # the outside part reads the run's inventory until the ranks are gone
    shutil.rmtree(where, ignore_errors=True)  # its inventory, state and outputs: nothing left behind
    try:
        doc = json.loads(out) if out.strip() else {}
    except ValueError:
        doc = {}
    if not doc or "pid" not in hold:  # the run itself failed, or rank 2 never came up: say why, never "not named"
        hold["failed"] = f"exit {proc.returncode}; rank {RANK} {'up' if 'pid' in hold else 'never up'}; " + \
            " | ".join(err.strip().splitlines()[-6:])[-800:]
    return doc, err, hold


def _ended(doc: dict) -> dict:
    """How the run ended: a slowed or healthy run ends at --timeout; any other end is the job's own failure,
    and a result with no straggler named means nothing then."""
    failure = doc.get("first_failure") or {}
    finding = (failure.get("diagnosis") or [{}])[0]
    return {"exit_code": doc.get("exit_code"), "duration_s": doc.get("duration_s"),
            "first_failure": failure and f"{failure.get('host')} r{failure.get('rank')} {finding.get('cause')}: "
                                         f"{(finding.get('evidence') or finding.get('summary') or '')[:240]}"}


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
            "evidence": first["evidence"] if first else None, "ratio": first["ratio"] if first else None,
            **_ended(doc), **({"failed": hold["failed"]} if "failed" in hold else {})}


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
            "evidence": finding.get("evidence", "")[:300], **_ended(doc), **({"failed": hold["failed"]} if "failed" in hold else {})}


_STEP = re.compile(r"\(([0-9.]+)s/step\)")


def healthy(kind: str, watch: bool, seconds: int = 120) -> dict:
    options = ["--stall-timeout", "0", "--timeout", str(seconds)] + ([] if watch else ["--no-straggler-watch"])
    doc, err, hold = _run(kind, options, None)
    steps = [float(x) for x in _STEP.findall(err)]
    return {"kind": kind, "watch": watch, "named": [(s["host"], s["rank"]) for s in doc.get("stragglers") or []],
            "mean_step_s": steps[-1] if steps else None, **_ended(doc),
            **({"failed": hold["failed"]} if "failed" in hold and not doc else {})}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cost(kind: str, seconds: int = 150) -> dict:
    """What the straggler watch costs the node on a healthy loop: the run's own watch (StragglerWatch: its
    pace, its kept py-spy, its reuse of a dump of a rank not run since) driven here at the run's poll (1 s)
    against the job's ranks (the run itself has `--no-straggler-watch`), so that its node scripts and their
    py-spy are this process's children: their CPU seconds per wall second, the share of one core it takes on
    the node, over the whole time and in the steady rounds (issue 52). No progress lines reach this watch
    (no step time): it judges the pace from the samples alone, as it does in a run before the first one."""
    from clusterctl.executor import Connections
    from clusterctl.inventory.load import load_inventory
    from clusterctl.transport import connect
    from clusterctl.watch.straggler_watch import STEADY_SAMPLES, StragglerWatch

    result: dict = {}

    def outside(pid, hold):
        time.sleep(8)
        env = dict(item.split("=", 1) for item in open(f"/proc/{pid}/environ", "rb").read()
                   .decode(errors="replace").split("\0") if "=" in item)
        inventory = load_inventory(hold["where"] / "inventory.yaml")
        connections = Connections(connect)
        watch = StragglerWatch(inventory, env["CLUSTERCTL_RUN_ID"], connections, on_event=lambda event: None)
        rounds: list = []
        current = None
        started, before, mine = time.monotonic(), children_cpu(), resource.getrusage(resource.RUSAGE_SELF)
        while time.monotonic() - started < seconds and os.path.exists(f"/proc/{pid}"):
            pace = watch._pace()
            watch.check(inventory.hosts)
            if watch._round is None and current is not None:  # a round ended and was judged: what it cost
                cpu0, t0 = current.pop("cpu0"), current.pop("t0")
                rounds.append({**current, "cpu_s": round(children_cpu() - cpu0, 3), "wall_s": round(time.monotonic() - t0, 2)})
                current = None
            if watch._round is not None and current is None:
                current = {"samples": pace[0], "interval_s": pace[1], "cpu0": children_cpu(), "t0": time.monotonic()}
            time.sleep(1.0)
        wall, cpu, after = time.monotonic() - started, children_cpu() - before, resource.getrusage(resource.RUSAGE_SELF)
        watch.kept.forget(connections)

        def share(chosen):
            return round(sum(r["cpu_s"] for r in chosen) / sum(r["wall_s"] for r in chosen), 4) if chosen else None

        result.update({"seconds": round(wall, 1), "node_cpu_s": round(cpu, 3), "core_share": round(cpu / wall, 4),
                       "core_share_after_first_round": share(rounds[1:]),  # the first ships and unpacks py-spy
                       "core_share_steady": share([r for r in rounds if r["samples"] == STEADY_SAMPLES]),
                       "controller_cpu_s": round(after.ru_utime + after.ru_stime - mine.ru_utime - mine.ru_stime, 3),
                       "named": [[s["host"], s["rank"]] for s in watch.found()], "rounds": rounds})

    _run(kind, ["--stall-timeout", "0", "--timeout", str(seconds + 50), "--no-straggler-watch"], outside)
    return {"kind": kind, **result}


def measured(part, *args) -> dict:
    """`part(*args)` with when it began and the range of the 1-minute load average while it ran (this
    machine is shared: the load says how far a number is from a quiet node's)."""
    loads, done = [os.getloadavg()[0]], threading.Event()

    def watch_load():
        while not done.wait(5):
            loads.append(os.getloadavg()[0])

    began = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    thread = threading.Thread(target=watch_load, daemon=True)
    thread.start()
    try:
        result = part(*args)
    finally:
        done.set()
    return {**result, "at": began, "load_1min": [min(loads), max(loads)]}


def merged(path: Path, report: dict, kinds: list[str], parts: list[str]) -> dict:
    """The earlier results in `path` with this run's in place of those it measured again (the same part and
    kind): one file holds every kind, measured at different times."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):
        return report
    for part in ("slowed", "frozen", "healthy", "long", "cost"):
        again = part in parts
        kept = [e for e in earlier.get(part, []) if not (again and e.get("kind") in kinds)]
        report[part] = kept + report[part]
    report["started"] = earlier.get("started", report["started"])
    report["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kinds", default="ddp")
    parser.add_argument("--shares", default="0.23,0.44")
    parser.add_argument("--parts", default="slowed,frozen,healthy,cost", help="and `long`")
    parser.add_argument("--long-s", type=int, default=600)
    parser.add_argument("--out", default="", help="the JSON file: results of other kinds or parts already there are kept")
    args = parser.parse_args()
    kinds, parts = args.kinds.split(","), args.parts.split(",")
    report: dict = {"machine": f"{os.cpu_count()} CPUs", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "slowed": [], "frozen": [], "healthy": [], "long": [], "cost": []}
    for kind in kinds:
        if "slowed" in parts:
            report["slowed"] += [measured(slowed, kind, float(share)) for share in args.shares.split(",")]
        if "frozen" in parts:
            report["frozen"].append(measured(frozen, kind))
        if "healthy" in parts:
            report["healthy"] += [measured(healthy, kind, True), measured(healthy, kind, False)]
        if "long" in parts:
            report["long"].append(measured(healthy, kind, True, args.long_s))
        if "cost" in parts:
            report["cost"].append(measured(cost, kind))
        print(json.dumps(report, indent=1), file=sys.stderr, flush=True)
    if args.out:
        report = merged(Path(args.out), report, kinds, parts)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
