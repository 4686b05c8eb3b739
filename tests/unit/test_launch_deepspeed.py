"""`job.launcher: deepspeed` (plan/launcher_deepspeed.py): DeepSpeed's per-node launcher as clusterctl runs it.

The argv is read back by the real `deepspeed.launcher.launch` parser (deepspeed 0.19.8, installed by the
test extra), and the node command runs for real on this machine: two "nodes" on loopback, gloo ranks
(tests/fixtures/jobs/ds_ranks.py)."""
from __future__ import annotations
from dataclasses import replace

import pytest

from clusterctl.plan import launcher_deepspeed as launch_deepspeed, launcher as launchers
from clusterctl.plan.torchrun import job_argv, placeholder_values

from unit.test_launch import NASTY
from local.test_launch_deepspeed import _decoded, _deepspeed


def test_world_info_lists_the_hosts_in_node_rank_order_with_their_planned_gpus():
    inv, topo = _deepspeed()
    assert list(_decoded(launch_deepspeed.world_info(topo)).items()) == [("node-080", [0, 1]), ("node-082", [0, 1])]
    cpu = replace(topo, nodes=tuple(replace(n, gpu_ids=None, nproc=3) for n in reversed(topo.nodes)))
    assert list(_decoded(launch_deepspeed.world_info(cpu)).items()) == [("node-080", [0, 1, 2]), ("node-082", [0, 1, 2])]


def test_the_planned_layout_is_torchruns():
    inv, topo = _deepspeed()
    assert launchers.shaped(inv, topo) is topo and launchers.node_env(inv, topo, topo.nodes[1]) == ()


def test_the_node_command_is_deepspeeds_launcher_with_each_rank_under_the_rank_script():
    inv, topo = _deepspeed()
    argv = job_argv(inv.job, placeholder_values(topo, "r1", NASTY, inv.job.outputs))
    command = launchers.node_command(inv, topo, topo.nodes[1], "r1", argv, inv.job.outputs)
    ranks = "/workspace/output/logs/r1/node-082/r1_deepspeed/attempt_0"
    assert command[:8] == ("sh", "-c", launch_deepspeed._NODE, "clusterctl-deepspeed", "node-082", "python3", ranks,
                           launch_deepspeed._RANK)
    assert command[8:14] == launch_deepspeed.launch_args(topo, topo.nodes[1])
    assert command[14:17] == ("sh", "/workspace/output/logs/r1/node-082/r1_deepspeed/rank.sh", ranks)
    assert command[17:] == ("3", "python3", "-u") + argv  # no torchrun in between: the prompt's `$` as they are


@pytest.mark.parametrize("argv, entry, at", [
    (("train.py", "--x"), ("python3", "-u", "train.py", "--x"), 3),
    (("-m", "pkg.train", "--x"), ("python3", "-u", "-m", "pkg.train", "--x"), 4),
    (("./train", "--x"), ("./train", "--x"), 1),
])
def test_a_script_a_module_or_an_executable_starts_as_deepspeeds_launcher_starts_it(argv, entry, at):
    assert launch_deepspeed.rank_entry(argv, "python3") == (entry, at)


def test_the_inventory_takes_launcher_deepspeed_and_exports_refuse_it(tmp_path):
    from clusterctl.errors import UsageError
    from clusterctl.inventory.load import load_inventory

    path = tmp_path / "inv.yaml"
    path.write_text("name: t\nhosts: [{name: a, address: 10.0.0.1}]\njob: {command: [x.py], launcher: deepspeed}\n")
    inventory = load_inventory(path)
    assert inventory.job.launcher == "deepspeed"
    with pytest.raises(UsageError, match="job.launcher is deepspeed"):
        launchers.require_torchrun(inventory, "export pytorchjob")
