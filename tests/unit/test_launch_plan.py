"""The Plan is the run: every node's start decided once at plan time (plan/launch_plan.py), the prompt
expanded there once, and the launch carrying out exactly that (run/runner.py takes the plan's launches)."""
import json
from dataclasses import replace

import pytest

from clusterctl.backends import NodesBackend, RunRequest
from clusterctl.errors import UsageError
from clusterctl.plan import launch_plan
from clusterctl.run.runner import JobRunner
from clusterctl.plan.topology import NodeFacts
from clusterctl.models import Host, Inventory, JobSpec, RendezvousSpec


def _inventory() -> Inventory:
    hosts = (Host("node1", "10.0.0.1"), Host("node2", "10.0.0.2"))
    return Inventory(name="t", hosts=hosts, container=None, rendezvous=RendezvousSpec(port=29500),
                     job=JobSpec(command=("generate.py",), args=("--prompt", "{prompt}", "--try", "{attempt}"),
                                 nproc_per_node="auto"))


def _facts(inventory: Inventory) -> dict:
    return {h.name: NodeFacts(gpu_ids=(0, 1), nic="eth0", address=h.address) for h in inventory.hosts}


def _plan(inventory: Inventory, **decided):
    return NodesBackend(session=None).plan(inventory, RunRequest("a cat"), "r1", _facts(inventory), **decided)


def test_the_prompt_is_expanded_once_from_the_plan_to_the_launch(monkeypatch):
    expanded = []
    real = launch_plan.job_argv
    monkeypatch.setattr(launch_plan, "job_argv", lambda job, values: expanded.append(1) or real(job, values))
    inventory = _inventory()
    plan = _plan(inventory)
    runner = JobRunner(inventory, plan.topology, "r1", "a cat", None, lambda e: None, launches=plan.launches)
    assert len(expanded) == 1
    assert json.loads(json.dumps(runner.commands())) == plan.commands()
    assert [n.torchrun for n in runner.nodes.values()] == [n.torchrun for n in plan.launches]


def test_the_plan_carries_its_attempt_and_checkpoint_into_every_nodes_start():
    plan = _plan(_inventory(), attempt=3, checkpoint="/ckpt/step-5")
    assert (plan.attempt, plan.checkpoint) == (3, "/ckpt/step-5") and plan.launches_as_planned()
    for node in plan.launches:
        env = dict(node.env)
        assert (env["CLUSTERCTL_ATTEMPT"], env["CLUSTERCTL_CHECKPOINT"]) == ("3", "/ckpt/step-5")
        assert node.torchrun[-2:] == ("--try", "3")


def test_a_plan_changed_by_replace_is_no_longer_launched_as_it_is():
    plan = _plan(_inventory())
    assert plan.launches_as_planned()
    assert not replace(plan, run_id="r2").launches_as_planned()
    assert not plan.next_attempt().launches_as_planned()


def test_a_command_line_too_long_for_ssh_is_refused_at_plan_time():
    inventory = _inventory()
    with pytest.raises(UsageError, match="once quoted for the remote shell"):
        NodesBackend(session=None).plan(inventory, RunRequest("'" * 70_000), "r1", _facts(inventory))
