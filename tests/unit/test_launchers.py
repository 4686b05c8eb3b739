"""`job.launcher`: torchrun (the default) or none (job.command once per node, plan/launcher.py)."""
from __future__ import annotations

import re

import pytest

from clusterctl.errors import InventoryError, UsageError
from clusterctl.inventory.load import load_inventory
from clusterctl.plan import launcher as launchers
from clusterctl.plan.torchrun import job_argv, placeholder_values

from unit.test_launch import NASTY, two_node_inventory, two_node_topology


def _none():
    inv, topo = two_node_topology(two_node_inventory(launcher="none"))
    return inv, launchers.shaped(inv, topo)


def test_launcher_none_plans_one_process_per_node_with_every_gpu_the_node_was_given():
    inv, topo = _none()
    assert (topo.world_size, topo.nproc_per_node) == (2, 1)
    assert [(n.node_rank, n.first_rank, n.nproc, n.gpu_ids) for n in topo.nodes] == [(0, 0, 1, (0, 1)), (1, 1, 1, (0, 1))]
    assert "job.launcher none" in topo.notes[-1]
    torchrun_inv, torchrun_topo = two_node_topology()
    assert launchers.shaped(torchrun_inv, torchrun_topo) is torchrun_topo


def test_launcher_none_sets_world_size_rank_node_rank_local_rank_and_the_master():
    inv, topo = _none()
    env = dict(launchers.node_env(inv, topo, topo.nodes[1]))
    assert env == {"WORLD_SIZE": "2", "RANK": "1", "NODE_RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                   "MASTER_ADDR": "172.31.0.80", "MASTER_PORT": "29511"}
    torchrun_inv, torchrun_topo = two_node_topology()
    assert launchers.node_env(torchrun_inv, torchrun_topo, torchrun_topo.nodes[1]) == ()


def test_launcher_none_runs_the_job_itself_with_its_output_where_torchrun_puts_a_ranks(tmp_path):
    inv, topo = _none()
    argv = job_argv(inv.job, placeholder_values(topo, "r1", NASTY, inv.job.outputs))
    command = launchers.node_command(inv, topo, topo.nodes[1], "r1", argv, inv.job.outputs)
    assert command[:3] == ("sh", "-c", launchers._ONCE)
    assert command[4:7] == ("/workspace/output/logs/r1/node-082/r1_none/attempt_0/0", "[node-082 rank1]: ", "python3")
    assert command[7:] == argv  # no torchrun in between: the prompt's `$` stay as they are
    assert "--prompt" in command and NASTY in command


@pytest.mark.parametrize("argv, started", [
    (("train.py", "--x"), ("python3", "train.py", "--x")),
    (("-m", "pkg.serve"), ("python3", "-m", "pkg.serve")),
    (("--module", "pkg.serve"), ("python3", "-m", "pkg.serve")),
    (("vllm", "serve", "m"), ("vllm", "serve", "m")),
])
def test_a_script_or_module_runs_under_job_python_and_anything_else_as_written(argv, started):
    assert launchers._entry(argv, "python3") == started


def _inventory(tmp_path, launcher: str):
    path = tmp_path / "inv.yaml"
    path.write_text(f"name: t\nhosts: [{{name: a, address: 10.0.0.1}}]\njob: {{command: [x.py], launcher: {launcher}}}\n")
    return load_inventory(path)


def test_the_inventory_takes_torchrun_none_or_mpirun_and_refuses_anything_else_with_one_clear_error(tmp_path):
    assert _inventory(tmp_path, "none").job.launcher == "none"
    assert _inventory(tmp_path, "torchrun").job.launcher == "torchrun"
    assert _inventory(tmp_path, "mpirun").job.launcher == "mpirun"
    with pytest.raises(InventoryError, match=re.escape("torchrun | none | mpirun")):
        _inventory(tmp_path, "srun")


def test_what_writes_torchrun_out_refuses_launcher_none_and_mpirun(tmp_path):
    with pytest.raises(UsageError, match="job.launcher is none"):
        launchers.require_torchrun(_inventory(tmp_path, "none"), "export pytorchjob")
    with pytest.raises(UsageError, match="job.launcher is mpirun"):
        launchers.require_torchrun(_inventory(tmp_path, "mpirun"), "export pytorchjob")
    launchers.require_torchrun(_inventory(tmp_path, "torchrun"), "export pytorchjob")


def test_a_node_of_one_rank_without_torchruns_report_names_that_rank_as_the_first_failure():
    from clusterctl.watch.failures import Ended, first_failure
    from clusterctl.models import Host, Inventory

    inventory = Inventory("t", (Host("node1", "10.0.0.1"), Host("node2", "10.0.0.2")))
    tail = ("[node2 rank1]: Traceback (most recent call last):\n[node2 rank1]: RuntimeError: node rank 1 gives up\n"
            "[node2 rank1]: clusterctl: the job exited with code 3\n")
    first = first_failure(inventory, [Ended("node2", 10.0, False, 3, tail)], 1.0, 7.0, {"node1": None, "node2": 3},
                          {"node1": 0, "node2": 1})
    assert (first["host"], first["rank"]) == ("node2", 1)
    mixed = tail + "[node2 rank0]: RuntimeError: Connection closed by peer\n"
    first = first_failure(inventory, [Ended("node2", 10.0, False, 3, mixed)], 1.0, 7.0, {"node1": None, "node2": 3},
                          {"node1": 0, "node2": 1})
    assert first["host"] == "node2" and first["rank"] in (None, 0, 1)  # two ranks printed: the diagnosis decides
