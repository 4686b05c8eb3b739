"""The watch on loops as users write them (issue 49), for real on this machine: torchrun's gloo ranks of
tests/fixtures/jobs/ddp_plain.py (a model, DDP or FSDP2's fully_shard, an optimizer, loss.backward(),
no torch.distributed call of its own) and DeepSpeed ZeRO-2 (tests/fixtures/jobs/ds_plain.py) and a Hugging Face Trainer loop (tests/fixtures/jobs/hf_trainer.py) under
`clusterctl run` with a `connection: local` host, one rank slowed or frozen FROM OUTSIDE the job
(tests/fixtures/noisy.py: SIGSTOP/SIGCONT duty cycles, SIGSTOP for good). The waits are in C++ under
loss.backward() or in the engine: the verdict sees them by the ranks' kernel state (asleep in a
library: node/straggler_verdict.py); the frozen rank is named by its process state (watch/rollcall.py)."""
from __future__ import annotations

import json
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from clusterctl_helpers import FIXTURE_JOBS, wait_until
from fixtures.noisy import DutyCycle, find_rank, freeze, thaw

from local.test_logs_stop import _clusterctl
from clusterctl_helpers import free_port


def _free_port() -> int:
    return free_port()  # tests/clusterctl_helpers.py: below the ephemeral range


def _inventory(tmp_path: Path, job: str, args: list, name: str, nproc: int = 3, extra: str = "") -> tuple[Path, str]:
    pytest.importorskip("torch")
    pytest.importorskip("clusterctl.watch.sampler").pyspy_binary() or pytest.skip("no py-spy installed")
    cluster = f"{name}-{os.getpid()}"
    path = tmp_path / "inventory.yaml"
    path.write_text(f"""name: {cluster}
hosts:
  - {{name: local, connection: local}}
rendezvous: {{port: {_free_port()}}}
job:
  command: [{FIXTURE_JOBS / job}]
  args: {json.dumps(args)}
  nproc_per_node: {nproc}
  python: {sys.executable}
  outputs: {tmp_path / 'outputs'}
{extra}checks: {{ib: off}}
""")
    (tmp_path / "prompt.txt").write_text("a cat\n")
    return path, cluster


def _run(tmp_path: Path, inventory: Path, *options: str, outside=None) -> dict:
    """`clusterctl run --json` to its end, `outside(marker)` in a thread meanwhile: the document."""
    proc = _clusterctl(tmp_path, "run", "-i", str(inventory), *options, str(tmp_path / "prompt.txt"))
    cluster = inventory.read_text().split("\n", 1)[0].split(": ", 1)[1]
    done: list = []
    helper = threading.Thread(target=lambda: done.append(outside([f"CLUSTERCTL_CLUSTER={cluster}"])), daemon=True) \
        if outside else None
    if helper:
        helper.start()
    out, err = proc.communicate(timeout=600)
    if helper:
        helper.join(30)
    assert out.strip(), err[-3000:]
    return json.loads(out)


def _slowed(rank: int, share: float, hold: dict):
    """From outside: rank `rank` held `share` of the time from when it is up until the run ends."""
    def outside(marker):
        pid = wait_until(lambda: find_rank(marker, rank), 120, what=f"rank {rank}")
        hold["pid"] = pid
        cycle = DutyCycle(pid, share)
        try:
            while os.path.exists(f"/proc/{pid}"):
                time.sleep(0.5)
        finally:
            cycle.stop()
    return outside


def _frozen(rank: int, after_s: float, hold: dict):
    def outside(marker):
        pid = wait_until(lambda: find_rank(marker, rank), 120, what=f"rank {rank}")
        hold["pid"] = pid
        time.sleep(after_s)
        freeze(pid)
        hold["frozen_at"] = time.time()
    return outside


# the loops: (job, its arguments); DeepSpeed's CPU accelerator builds its shm op on the first run (~2 min, kept in
# ~/.cache/torch_extensions)
LOOPS = {"ddp": ("ddp_plain.py", ["--kind", "ddp"]), "fsdp2": ("ddp_plain.py", ["--kind", "fsdp2"]),
         "fsdp1": ("ddp_plain.py", ["--kind", "fsdp1"]), "deepspeed": ("ds_plain.py", []),
         "zero1": ("ds_plain.py", ["--stage", "1"]), "zero3": ("ds_plain.py", ["--stage", "3"]),
         "trainer": ("hf_trainer.py", [])}


def _loop(tmp_path: Path, kind: str, steps: int, name: str) -> Path:
    """The inventory of LOOPS[kind] for `steps` steps (DeepSpeed's tests skipped where it is not installed)."""
    if kind in ("deepspeed", "zero1", "zero3", "trainer"):
        pytest.importorskip("transformers" if kind == "trainer" else "deepspeed")
    job, args = LOOPS[kind]
    return _inventory(tmp_path, job, [*args, "--steps", str(steps)], f"{name}-{kind}")[0]


def _finding(document: dict) -> dict:
    failure = document.get("first_failure") or {}
    return next((f for f in failure.get("diagnosis") or [] if f.get("cause") == "rank_hang"), {})


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_a_plain_loop_with_a_rank_slowed_from_outside_names_it(tmp_path, kind):
    inventory = _loop(tmp_path, kind, 250, "loop")
    document = _run(tmp_path, inventory, "--stall-timeout", "0", outside=_slowed(2, 0.6, {}))
    assert [(s["host"], s["rank"]) for s in document["stragglers"]][:1] == [("local", 2)], document
    print(f"\n{kind}: {document['stragglers'][0]}")


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_a_plain_loop_with_a_rank_frozen_from_outside_names_its_host_rank_and_state(tmp_path, kind):
    inventory = _loop(tmp_path, kind, 100000, "freeze")
    hold: dict = {}
    try:
        document = _run(tmp_path, inventory, "--stall-timeout", "10", outside=_frozen(1, 5, hold))
    finally:
        if "pid" in hold:
            thaw(hold["pid"])
    failure = document["first_failure"]
    assert (failure["host"], failure["rank"]) == ("local", 1), failure
    finding = _finding(document)
    assert (finding["host"], finding["rank"]) == ("local", 1), failure
    assert "rank 1 on local is stopped (state T" in finding["evidence"], finding
    assert re.search(r"\bwaits? in ", finding["evidence"]), finding  # the others' frames: one group or several


@pytest.mark.slow
@pytest.mark.heavy
def test_a_plain_ddp_loop_left_alone_names_nobody(tmp_path):
    inventory, _ = _inventory(tmp_path, "ddp_plain.py", ["--kind", "ddp", "--steps", "400"], "loop-quiet")
    document = _run(tmp_path, inventory, "--stall-timeout", "0")
    assert document["ok"] and document["stragglers"] == [], document


def test_a_py_spy_that_hangs_is_killed_and_its_rank_is_said_unread_with_its_state(tmp_path):
    """The node script (watch/sampler.py) with a py-spy on PATH that never answers a dump: killed after
    SPY_TIMEOUT_S (the run's 120 s bound is the fake's hour cut short), the rank reported unread (never a
    hang of the watch), its state read all the same."""
    import subprocess

    from clusterctl.watch import sampler
    from clusterctl.watch.rollcall import roll_call

    fake = tmp_path / "bin" / "py-spy"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "py-spy 0.4.3"; exit 0; }\nexec sleep 3600\n')
    fake.chmod(0o755)
    marker = {"CLUSTERCTL_CLUSTER": "hangs", "CLUSTERCTL_HOST": "local", "CLUSTERCTL_RUN_ID": "r1", "RANK": "0"}
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env={**os.environ, **marker})
    try:
        time.sleep(0.5)
        argv = ["sh", "-c", sampler._SCRIPT, "clusterctl-stacks", "hangs", "local", "r1", "1", "0", "", "--nonblocking",
                "", "", "ship"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                             env={**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}).stdout
    finally:
        rank.kill()
        rank.wait()
    node = sampler.parse_node_output(out, "local")
    (read,) = node.samples[0]
    assert read.rank == 0 and not read.frames and read.state == "S", out[-2000:]
    assert read.error == f"py-spy did not answer within {sampler.SPY_TIMEOUT_S} s (killed)", read
    assert roll_call([read], [0]).failed == (read,)


@pytest.mark.slow
@pytest.mark.heavy
def test_a_detached_plain_ddp_loop_slowed_from_outside_is_named_by_its_keepers_and_the_supervisor(tmp_path):
    """`run --detach`: each keeper reads its ranks' states with py-spy's stacks (node/node_stragglers.py), the
    supervisor names the rank (node/straggler_verdict.py); `status --json` has it while the run goes on."""
    inventory = _loop(tmp_path, "ddp", 100000, "detached")
    cluster = inventory.read_text().split("\n", 1)[0].split(": ", 1)[1]
    proc = _clusterctl(tmp_path, "run", "-i", str(inventory), "--stall-timeout", "0", "--detach",
                       str(tmp_path / "prompt.txt"))
    out, err = proc.communicate(timeout=300)
    run_id = json.loads(out)["run_id"]
    pid = wait_until(lambda: find_rank([f"CLUSTERCTL_CLUSTER={cluster}"], 2), 120, what="rank 2")
    cycle = DutyCycle(pid, 0.6)
    try:
        def named():
            status = _clusterctl(tmp_path, "status", "-i", str(inventory))
            said, _ = status.communicate(timeout=120)
            run = next((r for r in json.loads(said).get("runs") or () if r["run_id"] == run_id), {})
            return run if run.get("stragglers") else None

        run = wait_until(named, 240, interval=3.0, what="status --json to name a straggler")
    finally:
        cycle.stop()
        _clusterctl(tmp_path, "stop", "-i", str(inventory), run_id).communicate(timeout=120)
    assert [(s["host"], s["rank"]) for s in run["stragglers"]][:1] == [("local", 2)], run
