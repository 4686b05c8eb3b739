"""The watch on a loop as users write it, on the rehearsal cluster (issue 49): 3 nodes x 2 gloo ranks in
containers running tests/fixtures/jobs/ddp_plain.py (a model, DDP, an optimizer, loss.backward(); no
torch.distributed call of its own: every wait is in C++ under loss.backward()); the same with FSDP2's
fully_shard (the wait is in its hooks), DeepSpeed ZeRO-2 (ds_plain.py: inside the engine's step) and a Hugging
Face Trainer loop (hf_trainer.py: inside Accelerate's backward) are `heavy`
(DeepSpeed's CPU accelerator compiles its shm_comm op at its first start in each container: minutes on 2 cores;
that build needs `c++`, which resolves through /etc/alternatives, now in the rehearsal image). One rank is slowed or
frozen FROM OUTSIDE the job (tests/fixtures/noisy.py, from this machine, whose process table holds the
containers' ranks): held 60% of every 0.1 s, it is named as the straggler with its host; stopped for
good, the run ends with the hang named on its host and rank, quoting its process state; left alone,
nobody is named."""
from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest
import yaml

from clusterctl_helpers import CONTAINER_OUTPUTS, Cli, cluster_with_jobs, processes_with, variant, wait_until
from fixtures.noisy import DutyCycle, find_rank, freeze, thaw

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

JOBS_DIR = "loop-jobs"
# the loops: (job, its arguments); DDP runs in `make test`, the others in `make test-heavy`
LOOPS = {"ddp": ("ddp_plain.py", ["--kind", "ddp"]), "fsdp2": ("ddp_plain.py", ["--kind", "fsdp2"]),
         "deepspeed": ("ds_plain.py", []), "trainer": ("hf_trainer.py", [])}
KINDS = [pytest.param(kind, marks=[] if kind == "ddp" else [pytest.mark.heavy]) for kind in LOOPS]


def _job(sb, path: Path, *args: str, kind: str = "ddp") -> tuple[Path, list[str]]:
    job, loop_args = LOOPS[kind]

    def change(doc):
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/{job}"], args=[*loop_args, *args], nproc_per_node=2)

    path = variant(sb, path, change)
    return path, [f"CLUSTERCTL_CLUSTER={yaml.safe_load(path.read_text())['name']}", "CLUSTERCTL_HOST=node2"]


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    yield from cluster_with_jobs(sandbox, tmp_path_factory, JOBS_DIR, "ddp_plain.py", "ds_plain.py", "hf_trainer.py")


def _outside(action, marker: list[str], rank: int, hold: dict) -> threading.Thread:
    def body():
        pid = wait_until(lambda: find_rank(marker, rank), 180, interval=1.0, what=f"rank {rank} on node2")
        hold["pid"] = pid
        action(pid, hold)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def _slow(pid: int, hold: dict) -> None:
    cycle = DutyCycle(pid, 0.6)
    hold["since"] = time.time()
    while os.path.exists(f"/proc/{pid}"):
        time.sleep(0.5)
    cycle.stop()


def _freeze(pid: int, hold: dict) -> None:
    time.sleep(10)  # past the start: every rank in its loop
    freeze(pid)
    hold["since"] = time.time()


def _runs(cli) -> set:
    runs = cli.state_dir / "runs"
    return {p.name for p in runs.iterdir()} if runs.is_dir() else set()


def _stop_once_named(sb, cli, before: set, proc, stop_file: Path) -> threading.Thread:
    """Once the run's record names a straggler (run.json has it as soon as it is named), the loop is told to
    end AHEAD_STEPS past the step rank 0 last printed (ddp_plain.py --stop_file): the run then ends as a run
    with a straggler does, without the rest of its --steps (a slowed loop's minute). Rank 0 prints every 10
    steps and the ranks keep within a step of each other, so each reads the file before that step."""
    def named():
        for run_id in _runs(cli) - before:
            try:
                record = json.loads((cli.state_dir / "runs" / run_id / "run.json").read_text())
            except (OSError, ValueError):
                continue
            if record.get("stragglers"):
                return run_id
        return None

    def body():
        run_id = wait_until(lambda: named() or proc.poll() is not None, 540, interval=1.0, what="a straggler named")
        if run_id is True:  # the run ended first: its document says why
            return
        printed = [int(m) for log in (sb.shared_outputs / "logs" / run_id / "node1").glob("*/attempt_0/0/stdout.log")
                   for m in re.findall(r"^step (\d+)/", log.read_text(errors="replace"), re.M)]
        ahead = stop_file.with_suffix(".tmp")
        ahead.write_text(str(max(printed, default=0) + AHEAD_STEPS))
        ahead.rename(stop_file)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


AHEAD_STEPS = 30


@pytest.mark.parametrize("kind", KINDS)
def test_a_plain_loops_rank_slowed_from_outside_is_named_with_its_host(sandbox, cluster, tmp_path, kind):
    cli, where = cluster
    stop_file = sandbox.shared_outputs / JOBS_DIR / f"stop-{kind}"
    stop_file.unlink(missing_ok=True)
    # ddp_plain.py's loops (DDP, FSDP2) end AHEAD_STEPS after the straggler is named, their --steps only the bound
    # if nobody is; DeepSpeed's and the Trainer's (`heavy`) run their 200 steps
    stops = LOOPS[kind][0] == "ddp_plain.py"
    args = ["--steps", "400", "--stop_file", f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/{stop_file.name}"] if stops else \
        ["--steps", "200"]
    inventory, marker = _job(sandbox, tmp_path / "slow.yaml", *args, kind=kind)
    hold: dict = {}
    helper = _outside(_slow, marker, 3, hold)
    before = _runs(cli)
    proc = cli.popen("run", "-i", str(inventory), "--stall-timeout", "0", str(where / "prompt.txt"))
    stopper = _stop_once_named(sandbox, cli, before, proc, stop_file) if stops else None
    code, doc, err = Cli.finish(proc, timeout=600)
    helper.join(10)
    if stopper:
        stopper.join(10)
    assert code == 0 and doc["ok"] is True, (doc, err[-6000:])
    named = doc["stragglers"]
    assert [(s["host"], s["rank"]) for s in named][:1] == [("node2", 3)], (named, err[-6000:])
    print(f"\nnamed {named[0]['since'] - hold['since']:.1f}s after the slowdown: {named[0]}")


@pytest.mark.parametrize("kind", KINDS)
def test_a_plain_loops_rank_frozen_from_outside_is_the_hang_named_with_host_rank_and_state(sandbox, cluster, tmp_path,
                                                                                            kind):
    cli, where = cluster
    inventory, marker = _job(sandbox, tmp_path / "frozen.yaml", "--steps", "100000", kind=kind)
    hold: dict = {}
    helper = _outside(_freeze, marker, 3, hold)
    try:
        code, doc, err = Cli.finish(cli.popen("run", "-i", str(inventory), "--stall-timeout", "20",
                                              str(where / "prompt.txt")), timeout=600)
        ended = time.time()
    finally:
        helper.join(10)
        if "pid" in hold:
            thaw(hold["pid"])
    assert code != 0, (doc, err[-6000:])
    # its end released its GPU leases on every node, the frozen rank's too (the next run is never refused)
    leases = sandbox.shared_outputs / ".clusterctl-leases"
    left = [p for p in leases.glob("*/*") if p.name.startswith(("slot", "gpu")) and doc["run_id"] in p.read_text()]
    assert not left, (left, err[-3000:])
    failure = doc["first_failure"]
    assert (failure["host"], failure["rank"]) == ("node2", 3), (failure, err[-6000:])
    finding = next(f for f in failure["diagnosis"] if f["cause"] == "rank_hang")
    assert (finding["host"], finding["rank"]) == ("node2", 3), finding
    assert "rank 3 on node2 is stopped (state T" in finding["evidence"], finding
    # where the others are: all 5 in one frame, or (a real loop, sampled mid-step) split over two or three
    # groups: "every rank read (5) waits in ..." or "rank 2 on node2 and rank 4 ... in X while 3 ranks wait in Y"
    assert re.search(r"\bwaits? in ", finding["evidence"]), finding
    print(f"\nthe run ended {ended - hold['since']:.1f}s after the freeze (stall timeout 20 s): {finding['evidence']}")


@pytest.mark.heavy  # every kind: tests/local/test_watch_real_loops.py's quiet DDP loop runs in `make test`
@pytest.mark.parametrize("kind", KINDS)
def test_a_plain_loop_left_alone_names_nobody(sandbox, cluster, tmp_path, kind):
    cli, where = cluster
    inventory, _ = _job(sandbox, tmp_path / "healthy.yaml", "--steps", "200", kind=kind)
    code, doc, err = Cli.finish(cli.popen("run", "-i", str(inventory), "--stall-timeout", "0", str(where / "prompt.txt")),
                                timeout=600)
    assert code == 0 and doc["stragglers"] == [] and "[straggler]" not in err, (doc, err[-6000:])


def test_a_plain_ddp_loop_with_a_head_the_loss_never_reads_fails_diagnosed_with_its_fix(sandbox, cluster, tmp_path):
    """The user's own mistake in the same loop (ddp_plain.py --unused_head): over real sshd, dockerd and torchrun the
    run ends failed, its first failure diagnosed ddp_unused_parameters with the fix, and no rank of it left."""
    cli, where = cluster
    inventory, _ = _job(sandbox, tmp_path / "unused.yaml", "--unused_head", "--steps", "20", "--width", "64")
    code, doc = cli.json("run", "-i", str(inventory), str(where / "prompt.txt"))
    assert code != 0 and doc["ok"] is False, doc
    first = doc["first_failure"]["diagnosis"][0]
    assert first["cause"] == "ddp_unused_parameters" and "find_unused_parameters=True" in first["fix"], doc
    # a straggler round under way on a node when the ranks failed ends by itself, within its interval
    assert wait_until(lambda: not [cmd for _, cmd in processes_with(doc["run_id"]) if "pytest" not in cmd], 15,
                      what="nothing of the run left") is True


@pytest.mark.heavy  # the DDP loop's own fault runs in `make test` with connection: local (test_diagnosis_real_jobs)
@pytest.mark.parametrize("kind, args, cause, words", [
    # the loop's own `step % args.every` on rank 0 (node1): the job's code, whatever node it runs on
    ("ddp", ["--every", "0", "--steps", "20", "--width", "64"], "job_code_error", "ZeroDivisionError"),
    # transformers refusing a GPT-2 whose width its 4 heads do not divide: the model's value, not the world size
    ("trainer", ["--width", "66", "--steps", "2", "--layers", "1"], "config_divisibility", "model's own configuration"),
])
def test_a_loops_own_fault_ends_the_run_diagnosed_as_the_jobs_with_the_fix_that_fits(sandbox, cluster, tmp_path,
                                                                                       kind, args, cause, words):
    """Over real sshd, dockerd and torchrun: the run ends failed, its first failure names the job's own fault with the
    fix for its shape, and no rank of it is left."""
    cli, where = cluster
    inventory, _ = _job(sandbox, tmp_path / f"own-{kind}.yaml", *args, kind=kind)
    code, doc = cli.json("run", "-i", str(inventory), str(where / "prompt.txt"))
    assert code != 0 and doc["ok"] is False, doc
    first = doc["first_failure"]["diagnosis"][0]
    assert first["cause"] == cause, doc["first_failure"]
    assert words in first["evidence"] + first["fix"], first
    if kind == "ddp":
        assert (doc["first_failure"]["host"], first["rank"]) == ("node1", 0), doc["first_failure"]
    assert wait_until(lambda: not [cmd for _, cmd in processes_with(doc["run_id"]) if "pytest" not in cmd], 15,
                      what="nothing of the run left") is True
