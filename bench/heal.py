"""A run that heals itself (issue 35), timed phase by phase on the Docker sandbox: the job on node1 and
node2 (`job.nodes: 2`, the other nodes spares, one gloo rank a node, tests/fixtures/jobs/checkpointed.py
saving a checkpoint each second), node2 cut off the network after step 3. From the cut:

- detection: clusterctl says node2 is lost (the live log's "node lost" line)
- stop: the survivors' ranks stopped (the "stopped:" line)
- replan: the failure classified, the node left out, the spare named ("relaunching on" line)
- relaunch: the 1 s backoff, the relaunch's stop, the run dirs set aside, the facts and the plan, and
  attempt 2's ranks launched (its "launching N ranks on M nodes" line)
- resume: the job's rank 0 says it resumed from the checkpoint ("resumed from" line of attempt 2)

Each line's time is when it reached this process (clusterctl's stderr, read as it comes). Goal: the
job relaunched on the spare within 60 s of the cut. `python3 bench/heal.py` (as root) runs it alone.

`measure_replicas` (issue 50): the same on node-local checkpoints with `job.checkpoint.replicas: 1`, a node
cut every N seconds: the engine's own split of each relaunch and the run's goodput. `measure_gib`: the
issue's goal (a 1 GiB checkpoint per node, the median of 3 runs); `measure_replica_cost`: what the copies
cost the DDP loop's step, and the bytes moved per step.
"""
from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, WORK, clusterctl_argv, clusterctl_env, fresh_dir, log  # noqa: E402

CONTAINER_OUTPUTS = "/workspace/output"
MARKS = (("detection", "node lost"), ("stop", "stopped:"), ("replan", "relaunching on"),
         ("relaunch", " ranks on "), ("resume", "resumed from /"))


def measure(sandbox, state: Path, steps: int = 20) -> dict:
    jobs = Path(sandbox.shared_outputs) / "heal-bench"
    shutil.rmtree(jobs, ignore_errors=True)
    jobs.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "fixtures" / "jobs" / "checkpointed.py", jobs / "checkpointed.py")
    inventory = _inventory(sandbox, WORK / "heal.yaml", steps)
    prompt = WORK / "heal-prompt.txt"
    prompt.write_text("a cat\n")
    proc = subprocess.Popen(clusterctl_argv("run", "-i", inventory, prompt), env=clusterctl_env(state),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: seen.extend((time.time(), line) for line in proc.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 180
        while not (jobs / "ckpt" / "step-3" / "COMPLETE").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        cut = time.time()
        sandbox.cut_network("node2")
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        sandbox.restore_network("node2")
    reader.join(10)
    return _phases(cut, seen, proc.returncode, jobs)


def measure_replicas(sandbox, state: Path, every_s: float = 60.0, steps: int = 90, step_s: float = 1.0) -> dict:
    """Issue 50: a detached run on node-local checkpoints (tests/fixtures/jobs/sharded.py, each rank's shard
    in its own container's /tmp, `job.checkpoint.replicas: 1`), the job on 2 nodes, the others spares; a
    node in use cut off every `every_s` seconds while a spare is left. Per relaunch the engine's split
    (attempts[].timings: detection, stop, replan, backoff, transfer, launch, first step), and the goodput:
    the steps' own time over the run's wall time."""
    from clusterctl.ground.records import RunStore
    from clusterctl.state import State

    started = time.time()
    jobs, doc, inventory, run_id = _sharded_detached(sandbox, state, "heal-bench-replicas", "/tmp/clusterctl-bench-ckpt",
                                                     steps, step_s, restarts=None)
    cut, spares = [], len(doc["hosts"]) - 2
    record = {}
    while time.time() - started < steps * step_s * 4 + 300:
        time.sleep(2)
        subprocess.run(clusterctl_argv("status", "--json", "-i", inventory), env=clusterctl_env(state),
                       capture_output=True, text=True)
        record = RunStore(State(state)).read_or_new(run_id).to_json()
        if record.get("state") not in (None, "running"):
            break
        hosts = ((record.get("attempts") or [{}])[-1]).get("hosts") or []
        if len(cut) < spares and time.time() - started > every_s * (len(cut) + 1) and len(hosts) == 2:
            victim = hosts[-1]
            sandbox.cut_network(victim)
            cut.append((victim, time.time()))
    for victim, _ in cut:
        sandbox.restore_network(victim)
    wall = (record.get("ended") or time.time()) - started
    done = jobs / "out" / "done.json"
    return {"run_id": run_id, "state": record.get("state"), "exit_code": record.get("exit_code"),
            "done": json.loads(done.read_text()) if done.exists() else None, "cuts": len(cut), "every_s": every_s,
            "goodput": round(steps * step_s / wall, 3) if wall else None, "wall_s": round(wall, 1),
            "relaunches": [{"resumed_from": a.get("resumed_from"), **(a.get("timings") or {})}
                           for a in (record.get("attempts") or [])[1:]],
            "measured": time.strftime("%Y-%m-%d %H:%M")}


def measure_gib(sandbox, state: Path, runs: int = 3, pad_mb: int = 1024, steps: int = 8, step_s: float = 5.0) -> dict:
    """Issue 50's goal, measured: a node lost -> training resumed on the spare from its replica, with a
    `pad_mb` MiB checkpoint per node (tests/fixtures/jobs/sharded.py `--pad_mb`, one gloo rank a node, each
    node keeping 3 steps: a copy slower than the steps a node keeps never completes, `replicas: 1`), a detached run (the engine's own split in attempts[].timings),
    node2 (the last rank) cut once step 5 is done; `runs` runs, each phase's median. `resumed_s`: from the
    cut to attempt 2's first step done (the job's own clock); `lost_steps`: the steps done before the cut
    and run again."""
    each = [_one_gib(sandbox, state, number, pad_mb, steps, step_s) for number in range(runs)]
    keys = ("detection_s", "stop_s", "replan_s", "backoff_s", "transfer_s", "launch_s", "first_step_s", "resumed_s",
            "lost_steps")
    medians = {k: statistics.median(r[k] for r in each if r.get(k) is not None)
               for k in keys if any(r.get(k) is not None for r in each)}
    return {"runs": each, "median": medians, "pad_mb": pad_mb, "measured": time.strftime("%Y-%m-%d %H:%M")}


def _one_gib(sandbox, state: Path, number: int, pad_mb: int, steps: int, step_s: float) -> dict:
    from clusterctl.ground.records import RunStore
    from clusterctl.state import State

    ckpt = f"/tmp/clusterctl-bench-gib-{number}"
    jobs, doc, inventory, run_id = _sharded_detached(sandbox, state, "heal-bench-gib", ckpt, steps, step_s, restarts=2,
                                                     more=("--pad_mb", str(pad_mb), "--keep", "3"))
    progress, cut, cut_step, resumed, record = jobs / "out" / "progress.json", None, None, None, {}
    deadline = time.time() + 600
    try:
        while time.time() < deadline:
            time.sleep(0.2)
            try:
                now = json.loads(progress.read_text())
            except (OSError, ValueError):
                now = {}
            if cut is None and now.get("attempt") == 1 and now.get("step", 0) >= 5:
                cut, cut_step = time.time(), now["step"]
                sandbox.cut_network("node2")
            if cut is not None and resumed is None and now.get("attempt") == 2:
                resumed = now["at"] - cut
            if cut is not None and int(time.time()) % 3 == 0:
                subprocess.run(clusterctl_argv("status", "--json", "-i", inventory), env=clusterctl_env(state),
                               capture_output=True, text=True)
                record = RunStore(State(state)).read_or_new(run_id).to_json()
                if record.get("state") not in (None, "running"):
                    break
    finally:
        sandbox.restore_network("node2")
    attempts = record.get("attempts") or [{}, {}]
    second = attempts[1] if len(attempts) > 1 else {}
    step = int((second.get("resumed_from") or "step-0").rsplit("-", 1)[-1])
    _forget(sandbox, doc, ckpt)
    time.sleep(20)  # node2's ranks and keeper, cut off, stop as their lease runs out
    return {"run_id": run_id, "state": record.get("state"), "cut_at_step": cut_step,
            "resumed_from": second.get("resumed_from"), "lost_steps": cut_step - step if cut_step else None,
            "resumed_s": round(resumed, 1) if resumed is not None else None, **(second.get("timings") or {}),
            "replica_events": [e.get("kind") for a in attempts for e in a.get("replica_events") or []]}


def _forget(sandbox, doc: dict, ckpt: str) -> None:
    """Each node's checkpoints and replicas of the run gone (its container's /tmp: GiBs)."""
    for node in [h["name"] for h in doc["hosts"]]:
        subprocess.run(["docker", "-H", sandbox.docker_host(node), "exec", doc["container"]["name"], "rm", "-rf", ckpt],
                       capture_output=True)


def measure_replica_cost(sandbox, state: Path, steps: int = 500, pad_mb: int = 64, every: int = 50) -> dict:
    """What a node's checkpoint replicas cost the rehearsal DDP loop (tests/fixtures/jobs/ddp_plain.py, one
    gloo rank a node, 2 nodes, attached): the same run with a `pad_mb` MiB checkpoint every `every` steps,
    `replicas: 0` then `1`; the loop's step time (its save apart) and the bytes the copiers moved."""
    found = {}
    for replicas in (0, 1, 0, 1):  # interleaved: the machine's load drifts
        jobs, doc, where = _job(sandbox, "replica-cost", "ddp_plain.py")
        ckpt = "/tmp/clusterctl-bench-cost"
        doc["job"].update(command=[f"{where}/ddp_plain.py"], nproc_per_node=1, nodes=2, restarts=1,
                          args=["--steps", str(steps), "--width", "512", "--batch", "64", "--every", "50",
                                "--ckpt", ckpt, "--ckpt_every", str(every), "--pad_mb", str(pad_mb),
                                "--times", f"{where}/times.json"],
                          checkpoint={"dir": ckpt, "complete": "COMPLETE", "replicas": replicas})
        inventory = WORK / "replica-cost.yaml"
        inventory.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
        prompt = WORK / "heal-prompt.txt"
        prompt.write_text("a cat\n")
        out = subprocess.run(clusterctl_argv("run", "--json", "-i", inventory, prompt), env=clusterctl_env(state),
                             capture_output=True, text=True)
        run_id = json.loads(out.stdout)["run_id"]
        times = json.loads((jobs / "times.json").read_text())
        moved = sum(int(m) for log in (Path(sandbox.shared_outputs) / "logs" / run_id).glob("*/replica.log")
                    for m in re.findall(r"\((\d+) bytes\) copied to", log.read_text()))
        _forget(sandbox, doc, ckpt)
        found.setdefault(str(replicas), []).append({
            "step_median_s": round(statistics.median(times["steps"]), 4), "step_mean_s": round(statistics.mean(times["steps"]), 4),
            "save_median_s": round(statistics.median(times["saves"]), 3) if times["saves"] else None,
            "bytes_per_step": round(moved / steps), "rc": out.returncode})
    return {**found, "steps": steps, "pad_mb": pad_mb, "every": every, "measured": time.strftime("%Y-%m-%d %H:%M")}


def _sharded_detached(sandbox, state: Path, name: str, ckpt: str, steps: int, step_s: float,
                      restarts: Optional[int], more: tuple = ()) -> tuple[Path, dict, Path, str]:
    """sharded.py detached on 2 nodes (the others spares), its checkpoints in each container's `ckpt` with
    `replicas: 1`, `restarts` (None: one a spare): (its job dir, inventory document and path, run id)."""
    jobs, doc, where = _job(sandbox, name, "sharded.py")
    doc["job"].update(command=[f"{where}/sharded.py"], nproc_per_node=1, nodes=2,
                      restarts=len(doc["hosts"]) if restarts is None else restarts, lost_after=6,
                      args=["--steps", str(steps), "--step_s", str(step_s), "--ckpt", ckpt, "--out", f"{where}/out", *more],
                      checkpoint={"dir": ckpt, "complete": "COMPLETE", "replicas": 1})
    doc["health"] = {"rules": {kind: {"quarantine_after": "never"} for kind in ("heal_excluded", "node_lost")}}
    inventory = WORK / f"{name}.yaml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    prompt = WORK / "heal-prompt.txt"
    prompt.write_text("a cat\n")
    out = subprocess.run(clusterctl_argv("run", "--detach", "--json", "-i", inventory, prompt), env=clusterctl_env(state),
                         capture_output=True, text=True, check=True)
    return jobs, doc, inventory, json.loads(out.stdout)["run_id"]


def _job(sandbox, name: str, fixture: str) -> tuple[Path, dict, str]:
    """A fresh job dir `name` in the shared outputs holding tests/fixtures/jobs/`fixture`: (its path here,
    the sandbox's inventory document without world_size_divides, its path in the containers)."""
    jobs = Path(sandbox.shared_outputs) / name
    shutil.rmtree(jobs, ignore_errors=True)
    jobs.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "fixtures" / "jobs" / fixture, jobs / fixture)
    doc = yaml.safe_load(Path(sandbox.inventory_path).read_text())
    doc["job"].pop("world_size_divides", None)
    return jobs, doc, f"{CONTAINER_OUTPUTS}/{name}"


def _phases(cut: float, seen: list, rc: int, jobs: Path) -> dict:
    result, after, previous = {"rc": rc}, cut, cut
    for name, text in MARKS:
        at = next((t for t, line in seen if t >= after and text in line), None)
        if at is None:
            result[name] = None
            continue
        result[f"{name}_s"] = round(at - previous, 1)  # this phase alone
        result[f"{name}_since_cut_s"] = round(at - cut, 1)
        after = previous = at
    done = jobs / "out" / "done.json"
    result["done"] = json.loads(done.read_text()) if done.exists() else None
    result["measured"] = time.strftime("%Y-%m-%d %H:%M")
    return result


def _inventory(sandbox, path: Path, steps: int) -> Path:
    doc = yaml.safe_load(Path(sandbox.inventory_path).read_text())
    where = f"{CONTAINER_OUTPUTS}/heal-bench"
    doc["job"].pop("world_size_divides", None)
    doc["job"].update(command=[f"{where}/checkpointed.py"], nproc_per_node=1, nodes=2, restarts=2,
                      args=["--steps", str(steps), "--step_s", "1", "--ckpt", f"{where}/ckpt", "--out", f"{where}/out"],
                      checkpoint={"dir": f"{where}/ckpt", "complete": "COMPLETE"})
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    return path


if __name__ == "__main__":
    from clusterctl.sandbox import down, up

    log("sandbox: 4 nodes with Docker Engines")
    box = up(4, docker=True)
    try:
        state = fresh_dir(WORK / "heal-state")
        subprocess.run(clusterctl_argv("up", box.inventory_path), env=clusterctl_env(state), check=True,
                       capture_output=True)
        print(json.dumps(measure(box, state), indent=2))
        print(json.dumps(measure_replicas(box, state), indent=2))
    finally:
        down(box.state_dir)
