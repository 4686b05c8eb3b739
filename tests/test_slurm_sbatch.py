"""`clusterctl export sbatch`: the batch script's text, built from the plan. Pure (bash -n only);
tests/test_cluster_slurm.py submits it to the rehearsal Slurm with `sbatch --wait`."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from clusterctl.errors import TopologyError, UsageError
from clusterctl.inventory.load import parse_inventory
from clusterctl.slurm import sbatch

INVENTORY = """name: demo
scheduler: {type: slurm, partition: gpu, nodes: 2, time: "02:00:00", account: proj, gpus_per_node: 8,
            extra_args: [--qos=high]}
job:
  command: [generate.py]
  args: [--prompt, "{prompt}", --save_file, "{outputs}/{run_id}.gif", --ulysses_size, "{world_size}"]
  nproc_per_node: auto
  world_size_divides: 40
  workdir: /workspace
  outputs: /data/out
  env: {NCCL_DEBUG: INFO}
"""
PROMPT = "a \"quoted\" $HOME `touch x` 'single' {run_id} $$ \\ 猫\nsecond line"


def script(text: str = INVENTORY, prompt: str = PROMPT, **kwargs) -> sbatch.BatchScript:
    return sbatch.build(parse_inventory(text, "inv.yaml"), prompt, token="T", **kwargs)


def test_the_header_asks_for_the_planned_allocation():
    lines = script().text.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert [line for line in lines if line.startswith("#SBATCH")] == [
        "#SBATCH --job-name=clusterctl-demo", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --partition=gpu", "#SBATCH --time=02:00:00", "#SBATCH --account=proj", "#SBATCH --gpus-per-node=8",
        "#SBATCH --qos=high", "#SBATCH --output=/data/out/logs/slurm-%j.out", "#SBATCH --export=ALL"]


def test_the_planner_shapes_the_job_world_size_divides_included():
    built = script()
    # 8 GPUs per node, but world size 16 does not divide 40: auto takes 5 per node (world 10)
    assert (built.topology.nnodes, built.topology.nproc_per_node, built.topology.world_size) == (2, 5, 10)
    assert "--nproc-per-node=5" in built.text and "--nnodes=2:2" in built.text
    assert "clusterctl-node 5 python3" in built.text  # the node check wants 5 GPUs visible
    assert "# The plan: 2 node(s) x 5 rank(s) = world size 10" in built.text
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4" in built.text


def test_the_run_time_values_are_shell_variables_and_the_rest_is_quoted():
    text = script().text
    assert '--node-rank="$NODE_RANK"' in text and '--rdzv-endpoint="$MASTER_ADDR":29500' in text
    assert '--local-addr="$LOCAL_ADDR"' in text and '--rdzv-id="$RUN_ID"' in text
    assert '--log-dir=/data/out/logs/"$RUN_ID"/"$NODE"' in text
    assert "@@T@@" not in text


def test_the_prompt_reaches_the_command_line_byte_for_byte():
    text = script().text
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    # the node script as the batch shell holds it, then its exec command's words as sh reads them
    word = text.split("NODE_SCRIPT=", 1)[1].split("\necho ", 1)[0]
    node_script = subprocess.run([bash, "-c", f"NODE_SCRIPT={word}\nprintf %s \"$NODE_SCRIPT\""],
                                 capture_output=True, check=True).stdout.decode()
    command = node_script.split("\nexec ", 1)[1]
    out = subprocess.run([bash, "-c", 'NODE=n1 RUN_ID=r1 MASTER_ADDR=m NODE_RANK=0 LOCAL_ADDR=l; eval "set -- $1"; '
                          'printf "%s\\0" "$@"', "probe", command], capture_output=True, check=True).stdout.decode()
    argv = out.split("\0")[:-1]
    prompt_at = argv.index("--prompt") + 1
    # torchrun turns $$ into $ when it starts the job (plan/torchrun.py): the script carries $$-doubled text
    assert argv[prompt_at].replace("$$", "$") == PROMPT
    assert argv[argv.index("--save_file") + 1] == "/data/out/r1.gif"
    assert "--node-rank=0" in argv and "--rdzv-endpoint=m:29500" in argv


def test_the_script_is_valid_bash():
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    subprocess.run([bash, "-n"], input=script().text.encode(), check=True)


def test_the_checks_are_inside():
    text = script().text
    assert 'if [ "${SLURM_JOB_NUM_NODES:-0}" != 2 ]' in text
    assert "cannot import torch" in text and "GPU(s) visible" in text and "no route to the master" in text
    assert "--kill-on-bad-exit=1" in text


def test_user_socket_interfaces_win_over_the_detected_one():
    text = script(INVENTORY.replace("{NCCL_DEBUG: INFO}", "{NCCL_SOCKET_IFNAME: ib0}")).text
    assert "export NCCL_SOCKET_IFNAME=ib0" in text and 'export NCCL_SOCKET_IFNAME="$NIC"' not in text
    assert 'export GLOO_SOCKET_IFNAME="$NIC"' in text


def test_an_inventory_without_a_scheduler_is_refused():
    with pytest.raises(UsageError, match="no scheduler"):
        sbatch.build(parse_inventory("hosts:\n  - {name: a, address: 10.0.0.1}\njob: {command: [x.py]}\n", "i.yaml"),
                     "")


def test_a_container_inventory_is_refused_with_the_way_out():
    with pytest.raises(UsageError, match="Docker container"):
        script(INVENTORY + "container: {image: r/x:1}\n")


def test_an_impossible_layout_is_refused_by_the_planner():
    with pytest.raises(TopologyError):
        script(INVENTORY.replace("nproc_per_node: auto", "nproc_per_node: 8"), strict=True)


def test_a_secret_is_neither_in_the_script_nor_on_sruns_command_line_and_comes_from_the_submitting_shell(
        tmp_path, reliability):
    row = reliability("`export sbatch` with `secret: true` HF_TOKEN and a WANDB_API_KEY in job.env",
                      "no value in the 0755 script (nor, so, on srun's command line); the script refuses to start "
                      "without them in the environment sbatch was run from", section="Secrets")
    inventory = INVENTORY.replace("{NCCL_DEBUG: INFO}", "{NCCL_DEBUG: INFO, HF_TOKEN: {value: hf_s3cret_value, "
                                  "secret: true}, WANDB_API_KEY: wandb-s3cret}")
    built = script(inventory)
    assert "s3cret" not in built.text
    assert "export NCCL_DEBUG=INFO" in built.text and "#SBATCH --export=ALL" in built.text
    assert "srun --export=ALL" in built.text
    assert any("HF_TOKEN, WANDB_API_KEY: not written in the script" in note for note in built.notes)
    path = tmp_path / "job.sbatch"
    path.write_text(built.text)
    missing = subprocess.run(["bash", str(path)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode != 0 and "HF_TOKEN is secret and not in this script" in missing.stderr
    given = subprocess.run(["bash", str(path)], capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "HF_TOKEN": "x", "WANDB_API_KEY": "y"})
    assert "not in this script" not in given.stderr and "the job has no node(s)" in given.stderr  # past the check
    row.observe(f"neither value in the {len(built.text)}-byte script; without them: "
                f"{missing.stderr.strip().splitlines()[-1][:160]}")
