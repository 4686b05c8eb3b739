"""The backends' Plan (pure, printable: what `run --plan` shows, what a relaunch launches again), the
inventory source as a value, and `import clusterctl` staying light (issue 33)."""
from __future__ import annotations

import json

import pytest

from clusterctl.api.source import InventorySource
from clusterctl.backends import NodesBackend, RunRequest, SlurmBackend, backend_for, backend_of_record
from clusterctl.backends.base import hosts_of_record, recorded_hosts
from clusterctl.inventory.load import parse_inventory
from clusterctl.plan.topology import NodeFacts
from clusterctl.models import Host, Inventory, JobSpec, RendezvousSpec, SSHSettings

SLURM = """name: demo
scheduler: {type: slurm, partition: gpu, nodes: 2, time: "02:00:00", gpus_per_node: 4}
job: {command: [generate.py], args: [--prompt, "{prompt}"], nproc_per_node: auto, outputs: /data/out}
"""


def _nodes_inventory() -> Inventory:
    hosts = (Host("node1", "10.0.0.1", ssh=SSHSettings(user="ops", port=2222)), Host("node2", "10.0.0.2"))
    return Inventory(name="t", hosts=hosts, container=None, rendezvous=RendezvousSpec(port=29500),
                     job=JobSpec(command=("generate.py",), args=("--prompt", "{prompt}"), nproc_per_node="auto"))


def _facts(inventory: Inventory) -> dict:
    return {h.name: NodeFacts(gpu_ids=(0, 1), nic="eth0", address=h.address) for h in inventory.hosts}


def test_the_nodes_plan_is_the_planners_layout_with_each_nodes_exact_command_line_and_prints_them():
    inventory = _nodes_inventory()
    plan = NodesBackend(session=None).plan(inventory, RunRequest("a cat"), "r1", _facts(inventory))
    assert (plan.backend, plan.run_id, plan.attempt) == ("nodes", "r1", 1)
    assert (plan.world_size, plan.nproc_per_node, plan.nnodes) == (4, 2, 2)
    assert plan.master == ("node1", "10.0.0.1", 29500)
    assert [(n.host, n.node_rank, n.ranks) for n in plan.nodes] == [("node1", 0, (0, 1)), ("node2", 1, (2, 3))]
    assert all("--rdzv-id=r1" in n.command and "'a cat'" in n.command for n in plan.nodes)
    text = plan.render()
    assert text.splitlines()[0] == "plan (nodes): 2 nodes x 2 = world size 4, master 10.0.0.1:29500"
    assert "  node 1 node2: ranks 2..3 gpus 0,1 nic eth0 addr 10.0.0.2" in text
    assert plan.nodes[1].command in text
    assert json.loads(json.dumps(plan.nodes[1].to_json()))["ranks"] == [2, 3]
    assert plan.commands()["node2"]["command"] == plan.nodes[1].command


def test_a_plan_is_frozen_and_its_next_attempt_keeps_the_run_id():
    inventory = _nodes_inventory()
    plan = NodesBackend(session=None).plan(inventory, RunRequest("a cat"), "r1", _facts(inventory))
    with pytest.raises(AttributeError):
        plan.attempt = 2
    again = plan.next_attempt()
    assert (again.run_id, again.attempt, again.nodes) == ("r1", 2, plan.nodes)


def test_the_slurm_plan_without_an_allocation_is_the_batch_script_export_sbatch_writes():
    inventory = parse_inventory(SLURM, "inv.yaml")
    plan = SlurmBackend(session=None).plan(inventory, RunRequest("a cat"), None)
    assert (plan.backend, plan.nnodes, plan.nproc_per_node, plan.world_size) == ("slurm", 2, 4, 8)
    assert plan.script.startswith("#!/bin/bash") and "#SBATCH --nodes=2" in plan.script
    assert plan.nodes == () and plan.master is None
    assert plan.render().splitlines()[0] == "plan (slurm): 2 nodes x 4 = world size 8"
    assert plan.script.rstrip("\n") in plan.render()


def test_the_backend_is_chosen_by_the_inventory_and_a_record_keeps_the_one_it_ran_on():
    assert type(backend_for(None, parse_inventory(SLURM, "inv.yaml"))) is SlurmBackend
    assert type(backend_for(None, _nodes_inventory())) is NodesBackend
    assert type(backend_of_record(None, {"backend": "slurm"})) is SlurmBackend
    assert type(backend_of_record(None, {"slurm": {"job_id": "7"}})) is SlurmBackend  # an older record
    assert type(backend_of_record(None, {})) is NodesBackend


def test_a_record_keeps_the_hosts_as_reached_and_gives_them_back_without_the_inventory():
    inventory = _nodes_inventory()
    kept = recorded_hosts(inventory.hosts)
    assert kept[0] == {"name": "node1", "address": "10.0.0.1", "user": "ops", "port": 2222, "connection": "ssh"}
    assert hosts_of_record({"hosts": kept}, inventory) == inventory.hosts
    rebuilt = hosts_of_record({"hosts": kept}, Inventory(name="t", hosts=(), container=None, job=inventory.job))
    assert [(h.name, h.address, h.ssh.user, h.ssh.port) for h in rebuilt] == [
        ("node1", "10.0.0.1", "ops", 2222), ("node2", "10.0.0.2", None, None)]
    assert hosts_of_record({}, inventory) is None  # a record of an older clusterctl


def test_an_inventory_source_is_parsed_once_and_stored_as_itself(tmp_path):
    (tmp_path / "inv.yaml").write_text("x")
    (tmp_path / "group_vars").mkdir()
    assert InventorySource.parse("inv.yaml", cwd=tmp_path) == InventorySource("file", str(tmp_path / "inv.yaml"))
    assert InventorySource.parse(".", cwd=tmp_path).kind == "directory"
    source = InventorySource.parse("ansible:hosts.ini", cwd=tmp_path)
    assert source == InventorySource("ansible", str(tmp_path / "hosts.ini"))
    assert source.loader_argument() == f"ansible:{tmp_path / 'hosts.ini'}"
    assert InventorySource.from_json(json.loads(json.dumps(source.to_json()))) == source
    assert InventorySource.parse("ansible:/etc/ansible/hosts").location == "/etc/ansible/hosts"


def test_a_remembered_source_of_an_older_clusterctl_is_read_back_as_an_ansible_source(tmp_path):
    legacy = f"{tmp_path}/ansible:inventories/prod"  # what `up` stored before: CWD/ansible:SOURCE
    assert InventorySource.parse(legacy) == InventorySource("ansible", f"{tmp_path}/inventories/prod")
    with pytest.raises(ValueError):
        InventorySource.from_json({"kind": "url", "location": "x"})
