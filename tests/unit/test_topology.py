"""Topology planning: master first, uniform nproc, divisibility, GPUs, NICs, env."""
from __future__ import annotations

import pytest

from clusterctl.errors import TopologyError
from clusterctl.models import ContainerSpec, EnvVar, Host, Inventory, JobSpec, RendezvousSpec
from clusterctl.plan.topology import NodeFacts, plan


def inv(hosts, nproc="auto", divides=None, master=None, container=None, job_env=(), port=29500):
    return Inventory(
        name="t", hosts=tuple(hosts), container=container,
        rendezvous=RendezvousSpec(port=port, master=master),
        job=JobSpec(command=("generate.py",), nproc_per_node=nproc, world_size_divides=divides, env=tuple(job_env)))


def gpu_hosts(n, prefix="node", base=80):
    return [Host(f"{prefix}-{i}", f"172.31.0.{base + 2 * i}") for i in range(n)]


def gpu_facts(hosts, counts, nic="eth0"):
    return {h.name: NodeFacts(gpu_ids=tuple(range(c)), nic=nic, address=h.address) for h, c in zip(hosts, counts)}


DOCKER = ContainerSpec(image="registry/wan:1")


# --------------------------------------------------------------------------- the seeds' layouts


def test_one_gpu_pods_with_nproc_5_are_refused_naming_the_host_and_its_gpus():
    hosts = gpu_hosts(2)
    with pytest.raises(TopologyError) as err:
        plan(inv(hosts, nproc=5), gpu_facts(hosts, [1, 1]))
    text = str(err.value)
    assert "node-0" in text and "only 1 GPU" in text and "invalid device ordinal" in text
    assert err.value.fix and "nproc_per_node to 1" in err.value.fix


def test_two_nodes_of_two_gpus_make_world_four_with_master_ranks_first():
    hosts = gpu_hosts(2)
    topo = plan(inv(hosts), gpu_facts(hosts, [2, 2]))
    assert (topo.world_size, topo.nproc_per_node, topo.nnodes) == (4, 2, 2)
    assert topo.rank_of("node-0") == range(0, 2)
    assert topo.rank_of("node-1") == range(2, 4)
    assert topo.master_addr == "172.31.0.80" and topo.port == 29500
    assert topo.node("node-0").is_master and not topo.node("node-1").is_master
    assert topo.node("node-1").gpu_ids == (0, 1)
    assert "CUDA_VISIBLE_DEVICES" not in topo.node("node-1").env_dict


def test_two_nodes_of_seven_gpus_with_40_heads_shrink_to_five_per_node_and_say_why():
    hosts = gpu_hosts(2)
    topo = plan(inv(hosts, divides=40), gpu_facts(hosts, [7, 7]))
    assert (topo.nproc_per_node, topo.world_size) == (5, 10)
    assert topo.node("node-1").gpu_ids == (0, 1, 2, 3, 4)
    assert topo.node("node-1").env_dict["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4"
    assert any("world size 14" in n and "using 5 per node" in n and "40" in n for n in topo.notes)


def test_two_nodes_of_seven_gpus_in_strict_mode_list_the_counts_that_work():
    hosts = gpu_hosts(2)
    with pytest.raises(TopologyError) as err:
        plan(inv(hosts, divides=40), gpu_facts(hosts, [7, 7]), strict=True)
    assert "world size 14" in str(err.value) and "40" in str(err.value)
    assert "5 (world 10)" in err.value.fix and "4 (world 8)" in err.value.fix


def test_two_nodes_of_four_gpus_make_world_8_which_divides_40():
    hosts = gpu_hosts(2)
    topo = plan(inv(hosts, divides=40), gpu_facts(hosts, [4, 4]))
    assert (topo.nproc_per_node, topo.world_size) == (4, 8)
    assert any("world size 8 divides 40" in n for n in topo.notes)


def test_two_nodes_of_five_gpus_make_world_10_which_divides_40():
    hosts = gpu_hosts(2)
    topo = plan(inv(hosts, divides=40, nproc=5), gpu_facts(hosts, [5, 5]))
    assert (topo.nproc_per_node, topo.world_size) == (5, 10)


def test_an_explicit_count_whose_world_size_does_not_divide_is_refused_not_changed():
    hosts = gpu_hosts(2)
    with pytest.raises(TopologyError) as err:
        plan(inv(hosts, divides=40, nproc=7), gpu_facts(hosts, [7, 7]))
    assert "5 (world 10)" in err.value.fix


def test_no_per_node_count_that_divides_suggests_fewer_hosts():
    hosts = gpu_hosts(3)
    with pytest.raises(TopologyError) as err:
        plan(inv(hosts, divides=40), gpu_facts(hosts, [8, 8, 8]))
    assert "no per-node count" in str(err.value)
    assert "2 host(s) x 5 (world 10)" in err.value.fix


def test_unequal_gpus_per_node_use_the_minimum_and_note_the_idle_ones():
    hosts = gpu_hosts(3)
    topo = plan(inv(hosts), gpu_facts(hosts, [8, 5, 8]))
    assert topo.nproc_per_node == 5 and topo.world_size == 15
    assert topo.node("node-0").env_dict["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4"
    assert "CUDA_VISIBLE_DEVICES" not in topo.node("node-1").env_dict
    assert any("unequal GPUs" in n and "node-1: 5" in n and "6 GPU(s) idle" in n for n in topo.notes)


def test_an_explicit_count_larger_than_the_smallest_node_is_refused():
    hosts = gpu_hosts(2)
    with pytest.raises(TopologyError) as err:
        plan(inv(hosts, nproc=8), gpu_facts(hosts, [8, 4]))
    assert "node-1" in str(err.value) and "4 GPU" in str(err.value)


def test_a_single_node_is_its_own_master():
    hosts = gpu_hosts(1)
    topo = plan(inv(hosts), gpu_facts(hosts, [8]))
    assert (topo.nnodes, topo.world_size) == (1, 8)
    assert topo.rank_of("node-0") == range(8)
    assert topo.master.host.name == "node-0"


# --------------------------------------------------------------------------- master and order


def test_the_named_master_takes_node_rank_0_and_the_others_keep_inventory_order():
    hosts = gpu_hosts(3)
    topo = plan(inv(hosts, master="node-2"), gpu_facts(hosts, [2, 2, 2]))
    assert [n.host.name for n in topo.nodes] == ["node-2", "node-0", "node-1"]
    assert topo.rank_of("node-2") == range(0, 2)
    assert topo.rank_of("node-0") == range(2, 4)
    assert topo.rank_of("node-1") == range(4, 6)
    assert topo.master_addr == "172.31.0.84"
    assert topo.host_of_rank(5).host.name == "node-1"


def test_a_master_that_is_not_a_host_is_an_error_naming_the_hosts():
    hosts = gpu_hosts(2)
    with pytest.raises(TopologyError) as err:
        plan(inv(hosts, master="nope"), gpu_facts(hosts, [1, 1]))
    assert "node-0" in err.value.fix


def test_port_zero_is_refused():
    hosts = gpu_hosts(1)
    with pytest.raises(TopologyError):
        plan(inv(hosts, port=0), gpu_facts(hosts, [1]))


# --------------------------------------------------------------------------- CPU-only


def test_cpu_only_nodes_with_an_explicit_count_use_it():
    hosts = [Host("n1", "198.18.0.11"), Host("n2", "198.18.0.12")]
    facts = {h.name: NodeFacts(gpu_ids=None, nic="eth0", address=h.address) for h in hosts}
    topo = plan(inv(hosts, nproc=2), facts)
    assert (topo.nproc_per_node, topo.world_size) == (2, 4)
    assert topo.node("n2").gpu_ids is None and not topo.uses_gpus
    assert topo.node("n2").env_dict == {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}


def test_cpu_only_nodes_with_auto_run_one_rank_each():
    hosts = [Host("n1", "198.18.0.11"), Host("n2", "198.18.0.12")]
    facts = {h.name: NodeFacts(gpu_ids=(), nic="eth0") for h in hosts}
    topo = plan(inv(hosts), facts)
    assert (topo.nproc_per_node, topo.world_size) == (1, 2)


def test_cpu_only_nodes_with_auto_use_their_slots_and_the_minimum():
    hosts = [Host("n1", "198.18.0.11", slots=4), Host("n2", "198.18.0.12", slots=3)]
    topo = plan(inv(hosts), {h.name: NodeFacts(nic="eth0") for h in hosts})
    assert topo.nproc_per_node == 3
    assert any("unequal slots" in n for n in topo.notes)


def test_missing_facts_mean_cpu_ranks():
    hosts = [Host("n1", "198.18.0.11")]
    topo = plan(inv(hosts, nproc=2), {})
    assert topo.world_size == 2 and topo.node("n1").local_addr == "198.18.0.11"


def test_cpu_only_world_size_divisibility_applies_too():
    hosts = [Host("n1", "198.18.0.11"), Host("n2", "198.18.0.12")]
    facts = {h.name: NodeFacts(nic="eth0") for h in hosts}
    with pytest.raises(TopologyError):
        plan(inv(hosts, nproc=3, divides=8), facts)


def test_gpu_and_gpu_less_nodes_cannot_be_mixed():
    hosts = gpu_hosts(2)
    facts = gpu_facts(hosts, [4, 4])
    facts["node-1"] = NodeFacts(gpu_ids=None, nic="eth0")
    with pytest.raises(TopologyError) as err:
        plan(inv(hosts), facts)
    assert "node-1" in str(err.value) and "no GPUs" in str(err.value)


# --------------------------------------------------------------------------- GPU selection


def test_a_host_gpus_list_on_the_bare_host_pins_those_devices():
    hosts = [Host("a", "172.31.0.80", gpus=(4, 5, 6, 7)), Host("b", "172.31.0.82")]
    topo = plan(inv(hosts), gpu_facts(hosts, [8, 4]))
    a = topo.node("a")
    assert topo.nproc_per_node == 4 and a.gpu_ids == (4, 5, 6, 7)
    assert a.env_dict["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"


def test_a_host_gpus_count_takes_the_first_devices():
    hosts = [Host("a", "172.31.0.80", gpus=2)]
    topo = plan(inv(hosts), gpu_facts(hosts, [8]))
    assert topo.node("a").gpu_ids == (0, 1) and topo.node("a").env_dict["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_a_host_gpus_list_naming_an_invisible_device_is_refused():
    hosts = [Host("a", "172.31.0.80", gpus=(6, 9))]
    with pytest.raises(TopologyError) as err:
        plan(inv(hosts), gpu_facts(hosts, [8]))
    assert "9" in str(err.value) and "a" in err.value.where


def test_inside_a_container_docker_applies_the_selection_and_renumbers_from_zero():
    hosts = [Host("a", "172.31.0.80", gpus=(2, 3)), Host("b", "172.31.0.82", gpus=(2, 3))]
    facts = {"a": NodeFacts(gpu_ids=(0, 1, 2, 3, 4, 5, 6, 7), nic="eth0"),  # gathered on the host
             "b": NodeFacts(gpu_ids=(0, 1), nic="eth0")}  # gathered in the container
    topo = plan(inv(hosts, container=DOCKER), facts)
    for name in ("a", "b"):
        assert topo.node(name).gpu_ids == (0, 1)
        assert "CUDA_VISIBLE_DEVICES" not in topo.node(name).env_dict


def test_two_local_nodes_with_disjoint_gpus_share_one_machine():
    hosts = [Host("l1", "127.0.0.1", connection="local", gpus=(0, 1)),
             Host("l2", "127.0.0.1", connection="local", gpus=(2, 3))]
    facts = {h.name: NodeFacts(gpu_ids=(0, 1, 2, 3), nic="lo", address="127.0.0.1") for h in hosts}
    topo = plan(inv(hosts), facts)
    assert topo.master_addr == "127.0.0.1" and topo.world_size == 4
    assert topo.node("l1").env_dict["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert topo.node("l2").env_dict["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert topo.rank_of("l2") == range(2, 4)


def test_two_local_nodes_sharing_a_gpu_are_refused():
    hosts = [Host("l1", "localhost", connection="local", gpus=(0, 1)),
             Host("l2", "localhost", connection="local", gpus=(1, 2))]
    facts = {h.name: NodeFacts(gpu_ids=(0, 1, 2, 3), nic="lo") for h in hosts}
    with pytest.raises(TopologyError) as err:
        plan(inv(hosts), facts)
    assert "GPU 1" in str(err.value) and "Duplicate GPU" in str(err.value)


def test_containers_on_one_machine_are_checked_by_their_physical_gpus():
    hosts = [Host("c1", "172.31.0.80", gpus=(0, 1)), Host("c2", "172.31.0.80", gpus=(1, 2))]
    facts = {h.name: NodeFacts(gpu_ids=(0, 1), nic="eth0") for h in hosts}
    with pytest.raises(TopologyError):
        plan(inv(hosts, container=DOCKER), facts)


# --------------------------------------------------------------------------- addresses and env


def test_local_hosts_use_loopback_for_master_and_local_address():
    hosts = [Host("l1", "localhost", connection="local"), Host("l2", "localhost", connection="local")]
    topo = plan(inv(hosts, nproc=2), {h.name: NodeFacts(nic="lo") for h in hosts})
    assert topo.master_addr == "127.0.0.1"
    assert {n.local_addr for n in topo.nodes} == {"127.0.0.1"}


def test_a_loopback_master_address_with_remote_workers_is_refused():
    hosts = [Host("m", "127.0.0.1"), Host("w", "172.31.0.82")]
    with pytest.raises(TopologyError) as err:
        plan(inv(hosts, nproc=1), {h.name: NodeFacts(nic="eth0") for h in hosts})
    assert "w" in str(err.value)


def test_the_detected_source_address_is_the_local_address():
    hosts = gpu_hosts(2)
    facts = {h.name: NodeFacts(gpu_ids=(0,), nic="bond0", address=f"10.0.0.{i}") for i, h in enumerate(hosts)}
    topo = plan(inv(hosts), facts)
    assert topo.node("node-1").local_addr == "10.0.0.1"
    assert topo.master_addr == "172.31.0.80"  # what the inventory says others reach it on


def test_nic_and_ib_hcas_become_nccl_and_gloo_settings():
    hosts = [Host("a", "172.31.0.80"), Host("b", "172.31.0.82", nic="ib0")]
    facts = {"a": NodeFacts(gpu_ids=(0, 1), nic="eth0", ib_hcas=("mlx5_0", "mlx5_1")),
             "b": NodeFacts(gpu_ids=(0, 1), nic="docker0")}
    topo = plan(inv(hosts), facts)
    a, b = topo.node("a").env_dict, topo.node("b").env_dict
    assert a == {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0,mlx5_1"}
    assert b["NCCL_SOCKET_IFNAME"] == "ib0" and b["GLOO_SOCKET_IFNAME"] == "ib0"
    assert topo.node("b").nic == "ib0"


def test_job_and_host_env_win_over_derived_values_and_container_env_is_left_alone():
    hosts = [Host("a", "172.31.0.80", env=(EnvVar("GLOO_SOCKET_IFNAME", "eth9"),)), Host("b", "172.31.0.82")]
    container = ContainerSpec(image="x", env=(EnvVar("NCCL_IB_HCA", "mlx5_7"),))
    facts = {h.name: NodeFacts(gpu_ids=(0,), nic="eth0", ib_hcas=("mlx5_0",)) for h in hosts}
    topo = plan(inv(hosts, container=container, job_env=[EnvVar("NCCL_SOCKET_IFNAME", "eth1"), EnvVar("NCCL_DEBUG", "INFO")]), facts)
    a, b = topo.node("a").env_dict, topo.node("b").env_dict
    assert a["NCCL_SOCKET_IFNAME"] == "eth1" and a["GLOO_SOCKET_IFNAME"] == "eth9" and a["NCCL_DEBUG"] == "INFO"
    assert b["GLOO_SOCKET_IFNAME"] == "eth0"
    assert "NCCL_IB_HCA" not in a  # the container already has its own value
    assert any("overrides" in n for n in topo.notes)


def test_hostname_on_loopback_without_a_known_interface_is_refused_for_multi_node():
    hosts = gpu_hosts(2)
    facts = {h.name: NodeFacts(gpu_ids=(0,), hostname_on_loopback=True) for h in hosts}
    with pytest.raises(TopologyError) as err:
        plan(inv(hosts), facts)
    assert "loopback" in str(err.value) and "nic:" in err.value.fix


def test_hostname_on_loopback_with_an_interface_is_only_noted():
    hosts = gpu_hosts(2)
    facts = {h.name: NodeFacts(gpu_ids=(0,), nic="eth0", hostname_on_loopback=True) for h in hosts}
    topo = plan(inv(hosts), facts)
    assert any("loopback" in n for n in topo.notes)


def test_the_first_note_says_master_ranks_and_world_size():
    hosts = gpu_hosts(2)
    topo = plan(inv(hosts), gpu_facts(hosts, [2, 2]))
    assert topo.notes[0].startswith("master node-0 (172.31.0.80:29500) holds ranks 0..1")
    assert "world size 4" in topo.notes[0]


def test_nproc_per_node_must_be_auto_or_positive():
    hosts = gpu_hosts(1)
    with pytest.raises(TopologyError):
        plan(inv(hosts, nproc="many"), gpu_facts(hosts, [1]))
    with pytest.raises(TopologyError):
        plan(inv(hosts, nproc=0), gpu_facts(hosts, [1]))


def test_local_nodes_on_one_machine_plan_over_loopback_even_with_the_hostname_on_loopback():
    hosts = (Host("a", "127.0.0.1", connection="local", gpus=(0,)), Host("b", "127.0.0.1", connection="local", gpus=(1,)))
    inv = Inventory("t", hosts, job=JobSpec(command=("x.py",), nproc_per_node="auto"))
    facts = {h.name: NodeFacts(gpu_ids=(0, 1), hostname_on_loopback=True) for h in hosts}
    topo = plan(inv, facts)
    assert topo.world_size == 2 and topo.master_addr == "127.0.0.1"
    assert [n.gpu_ids for n in topo.nodes] == [(0,), (1,)]
