"""A failing job as users write it, run end to end with `connection: local`: the run's first failure carries the
diagnosis of its own log, with the cause and the fix (issue 51's classes, met on public logs first)."""
from __future__ import annotations

import json
import sys

import pytest
from clusterctl_helpers import FIXTURE_JOBS

from local.test_logs_stop import _clusterctl, _local_inventory


SMALL = '--steps, "20", --width, "64", --batch, "16"'


def _first_failure(tmp_path, name: str, args: str, script: str = "ddp_plain.py") -> dict:
    """`script` (ddp_plain.py: a plain DDP/FSDP loop) with `args`, two ranks, run with `connection: local`: the
    first failure."""
    pytest.importorskip("torch")
    inventory = _local_inventory(tmp_path, name, job=(
        f"command: [{FIXTURE_JOBS / script}]\n"
        f"  args: {args}\n"
        f"  nproc_per_node: 2\n  python: {sys.executable}"))
    (tmp_path / "prompt.txt").write_text("a cat\n")
    proc = _clusterctl(tmp_path, "run", "-i", str(inventory), str(tmp_path / "prompt.txt"))
    out, err = proc.communicate(timeout=300)
    failure = json.loads(out)["first_failure"]
    assert proc.returncode != 0 and failure is not None, err[-3000:]
    return failure


def test_a_ddp_loop_whose_model_has_a_head_the_loss_never_reads_is_named_ddp_unused_parameters(tmp_path):
    failure = _first_failure(tmp_path, "unused", f"[--kind, ddp, --unused_head, {SMALL}]")
    first = failure["diagnosis"][0]
    assert first["cause"] == "ddp_unused_parameters", failure["diagnosis"]
    assert "find_unused_parameters=True" in first["fix"] and failure["host"] == "local"


def test_a_ddp_loop_given_an_argument_its_own_code_divides_by_is_named_job_code_error_on_that_rank(tmp_path):
    """`--every 0`: rank 0's own `step % args.every` raises; the other rank's peer error is its consequence."""
    failure = _first_failure(tmp_path, "every0", f'[--kind, ddp, --every, "0", {SMALL}]')
    first = failure["diagnosis"][0]
    assert first["cause"] == "job_code_error", failure["diagnosis"]
    assert "ZeroDivisionError" in first["evidence"] and first["rank"] == 0, first
    assert "not the cluster" in first["fix"] and failure["host"] == "local"


def test_an_fsdp2_loop_given_an_argument_its_own_code_divides_by_is_named_job_code_error_on_that_rank(tmp_path):
    failure = _first_failure(tmp_path, "fsdp2every0", f'[--kind, fsdp2, --every, "0", {SMALL}]')
    first = failure["diagnosis"][0]
    assert first["cause"] == "job_code_error", failure["diagnosis"]
    assert "ZeroDivisionError" in first["evidence"] and first["rank"] == 0, first


def test_a_trainer_loop_whose_width_its_heads_do_not_divide_is_named_config_divisibility(tmp_path):
    """hf_trainer.py unchanged, `--width 66` for its GPT-2 of 4 heads: transformers refuses the model on every rank."""
    pytest.importorskip("transformers")
    failure = _first_failure(tmp_path, "trainer66", '[--width, "66", --steps, "2", --layers, "1"]', "hf_trainer.py")
    first = failure["diagnosis"][0]
    assert first["cause"] == "config_divisibility", failure["diagnosis"]
    # the model's own width by its heads: change that value, not the world size (the fix once said the world size)
    assert "model's own configuration" in first["fix"] and "world size of" not in first["fix"], first


# heavy: DeepSpeed's import and its ranks' start cost ~40 s on CI's 2 cores, a sixth of this tier, for the same
# diagnosis path the DDP, FSDP2 and Trainer loops above take (make test-heavy runs it)
@pytest.mark.heavy
def test_a_deepspeed_loop_given_a_micro_batch_of_zero_names_the_jobs_own_configuration(tmp_path):
    pytest.importorskip("deepspeed")
    failure = _first_failure(tmp_path, "ds0", '[--batch, "0", --steps, "2", --width, "64"]', "ds_plain.py")
    first = failure["diagnosis"][0]
    assert first["cause"] == "job_code_error", failure["diagnosis"]
    assert "Train batch size: 0" in first["evidence"] and "deepspeed" in first["fix"], first
