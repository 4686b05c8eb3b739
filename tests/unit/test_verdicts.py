"""Preflight verdicts: facts in, CheckResults out. Facts come from the real fixtures."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from clusterctl.preflight import facts, verdicts
from clusterctl.errors import TopologyError
from clusterctl.models import CheckSettings, CheckStatus, ContainerSpec, Host, Inventory, JobSpec

PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL
TOOLS = Path(__file__).resolve().parents[1] / "fixtures" / "tools"
SETTINGS = CheckSettings()


def fixture(name: str) -> str:
    return (TOOLS / name).read_text()


def inventory(gpus=None, nproc="auto", container_gpus="all", hosts=("node-a", "node-b")) -> Inventory:
    return Inventory(
        name="test",
        hosts=tuple(Host(name=name, address=f"10.10.0.{i + 1}", gpus=gpus if i == 0 else None)
                    for i, name in enumerate(hosts)),
        container=ContainerSpec(image="registry/wan22:1014", name="wan22", gpus=container_gpus, shm_size="16g"),
        job=JobSpec(nproc_per_node=nproc),
    )


def statuses(results):
    return {result.host: result.status for result in results}


# --------------------------------------------------------------------------- cause prefix


def test_cause_is_the_detail_prefix_and_read_back():
    result = verdicts.check_rdzv_port_free("node-a", 29500, facts.parse_ss(fixture("ss/ltnp_python_listeners.txt")))
    assert result.detail.startswith("port_in_use: ")
    assert verdicts.cause_of(result) == "port_in_use"
    assert verdicts.cause_of(verdicts.check_ssh("node-a", None, "10.0.0.1")) is None


# --------------------------------------------------------------------------- ssh, docker, container


def test_ssh_pass_when_connected():
    result = verdicts.check_ssh("node-a", None, "10.10.0.1", user="root", port=22)
    assert result.status == PASS and "root@10.10.0.1:22" in result.detail


@pytest.mark.parametrize("error, fix_words", [
    ("Authentication failed.", "ssh.identity_file"),
    ("Server '10.10.0.1' not found in known_hosts", "ssh.host_key_policy: accept-new"),
    ("[Errno 110] Connection timed out", "hosts[node-a].address"),
])
def test_ssh_failures_point_at_the_inventory_key(error, fix_words):
    result = verdicts.check_ssh("node-a", error, "10.10.0.1")
    assert result.status == FAIL and error in result.detail and fix_words in result.fix


def test_docker_pass_names_version_and_runtimes():
    result = verdicts.check_docker("node-a", facts.parse_docker_info(fixture("docker/info_running_nvidia_runtime.json")))
    assert result.status == PASS and "20.10.24+dfsg1" in result.detail and "nvidia" in result.detail


@pytest.mark.parametrize("name, fix_words", [
    ("docker/info_daemon_down.txt", "systemctl enable --now docker"),
    ("docker/info_not_found_dash.txt", "install Docker Engine"),
])
def test_docker_fail_when_the_engine_is_unusable(name, fix_words):
    result = verdicts.check_docker("node-a", facts.parse_docker_info(fixture(name)))
    assert result.status == FAIL and fix_words in result.fix


def test_docker_not_needed_on_the_bare_host():
    result = verdicts.check_docker("node-a", facts.DockerInfo(error="x"), uses_container=False)
    assert result.status == PASS


def test_container_pass_when_running_with_host_network():
    spec = ContainerSpec(image="registry.local/clusterctl/tiny:1", name="wan22", gpus="none")
    state = facts.parse_docker_inspect(fixture("docker/inspect_running_net_host_shm16g.json"))
    assert verdicts.check_container("node-a", spec, state).status == PASS


def test_container_fail_when_missing_or_stopped_or_different():
    spec = ContainerSpec(image="registry.local/clusterctl/tiny:2", name="gpuwant")
    missing = verdicts.check_container("node-a", spec, facts.parse_docker_inspect(fixture("docker/inspect_missing.txt")))
    assert missing.status == FAIL and "clusterctl up" in missing.fix
    created = verdicts.check_container("node-a", spec, facts.parse_docker_inspect(fixture("docker/inspect_created_gpus_all.json")))
    assert created.status == FAIL and "is created, not running" in created.detail
    other_image = replace(spec, image="registry.local/clusterctl/tiny:3")
    stale = verdicts.check_container("node-a", other_image, facts.parse_docker_inspect(fixture("docker/inspect_created_gpus_all.json")))
    assert stale.status == FAIL and "container.image: registry.local/clusterctl/tiny:3" in stale.detail


def test_container_without_gpus_or_host_network_fails():
    spec = ContainerSpec(image="img:1", name="wan22", gpus="all")
    state = facts.ContainerState(name="wan22", image="img:1", running=True, status="running", network_mode="bridge")
    result = verdicts.check_container("node-a", spec, state)
    assert result.status == FAIL and verdicts.cause_of(result) == "nic_mismatch"
    assert "--net=host" in result.detail and "without GPUs" in result.detail


def test_container_not_used_passes():
    assert verdicts.check_container("node-a", None, None).status == PASS


# --------------------------------------------------------------------------- gpus


def h100x8():
    return facts.parse_smi_table(fixture("nvidia_smi/table_h100x8_sxm_idle.txt"))


def test_gpus_pass_with_all_visible():
    result = verdicts.check_gpus("node-a", inventory(), h100x8())
    assert result.status == PASS and "8 x NVIDIA H100 80GB HBM3" in result.detail


def test_gpus_fail_when_inventory_names_missing_ids():
    result = verdicts.check_gpus("node-a", inventory(gpus=(0, 1, 8, 9)), h100x8())
    assert result.status == FAIL and verdicts.cause_of(result) == "gpu_ordinal"
    assert "[8, 9] do not exist" in result.detail and "hosts[node-a].gpus: [0, 1, 2, 3, 4, 5, 6, 7]" in result.fix


def test_gpus_fail_when_count_exceeds_visible():
    one = facts.parse_smi_table(fixture("nvidia_smi/table_h200x1_idle.txt"))
    result = verdicts.check_gpus("node-a", inventory(gpus=4), one)
    assert result.status == FAIL and result.fix == "set hosts[node-a].gpus: 1"


def test_gpus_fail_when_nproc_per_node_exceeds_usable():
    result = verdicts.check_gpus("node-a", inventory(gpus=(0, 1, 2, 3), nproc=8), h100x8())
    assert result.status == FAIL and "ranks 4..7" in result.detail and result.fix.startswith("set job.nproc_per_node: 4")


def test_gpus_warn_when_nproc_per_node_leaves_gpus_idle():
    result = verdicts.check_gpus("node-a", inventory(nproc=4), h100x8())
    assert result.status == WARN and "job.nproc_per_node: auto" in result.fix


def test_gpus_fail_without_driver_quotes_the_reason():
    inv = facts.parse_smi_table(fixture("nvidia_smi/driver_not_communicating.txt"))
    result = verdicts.check_gpus("node-a", inventory(), inv)
    assert result.status == FAIL and "couldn't communicate with the NVIDIA driver" in result.detail
    assert "hosts[node-a].gpus: none" in result.fix


def test_gpus_none_requested_passes():
    assert verdicts.check_gpus("node-a", inventory(container_gpus="none"), facts.GpuInventory()).status == PASS


def test_gpu_runtime_without_the_hook_probe_passes_on_a_registered_runtime_and_warns_otherwise():
    with_nvidia = facts.parse_docker_info(fixture("docker/info_running_nvidia_runtime.json"))
    without = facts.parse_docker_info(fixture("docker/info_text_grep_runtime_no_nvidia.txt"))
    assert verdicts.check_gpu_runtime("node-a", with_nvidia).status == PASS
    unknown = verdicts.check_gpu_runtime("node-a", replace(without, server_version="24.0.5"))
    assert unknown.status == WARN and "nvidia-ctk runtime configure --runtime=docker" in unknown.fix
    assert verdicts.check_gpu_runtime("node-a", without, selection="none").status == PASS


def test_gpu_busy_names_pid_process_and_memory():
    gpus = facts.parse_gpu_csv(fixture("nvidia_smi/query_gpu_h100x1.csv"))
    processes = facts.parse_compute_apps_csv(fixture("nvidia_smi/compute_apps_h100x1_busy.csv"))
    result = verdicts.check_gpu_busy("node-a", processes, gpus)
    assert result.status == FAIL and verdicts.cause_of(result) == "duplicate_gpu"
    assert "GPU 0: pid 411 python3 6662 MiB" in result.detail and "kill 411" in result.fix


def test_gpu_busy_leaves_own_ranks_and_other_gpus_alone():
    processes = facts.parse_smi_table(fixture("nvidia_smi/table_h100x1_vm_busy.txt")).processes
    assert verdicts.check_gpu_busy("node-a", processes, own_pids=(411,)).status == PASS
    assert verdicts.check_gpu_busy("node-a", processes, selection=(1, 2)).status == PASS
    assert verdicts.check_gpu_busy("node-a", ()).status == PASS


def test_gpu_busy_suggests_the_free_gpus():
    gpus = h100x8()
    busy = (facts.GpuProcess(pid=7, process_name="python", gpu_index=3, used_memory_mib=100, kind="C"),)
    result = verdicts.check_gpu_busy("node-a", busy, gpus)
    assert "hosts[node-a].gpus: [0, 1, 2, 4, 5, 6, 7]" in result.fix


def test_fabric_pass_completed_fail_in_progress_pass_not_applicable():
    done = verdicts.check_fabric("node-a", facts.parse_smi_query(fixture("nvidia_smi/q_h200x1_fabric_completed_trimmed.txt")))
    assert done.status == PASS
    stuck = verdicts.check_fabric("node-a", facts.parse_smi_query(fixture("nvidia_smi/q_fabric_in_progress_grep.txt")))
    assert stuck.status == FAIL and verdicts.cause_of(stuck) == "fabricmanager" and "nvidia-fabricmanager" in stuck.fix
    vm = verdicts.check_fabric("node-a", facts.parse_smi_query(fixture("nvidia_smi/q_h100x1_vm.txt")))
    assert vm.status == PASS and "no NVSwitch" in vm.detail


def test_driver_version_fails_the_odd_node_and_the_one_without_driver():
    results = verdicts.check_driver_version({"a": "565.57.01", "b": "565.57.01", "c": "550.90.12", "d": None})
    assert statuses(results) == {"a": PASS, "b": PASS, "c": FAIL, "d": FAIL}
    assert "c runs driver 550.90.12, a, b run 565.57.01" in results[2].detail
    assert verdicts.cause_of(results[2]) == "version_mismatch" and "install driver 565.57.01 on c" in results[2].fix


def test_driver_version_from_real_nodes():
    seen = {"h100-vm": facts.parse_smi_table(fixture("nvidia_smi/table_h100x1_vm_idle.txt")).driver_version,
            "h200-pair": facts.parse_gpu_csv(fixture("nvidia_smi/query_gpu_h200x2.csv")).driver_version,
            "hgx": facts.parse_smi_table(fixture("nvidia_smi/table_h100x8_sxm_idle.txt")).driver_version}
    assert statuses(verdicts.check_driver_version(seen)) == {"h100-vm": PASS, "h200-pair": PASS, "hgx": FAIL}


def test_gpu_busy_on_both_gpus_of_a_pair():
    gpus = facts.parse_gpu_csv(fixture("nvidia_smi/query_gpu_h200x2.csv"))
    processes = facts.parse_compute_apps_csv(fixture("nvidia_smi/compute_apps_h200x2_busy.csv"))
    result = verdicts.check_gpu_busy("node-a", processes, gpus)
    assert "GPU 0: pid 556 python3 6662 MiB; GPU 1: pid 557 python3 6662 MiB" in result.detail
    assert "kill 556 557" in result.fix and "leave the busy GPUs out" not in result.fix


def test_driver_version_single_node_passes():
    assert statuses(verdicts.check_driver_version({"a": "580.159.04"})) == {"a": PASS}


# --------------------------------------------------------------------------- rendezvous


def test_rdzv_port_free_pass_and_port_in_use():
    listeners = facts.parse_ss(fixture("ss/ltnp_python_listeners.txt"))
    assert verdicts.check_rdzv_port_free("node-a", 29501, listeners).status == PASS
    held = verdicts.check_rdzv_port_free("node-a", 29500, listeners)
    assert held.status == FAIL and "pid 10220 (python3)" in held.detail and "rendezvous.port: 29501" in held.fix


def test_rdzv_port_held_by_an_invisible_owner_says_how_to_find_it():
    held = verdicts.check_rdzv_port_free("node-a", 2024, facts.parse_ss(fixture("ss/ltnp_owner_not_visible.txt")))
    assert held.status == FAIL and "ss -ltnp" in held.fix


def test_rdzv_reachable_pass_on_connect_and_on_refused_without_rules():
    assert verdicts.check_rdzv_reachable("node-b", "node-a", "10.10.0.1", 29500, None).status == PASS
    refused = verdicts.check_rdzv_reachable("node-b", "node-a", "10.10.0.1", 29500, "[Errno 111] Connection refused")
    assert refused.status == PASS and "nothing listens" in refused.detail


def test_rdzv_reachable_fail_quotes_the_master_rule():
    rules = facts.rules_blocking(fixture("firewall/iptables_save_port_rules.txt"), 29500, src="10.10.0.2", direction="in")
    result = verdicts.check_rdzv_reachable("node-b", "node-a", "10.10.0.1", 29500, "timed out", master_rules=rules)
    assert result.status == FAIL and verdicts.cause_of(result) == "rdzv_unreachable"
    assert "on node-a: '-A INPUT -p tcp -m tcp --dport 29500 -j DROP'" in result.detail
    assert "iptables -I INPUT -p tcp --dport 29500 -j ACCEPT" in result.fix


@pytest.mark.parametrize("name, command", [
    ("firewall/ufw_status_verbose.txt", "ufw allow 29500/tcp"),
    ("firewall/nft_ruleset_port_rules.txt", "nft insert rule inet filter input tcp dport 29500 accept"),
])
def test_rdzv_reachable_fix_speaks_the_firewall_of_the_rule(name, command):
    rules = facts.rules_blocking(fixture(name), 29500, src="10.10.0.2", direction="in")
    result = verdicts.check_rdzv_reachable("node-b", "node-a", "10.10.0.1", 29500, "timed out", master_rules=rules)
    assert command in result.fix


def test_rdzv_reachable_fail_quotes_the_worker_rule_even_when_refused():
    rules = facts.rules_blocking(fixture("firewall/nft_ruleset_port_rules.txt"), 29501, dst="10.10.0.1", direction="out")
    result = verdicts.check_rdzv_reachable("node-b", "node-a", "10.10.0.1", 29501, "Connection refused", worker_rules=rules)
    assert result.status == FAIL and "on node-b: 'ip daddr 10.10.0.1 tcp dport 29501 reject" in result.detail


def test_rdzv_reachable_fail_without_rules_points_at_the_address():
    result = verdicts.check_rdzv_reachable("node-b", "node-a", "10.10.0.1", 29500, "No route to host")
    assert result.status == FAIL and "hosts[node-a].address (10.10.0.1)" in result.fix


# --------------------------------------------------------------------------- nic, hostname, ib


def route(name: str) -> facts.RouteInfo:
    return facts.parse_route_get(fixture(name))


def test_nic_pass_when_every_node_uses_the_same_name():
    results = verdicts.check_nic({"node-a": route("ip/route_get_json_local.json"),
                                  "node-b": route("ip/route_get_json_direct.json")}, master="node-a",
                                 interfaces={"node-a": facts.parse_ip_addr(fixture("ip/addr_json_docker_bridges.json"))})
    assert statuses(results) == {"node-a": PASS, "node-b": PASS}
    assert "NCCL_SOCKET_IFNAME=ens5f0 GLOO_SOCKET_IFNAME=ens5f0" in results[1].detail


def test_nic_passes_when_names_differ_and_says_what_each_node_gets():
    results = verdicts.check_nic({"node-a": route("ip/route_get_json_direct.json"),
                                  "node-b": route("ip/route_get_json_dev_vm.json")}, master="node-a")
    assert statuses(results) == {"node-a": PASS, "node-b": PASS}
    assert "node-a: ens5f0, node-b: eth0" in results[1].detail and "here NCCL_SOCKET_IFNAME=eth0" in results[1].detail


def test_nic_fails_on_a_docker_bridge_route_and_on_no_route():
    results = verdicts.check_nic({"node-a": route("ip/route_get_text_direct.txt"),
                                  "node-b": route("ip/route_get_text_docker0.txt"),
                                  "node-c": route("ip/route_get_text_unreachable.txt")}, master="node-a")
    assert statuses(results) == {"node-a": PASS, "node-b": FAIL, "node-c": FAIL}
    assert verdicts.cause_of(results[1]) == "nic_mismatch" and "docker0" in results[1].detail
    assert "Network is unreachable" in results[2].detail


def test_nic_override_from_the_inventory_wins():
    results = verdicts.check_nic({"node-b": route("ip/route_get_text_docker0.txt")}, master="node-a",
                                 overrides={"node-b": "ens5f0"})
    assert results[0].status == PASS and "hosts[node-b].nic: ens5f0" in results[0].detail


def test_nic_master_without_address_facts_warns():
    results = verdicts.check_nic({"node-a": route("ip/route_get_text_local.txt")}, master="node-a")
    assert results[0].status == WARN and "hosts[node-a].nic" in results[0].fix


@pytest.mark.parametrize("name, status, cause", [
    ("host/hostname_resolvable.txt", PASS, None),
    ("host/hostname_loopback_127_0_1_1.txt", WARN, "nic_mismatch"),
    ("host/hostname_unresolvable.txt", WARN, "hostname_unresolvable"),
])
def test_hostname(name, status, cause):
    result = verdicts.check_hostname("node-a", facts.parse_hostname_resolution(fixture(name)))
    assert result.status == status and verdicts.cause_of(result) == cause
    if status == WARN:
        assert "--local-addr" in result.detail and "/etc/hosts" in result.fix


def ib(name: str) -> facts.IbStatus:
    return facts.parse_ibstat(fixture(name))


def test_ib_pass_with_nccl_ib_hca_on_matching_nodes():
    results = verdicts.check_ib({"a": ib("ibstat/h100_8ib_1roce_bond_all_active.txt"),
                                 "b": ib("ibstat/h100_8ib_1roce_bond_all_active.txt")})
    assert statuses(results) == {"a": PASS, "b": PASS}
    assert "NCCL_IB_HCA=mlx5_0:1,mlx5_1:1,mlx5_4:1" in results[0].detail and "400 Gb/s InfiniBand" in results[0].detail


def test_ib_fails_the_node_without_ports_when_others_have_them():
    results = verdicts.check_ib({"a": ib("ibstat/h100_8ib_1roce_bond_all_active.txt"),
                                 "b": ib("ibstat/no_devices_empty.txt")})
    assert statuses(results) == {"a": PASS, "b": FAIL}
    assert verdicts.cause_of(results[1]) == "ib_config" and "checks.ib: off" in results[1].fix


def test_ib_fails_the_node_on_a_different_fabric():
    results = verdicts.check_ib({"a": ib("ibstat/h100_8ib_1roce_bond_all_active.txt"),
                                 "b": ib("ibstat/h100_8ib_ethernet_ports_down.txt"),
                                 "c": ib("ibstat/h100_roce_some_down_polling.txt")})
    assert statuses(results) == {"a": PASS, "b": PASS, "c": FAIL}
    assert "Ethernet ports" in results[2].detail and "use InfiniBand" in results[2].detail


def test_ib_warns_on_down_ports_and_on_an_ibpanic():
    roce = verdicts.check_ib({"a": ib("ibstat/h100_roce_some_down_polling.txt")})[0]
    assert roce.status == WARN and "mlx5_11:1 Down/Polling" in roce.detail and "only" not in roce.detail
    partial = verdicts.check_ib({"a": ib("ibstat/a100_8ib_partial_ibpanic.txt")})[0]
    assert partial.status == WARN and "mlx5_8" in partial.detail


def test_ib_warns_the_node_with_fewer_active_ports():
    full = ib("ibstat/h100_8ib_1roce_bond_all_active.txt")
    half = replace(full, ports=full.ports[:4])
    results = verdicts.check_ib({"a": full, "b": full, "c": half})
    assert statuses(results) == {"a": PASS, "b": PASS, "c": WARN}
    assert "only 4 active port(s) where the other nodes have 8" in results[2].detail


def test_ib_auto_without_any_ib_passes_and_required_fails():
    none = {"a": ib("ibstat/no_devices_empty.txt"), "b": ib("ibstat/not_found_dash.txt")}
    assert statuses(verdicts.check_ib(none, mode="auto")) == {"a": PASS, "b": PASS}
    required = verdicts.check_ib(none, mode="required")
    assert statuses(required) == {"a": FAIL, "b": FAIL} and "ibstat is not installed" in required[1].detail


def test_ib_off_passes_and_disables_ib():
    results = verdicts.check_ib({"a": ib("ibstat/initializing_flattened_azure.txt")}, mode="off")
    assert results[0].status == PASS and "NCCL_IB_DISABLE=1" in results[0].detail


# --------------------------------------------------------------------------- shm, disk, memory


def test_shm_fails_at_dockers_default_64m():
    shm = facts.parse_df(fixture("host/df_shm_docker_default_64m.txt"))
    result = verdicts.check_shm("node-a", shm, SETTINGS, ContainerSpec(image="img"))
    assert result.status == FAIL and verdicts.cause_of(result) == "shm_too_small"
    assert result.fix == "set container.shm_size: 16g or container.ipc: host" and "64 MiB" in result.detail


def test_shm_passes_at_16g_and_with_ipc_host():
    shm = facts.parse_df(fixture("host/df_shm_docker_16g.txt"))
    assert verdicts.check_shm("node-a", shm, SETTINGS, ContainerSpec(image="img")).status == PASS
    small = facts.parse_df(fixture("host/df_shm_docker_default_64m.txt"))
    assert verdicts.check_shm("node-a", small, SETTINGS, ContainerSpec(image="img", ipc="host")).status == PASS


def test_shm_unknown_warns():
    assert verdicts.check_shm("node-a", None, SETTINGS).status == WARN


def test_disk_pass_and_fail():
    root = facts.parse_df(fixture("host/df_root.txt"))
    assert verdicts.check_disk("node-a", root, SETTINGS, "/workspace/output").status == PASS
    tight = verdicts.check_disk("node-a", root, CheckSettings(disk_min_bytes=100 << 30), "/workspace/output")
    assert tight.status == FAIL and "job.outputs" in tight.fix and "78.8 GiB free" in tight.detail


def test_memory_pass_and_warn():
    mem = facts.parse_meminfo(fixture("host/meminfo_h100_vm.txt"))
    assert verdicts.check_memory("node-a", mem).status == PASS
    low = verdicts.check_memory("node-a", facts.MemInfo(total_bytes=64 << 30, available_bytes=2 << 30))
    assert low.status == WARN and verdicts.cause_of(low) == "oom_killed"


# --------------------------------------------------------------------------- versions, clocks, topology


def test_versions_fail_the_odd_node_naming_both_versions():
    good = facts.parse_versions(fixture("versions/h100_torch_cu130.json"))
    odd = replace(good, torch="2.9.1+cu128", cuda="12.8", nccl="2.27.3")
    results = verdicts.check_versions({"a": good, "b": good, "c": odd}, ContainerSpec(image="img"))
    assert statuses(results) == {"a": PASS, "b": PASS, "c": FAIL}
    assert verdicts.cause_of(results[2]) == "version_mismatch"
    assert "c has python 3.12.3, torch 2.9.1+cu128, cuda 12.8, nccl 2.27.3" in results[2].detail
    assert "a, b have python 3.12.3, torch 2.11.0+cu130, cuda 13.0, nccl 2.28.9" in results[2].detail
    assert "container.pull: always" in results[2].fix


def test_versions_fail_where_torch_is_missing():
    results = verdicts.check_versions({"a": facts.parse_versions(fixture("versions/h100_torch_cu130.json")),
                                       "b": facts.parse_versions(fixture("versions/h100_system_python_no_torch.json"))})
    assert statuses(results) == {"a": PASS, "b": FAIL} and "No module named 'torch'" in results[1].detail


def test_clock_skew_warns_on_the_drifting_node():
    results = verdicts.check_clock_skew({"a": 0.01, "b": -0.02, "c": 3.5}, SETTINGS)
    assert statuses(results) == {"a": PASS, "b": PASS, "c": WARN}
    assert "3.49 s ahead" in results[2].detail and "NTP" in results[2].fix


def test_topology_wraps_a_topology_error_into_fail():
    def build():
        raise TopologyError("world size 16 does not divide job.world_size_divides 40",
                            fix="use 5 or 10 GPUs per node, or set job.world_size_divides")

    result = verdicts.check_topology(build)
    assert result.status == FAIL and result.host is None
    assert verdicts.cause_of(result) == "config_divisibility" and result.fix.startswith("use 5 or 10")


def test_topology_pass_and_message_forms():
    class Layout:
        world_size, nproc_per_node, nnodes = 16, 8, 2

    assert verdicts.check_topology(lambda: Layout()).detail == "world_size 16, nproc_per_node 8, nnodes 2"
    assert verdicts.check_topology("hosts expose no GPU").status == FAIL
    assert verdicts.check_topology(TopologyError("no GPU", fix="set gpus")).fix == "set gpus"


def test_every_result_serialises_to_the_contract_shape():
    result = verdicts.check_shm("node-a", facts.parse_df(fixture("host/df_shm_docker_default_64m.txt")), SETTINGS,
                                ContainerSpec(image="img"))
    assert set(result.to_json()) == {"host", "check", "status", "detail", "fix"}
    assert result.to_json()["status"] == "fail"
