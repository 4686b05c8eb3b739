"""`clusterctl launch --from-env`: platform variables -> node identity (pure), the node
probe on captured tool outputs, and real launches on this machine (two launchers
started by hand with only the platform variables, as a platform would start them)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterctl.cli import main

from unit.test_launch_from_env import REPO, inventory
PLATFORM_VARS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "CLUSTERCTL_RUN_ID", "CUDA_VISIBLE_DEVICES",
                 "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


# --------------------------------------------------------------------------- on this machine


def free_port() -> int:
    from clusterctl_helpers import free_port as below_ephemeral  # no outgoing connection takes it meanwhile

    return below_ephemeral()


def write_local_inventory(tmp_path: Path, divides: bool = True) -> Path:
    """inventory/local.yaml's job, one rank per node, no container, this machine."""
    path = tmp_path / "inventory.yaml"
    path.write_text(f"""\
name: from-env
hosts:
  - {{name: local, connection: local}}
job:
  command: [{REPO / 'examples' / 'generate.py'}]
  args: [--task, t2v-tiny, --size, "64*48", --frame_num, "8", --ulysses_size, "{{world_size}}",
         --prompt, "{{prompt}}", --save_file, "{{outputs}}/{{run_id}}.gif"]
  nproc_per_node: 1
  {'world_size_divides: 8' if divides else ''}
  outputs: {tmp_path / 'outputs'}
  python: {sys.executable}
checks:
  ib: off
  shm_min: 64m
""")
    (tmp_path / "prompt.txt").write_text("A cat walks on the grass, realistic style.\n")
    return path


def platform_env(port: int, world: int, rank: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in PLATFORM_VARS and not k.startswith("PET_")}
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world), "RANK": str(rank),
                "CLUSTERCTL_STATE": str(Path(env.get("TMPDIR", "/tmp")) / "clusterctl-test-state")})
    return env


def start_launchers(tmp_path: Path, inventory: Path, world: int, ranks, join_timeout: int = 10):
    port = free_port()
    procs = []
    for rank in ranks:
        log = open(tmp_path / f"launcher{rank}.log", "w")
        procs.append((subprocess.Popen(
            [sys.executable, "-m", "clusterctl", "launch", "--from-env", "--platform", "nodes", "-i", str(inventory),
             "--prompt-file", str(tmp_path / "prompt.txt"), "--join-timeout", str(join_timeout)],
            env=platform_env(port, world, rank), cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT), log))
    return procs


def wait_all(procs, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    codes = []
    for proc, log in procs:
        try:
            codes.append(proc.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(None)
        log.close()
    return codes


@pytest.mark.slow
def test_two_launchers_started_by_hand_with_platform_variables_run_the_job(tmp_path):
    pytest.importorskip("torch")
    inventory = write_local_inventory(tmp_path)
    codes = wait_all(start_launchers(tmp_path, inventory, world=2, ranks=(0, 1)), timeout=60)
    logs = [(tmp_path / f"launcher{r}.log").read_text() for r in (0, 1)]
    assert codes == [0, 0], logs
    gifs = list((tmp_path / "outputs").glob("*.gif"))
    assert len(gifs) == 1 and gifs[0].read_bytes()[:6] == b"GIF89a"
    assert "--node-rank=1" in logs[1] and "world 2" in logs[0]


@pytest.mark.slow
def test_world_size_larger_than_the_nodes_that_show_up_fails_within_the_join_timeout(tmp_path):
    pytest.importorskip("torch")
    inventory = write_local_inventory(tmp_path, divides=False)
    started = time.monotonic()
    codes = wait_all(start_launchers(tmp_path, inventory, world=3, ranks=(0, 1), join_timeout=10), timeout=40)
    elapsed = time.monotonic() - started
    logs = [(tmp_path / f"launcher{r}.log").read_text() for r in (0, 1)]
    assert codes == [1, 1], logs
    assert elapsed < 30
    assert "only 2 of 3 nodes joined the rendezvous within 10s" in logs[0]
    assert "WORLD_SIZE=3 was read as 3 nodes" in logs[0]
    assert "the rendezvous did not complete within 10s" in logs[1]


def test_world_size_that_breaks_world_size_divides_is_refused_before_torchrun(tmp_path, capsys):
    inventory = write_local_inventory(tmp_path)
    code = main(["launch", "--from-env", "--platform", "nodes", "-i", str(inventory), "--prompt-file",
                 str(tmp_path / "prompt.txt")], env=platform_env(free_port(), world=3, rank=1))
    err = capsys.readouterr().err
    assert code == 2 and "world size 3" in err and "WORLD_SIZE=3" in err


def test_dry_run_prints_the_plan_and_command_as_json_and_starts_nothing(tmp_path, capsys):
    inventory = write_local_inventory(tmp_path)
    port = free_port()
    code = main(["launch", "--from-env", "--dry-run", "--json", "-i", str(inventory), "--prompt-file",
                 str(tmp_path / "prompt.txt")], env=platform_env(port, world=2, rank=0))
    document = json.loads(capsys.readouterr().out)
    assert code == 0 and document["ok"] and document["dry_run"]
    assert document["platform"] == "nodes" and document["world_size"] == 2 and document["ranks"] == [0, 0]
    assert f"--rdzv-endpoint=127.0.0.1:{port}" in document["argv"] and "--node-rank=0" in document["argv"]
    assert {c["check"] for c in document["checks"]} >= {"platform", "gpus", "rdzv_route", "shm", "rdzv_port_free"}
    assert not (tmp_path / "outputs").exists()
