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
cut every N seconds: the engine's own split of each relaunch and the run's goodput.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

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

    jobs = Path(sandbox.shared_outputs) / "heal-bench-replicas"
    shutil.rmtree(jobs, ignore_errors=True)
    jobs.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "fixtures" / "jobs" / "sharded.py", jobs / "sharded.py")
    doc = yaml.safe_load(Path(sandbox.inventory_path).read_text())
    where, ckpt = f"{CONTAINER_OUTPUTS}/heal-bench-replicas", "/tmp/clusterctl-bench-ckpt"
    doc["job"].pop("world_size_divides", None)
    doc["job"].update(command=[f"{where}/sharded.py"], nproc_per_node=1, nodes=2, restarts=len(doc["hosts"]),
                      lost_after=6, args=["--steps", str(steps), "--step_s", str(step_s), "--ckpt", ckpt,
                                          "--out", f"{where}/out"],
                      checkpoint={"dir": ckpt, "complete": "COMPLETE", "replicas": 1})
    doc["health"] = {"rules": {kind: {"quarantine_after": "never"} for kind in ("heal_excluded", "node_lost")}}
    inventory = WORK / "heal-replicas.yaml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    prompt = WORK / "heal-prompt.txt"
    prompt.write_text("a cat\n")
    started = time.time()
    out = subprocess.run(clusterctl_argv("run", "--detach", "--json", "-i", inventory, prompt), env=clusterctl_env(state),
                         capture_output=True, text=True, check=True)
    run_id = json.loads(out.stdout)["run_id"]
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
