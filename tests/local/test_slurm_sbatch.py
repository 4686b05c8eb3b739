"""`clusterctl export sbatch`: the batch script's text, built from the plan. Pure (bash -n only);
tests/rehearsal/test_cluster_slurm.py submits it to the rehearsal Slurm with `sbatch --wait`."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from clusterctl.slurm import sbatch

from unit.test_slurm_sbatch import INVENTORY, PROMPT, script


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
