"""`clusterctl up` on the Docker sandbox: warm (nothing to change) and cold (the image is in
the registry but on no node: it is removed through each node's own engine first).

`up` runs the built-in flow (playbooks/up.yaml): stale-rank cleanup, pull, same-image
check, container, preflight checks.
"""
from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

from common import BEFORE, BEFORE_LABEL, WORK, clusterctl_argv, clusterctl_env, fresh_dir, log, rounds, timed


def up_argv(sandbox) -> list[str]:
    return clusterctl_argv("up", sandbox.inventory_path)


def measure_warm(sandbox, reps: int) -> dict:
    n = len(sandbox.nodes)
    env = clusterctl_env(fresh_dir(WORK / f"up-warm-{n}"))
    log(f"up on {n} docker nodes: one converging run, then {reps} warm rounds")
    first = timed(up_argv(sandbox), env=env, timeout=900)
    first.pop("_stdout", None)
    if first["rc"] != 0:
        log(f"  first up failed: {first.get('err', '')[-400:]}")
    log(f"  first up: {first['wall']:.2f}s")
    before = {f"{BEFORE_LABEL} up (warm)": lambda: timed(up_argv(sandbox), env=clusterctl_env(
        WORK / f"up-warm-{n}", before=True))} if BEFORE else {}
    samples = rounds(reps, {"clusterctl up (warm)": lambda: timed(up_argv(sandbox), env=env), **before})
    return {"nodes": n, "first": first, "samples": samples}


def remove_image(sandbox) -> None:
    """The container and the image off every node, through that node's engine."""
    def one(node) -> None:
        docker = ["docker", "-H", node.docker_host]
        subprocess.run([*docker, "rm", "-f", "cc-sandbox"], capture_output=True, timeout=120)
        subprocess.run([*docker, "rmi", "-f", sandbox.image], capture_output=True, timeout=120)
        left = subprocess.run([*docker, "image", "inspect", sandbox.image], capture_output=True, timeout=60)
        if left.returncode == 0:
            raise RuntimeError(f"{node.name} still has {sandbox.image}")

    with ThreadPoolExecutor(max_workers=len(sandbox.nodes)) as pool:
        list(pool.map(one, sandbox.nodes))


def measure_cold(sandbox, reps: int) -> dict:
    n = len(sandbox.nodes)
    env = clusterctl_env(fresh_dir(WORK / f"up-cold-{n}"))
    log(f"cold up on {n} docker nodes (image removed first), {reps} rounds")
    samples = rounds(reps, {"clusterctl up (cold)": lambda: (remove_image(sandbox), timed(up_argv(sandbox), env=env))[1]})
    return {"nodes": n, "samples": samples}
