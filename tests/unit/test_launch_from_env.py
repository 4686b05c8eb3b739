"""`clusterctl launch --from-env`: platform variables -> node identity (pure), the node
probe on captured tool outputs, and real launches on this machine (two launchers
started by hand with only the platform variables, as a platform would start them)."""
from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from clusterctl.run.from_env import node_checks, node_command, probe_node
from clusterctl.errors import TopologyError, UsageError
from clusterctl.models import CheckSettings, CheckStatus, EnvVar, Inventory, JobSpec, RendezvousSpec
from clusterctl.plan.platform import (
    detect_platform, explain_rendezvous_failure, node_identity, node_inventory, plan_node, run_id_from,
)
from clusterctl.plan.topology import NodeFacts

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "tests" / "fixtures" / "tools"


def pytorchjob_env(rank: int, replicas: int = 2, nproc: str = "4") -> dict:
    """What training operator v1.9 puts in pod <job>-{master-0|worker-(rank-1)} (envvar.go, master.go)."""
    per_node = int(nproc) if nproc.isdigit() else 1
    return {"MASTER_ADDR": "wan22-t2v-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": str(replicas * per_node),
            "RANK": str(rank), "PET_NPROC_PER_NODE": nproc, "PET_NODE_RANK": str(rank), "PET_NNODES": str(replicas),
            "PYTHONUNBUFFERED": "0"}


# --------------------------------------------------------------------------- platform variables


def test_nodes_platform_reads_world_size_as_nodes_and_rank_as_node_index():
    who = node_identity({"MASTER_ADDR": "jo-worker-0", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "1"}, "nodes")
    assert (who.nnodes, who.node_rank, who.nproc_per_node, who.is_master) == (2, 1, None, False)
    assert (who.master_addr, who.master_port) == ("jo-worker-0", 29500)


def test_pytorchjob_reads_pet_variables_and_its_world_size_of_pods_times_nproc():
    who = node_identity(pytorchjob_env(1), "pytorchjob")
    assert (who.nnodes, who.node_rank, who.nproc_per_node) == (2, 1, 4)
    assert run_id_from(who, {}) == "wan22-t2v"


def test_pytorchjob_with_nproc_auto_has_world_size_equal_to_pods():
    who = node_identity(pytorchjob_env(0, replicas=3, nproc="auto"), "auto")
    assert who.platform == "pytorchjob" and (who.nnodes, who.node_rank, who.nproc_per_node) == (3, 0, None)
    assert any("auto" in note for note in who.notes)


def test_pytorchjob_of_an_old_operator_has_world_size_equal_to_pods():
    env = {"MASTER_ADDR": "j-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "2", "RANK": "1"}
    assert node_identity(env, "pytorchjob").nnodes == 2
    assert node_identity(env, "auto").platform == "nodes"  # same meaning, so auto is right either way


def test_pytorchjob_world_size_set_by_hand_against_pet_nnodes_is_refused():
    env = {**pytorchjob_env(0), "WORLD_SIZE": "5"}
    with pytest.raises(UsageError, match="neither PET_NNODES"):
        node_identity(env, "auto")


def test_elastic_pytorchjob_is_refused_with_the_fix():
    with pytest.raises(UsageError) as err:
        node_identity({**pytorchjob_env(0), "PET_NNODES": "1:4"}, "auto")
    assert "elasticPolicy" in err.value.fix


def test_torchrun_convention_divides_world_size_by_local_world_size():
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "16", "RANK": "8", "LOCAL_WORLD_SIZE": "8",
           "LOCAL_RANK": "0"}
    who = node_identity(env, "auto")
    assert who.platform == "torchrun" and (who.nnodes, who.node_rank, who.nproc_per_node) == (2, 1, 8)


def test_torchrun_convention_refuses_a_process_that_is_not_first_on_its_node():
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "16", "RANK": "11", "LOCAL_WORLD_SIZE": "8",
           "LOCAL_RANK": "3"}
    with pytest.raises(UsageError, match="not the first rank of its node"):
        node_identity(env, "torchrun")


def test_auto_detection_says_why():
    assert detect_platform(pytorchjob_env(0))[0] == "pytorchjob"
    assert detect_platform({"LOCAL_WORLD_SIZE": "8"})[0] == "torchrun"
    platform, why = detect_platform({"WORLD_SIZE": "2", "RANK": "0"})
    assert platform == "nodes" and "--platform torchrun" in why


@pytest.mark.parametrize("env, message", [
    ({"MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "0"}, "MASTER_ADDR is not set"),
    ({"MASTER_ADDR": "m", "MASTER_PORT": "0", "WORLD_SIZE": "2", "RANK": "0"}, "MASTER_PORT='0'"),
    ({"MASTER_ADDR": "m", "MASTER_PORT": "29500", "WORLD_SIZE": "two", "RANK": "0"}, "WORLD_SIZE='two'"),
    ({"MASTER_ADDR": "m", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "2"}, "outside 0..1"),
])
def test_missing_or_odd_variables_are_clear_errors(env, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        node_identity(env, "nodes")


# --------------------------------------------------------------------------- planning


def inventory(nproc="auto", divides=None, env=()) -> Inventory:
    from clusterctl.models import Host

    return Inventory(name="t", hosts=(Host("ignored", "192.0.2.1"),), rendezvous=RendezvousSpec(port=1),
                     job=JobSpec(command=("generate.py",), args=("--ulysses_size", "{world_size}"),
                                 nproc_per_node=nproc, world_size_divides=divides, env=tuple(env)))


def test_plan_uses_placeholder_hosts_this_node_rank_and_the_platform_master():
    who = node_identity(pytorchjob_env(1, nproc="auto"), "auto")
    inv = node_inventory(inventory(divides=40), who, join_timeout=30)
    assert [h.name for h in inv.hosts] == ["node-0", "node-1"] and inv.container is None
    topo = plan_node(inv, who, NodeFacts(gpu_ids=(0, 1, 2, 3), nic="eth0", address="10.1.0.7"))
    node = topo.nodes[1]
    assert (topo.world_size, topo.nproc_per_node, topo.master_addr, topo.port) == (8, 4, "wan22-t2v-master-0", 23456)
    assert (node.first_rank, node.local_addr, node.env_dict["NCCL_SOCKET_IFNAME"]) == (4, "10.1.0.7", "eth0")
    assert topo.join_timeout == 30


def test_platform_nproc_against_a_different_inventory_nproc_is_refused():
    who = node_identity(pytorchjob_env(0, nproc="4"), "auto")
    with pytest.raises(UsageError, match="4 rank"):
        node_inventory(inventory(nproc=2), who, 30)


def test_seeds_one_gpu_with_nproc_five_is_refused_on_the_node():
    who = node_identity(pytorchjob_env(0, nproc="5"), "auto")
    inv = node_inventory(inventory(), who, 30)
    with pytest.raises(TopologyError, match="invalid device ordinal"):
        plan_node(inv, who, NodeFacts(gpu_ids=(0,)))


# --------------------------------------------------------------------------- probing (captured outputs)


class FakeTools:
    def __init__(self, **outputs):
        self.outputs, self.calls = outputs, []

    def __call__(self, argv):
        self.calls.append(tuple(argv))
        key = {"nvidia-smi": "smi", "df": "df", "ss": "ss"}.get(argv[0]) or ("addr" if argv[:3] == ("ip", "-j", "addr")
                                                                             else "route")
        text = self.outputs.get(key, f"{argv[0]}: command not found")
        return subprocess.CompletedProcess(argv, 0, text, "")


def fixture(path: str) -> str:
    return (TOOLS / path).read_text()


def test_probe_on_a_worker_finds_gpus_the_nic_towards_the_master_and_shm():
    who = node_identity({"MASTER_ADDR": "10.10.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "1"}, "nodes")
    tools = FakeTools(smi=fixture("nvidia_smi/query_gpu_h200x2.csv"), route=fixture("ip/route_get_json_direct.json"),
                      df=fixture("host/df_shm_docker_default_64m.txt"))
    probe = probe_node(who, {}, tools, resolve=lambda name: name)
    assert probe.facts == NodeFacts(gpu_ids=(0, 1), nic="ens5f0", address="10.10.0.2")
    checks = {c.check: c for c in node_checks(who, probe, CheckSettings(), tools, lambda port: False)}
    assert checks["shm"].status == CheckStatus.FAIL and "emptyDir" in checks["shm"].fix
    assert checks["rdzv_route"].status == CheckStatus.PASS and "rdzv_port_free" not in checks  # not the master


def test_probe_on_the_master_takes_the_interface_holding_its_own_address_not_lo():
    who = node_identity({"MASTER_ADDR": "10.10.0.2", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "0"}, "nodes")
    tools = FakeTools(route=fixture("ip/route_get_json_local.json"), addr=fixture("ip/addr_json_docker_bridges.json"),
                      df=fixture("host/df_shm_docker_16g.txt"), ss=fixture("ss/ltnpH_python_listeners.txt"))
    probe = probe_node(who, {}, tools, resolve=lambda name: name)
    assert probe.facts.nic == "ens5f0" and probe.facts.gpu_ids is None  # no nvidia-smi: CPU ranks
    checks = {c.check: c for c in node_checks(who, probe, CheckSettings(), tools, lambda port: True)}
    assert checks["rdzv_port_free"].status == CheckStatus.FAIL and "pid 10220" in checks["rdzv_port_free"].detail


def test_probe_reports_an_unroutable_or_unresolvable_master():
    who = node_identity({"MASTER_ADDR": "job-0.job", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "1"}, "nodes")
    naps = []
    probe = probe_node(who, {}, FakeTools(), resolve=lambda name: None, wait_s=0.3, sleep=naps.append)
    assert probe.route_error and naps  # a worker waits for the master's DNS name before giving up
    check = next(c for c in node_checks(who, probe, CheckSettings(), FakeTools(), lambda p: False) if c.check == "rdzv_route")
    assert check.status == CheckStatus.FAIL and "DNS" in check.fix
    unreachable = probe_node(who, {}, FakeTools(route=fixture("ip/route_get_json_unreachable.txt")), lambda n: "203.0.113.9")
    assert "Network is unreachable" in unreachable.route_error


def test_command_keeps_platform_nic_settings_and_maps_cuda_visible_devices():
    who = node_identity({"MASTER_ADDR": "10.10.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "1"}, "nodes")
    inv = node_inventory(inventory(nproc=1, env=(EnvVar("HF_TOKEN", "s3cret"),)), who, 15)
    topo = plan_node(inv, who, NodeFacts(gpu_ids=(0, 1), nic="ens5f0", address="10.10.0.2"))
    process_env = {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "6,7", "NCCL_SOCKET_IFNAME": "ib0"}
    argv, env, notes = node_command(inv, topo, who, "r1", "", process_env)
    assert "--node-rank=1" in argv and "--rdzv-endpoint=10.10.0.1:29500" in argv and "--rdzv-conf=timeout=15" in argv
    assert env["CUDA_VISIBLE_DEVICES"] == "6"  # the ranks' ordinal 0 is the platform's device 6
    assert env["NCCL_SOCKET_IFNAME"] == "ib0" and env["GLOO_SOCKET_IFNAME"] == "ens5f0"
    assert env["HF_TOKEN"] == "s3cret" and any("ib0" in n for n in notes)


# --------------------------------------------------------------------------- explaining the rendezvous failure


def test_rendezvous_errors_are_explained_in_terms_of_the_platform_variables():
    who = node_identity({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "3", "RANK": "0"}, "nodes")
    # the messages as torch 2.13's static rendezvous prints them (see test_world_size_larger_than_the_nodes...)
    master = explain_rendezvous_failure(
        "torch.distributed.DistStoreError: Timed out after 11 seconds waiting for clients. 2/3 clients joined.", who, 10)
    assert "only 2 of 3 nodes" in master and "WORLD_SIZE=3 was read as 3 nodes" in master
    worker = explain_rendezvous_failure(
        "torch.distributed.DistStoreError: wait timeout after 10000ms, keys: /r/torchelastic/assigned_ranks/1", who, 10)
    assert "still waiting for other nodes" in worker
    alone = explain_rendezvous_failure("torch.distributed.DistNetworkError: The client socket has timed out after "
                                       "5000ms while trying to connect to (127.0.0.1, 29612).", who, 5)
    assert "could not reach the master" in alone and "29612" in alone
