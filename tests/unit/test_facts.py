"""Fact parsers on real tool outputs (tests/fixtures/tools/, sources in SOURCES.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterctl.preflight import facts
from clusterctl.models import CommandResult

TOOLS = Path(__file__).resolve().parents[1] / "fixtures" / "tools"


def fixture(name: str) -> str:
    return (TOOLS / name).read_text()


# --------------------------------------------------------------------------- provenance


def test_every_fixture_names_its_source():
    listed = fixture("SOURCES.md")
    for path in sorted(TOOLS.rglob("*")):
        if path.is_dir() or path.name in ("SOURCES.md", "capture_device.sh", "capture_probe.py"):
            continue
        relative = str(path.relative_to(TOOLS))
        if path.suffix == ".json":
            assert f"`{relative}`" in listed, f"{relative} has no line in SOURCES.md"
        else:
            assert path.read_text().startswith("# source: "), f"{relative} lacks its '# source:' line"


def test_provenance_lines_are_dropped_and_nothing_else():
    text = "# source: https://example.org\n# command: ibstat\nCA 'mlx5_0'\n# not provenance\n"
    assert facts.strip_provenance(text) == "CA 'mlx5_0'\n# not provenance\n"


def test_combined_output_keeps_stderr_after_stdout():
    result = CommandResult(exit_code=1, stdout='{"ID":""}\n', stderr="Cannot connect to the Docker daemon")
    assert facts.combined(result) == '{"ID":""}\nCannot connect to the Docker daemon'


def test_fact_commands_are_argv_tuples_without_shell_quoting():
    assert facts.NVIDIA_SMI_GPUS.argv[0] == "nvidia-smi"
    assert facts.NVIDIA_SMI_GPUS.argv[1] == "--query-gpu=index,uuid,name,memory.total,memory.used,driver_version,pci.bus_id"
    # the address is an argument of the fallback script, never part of the script's text
    assert facts.route_get_command("10.0.0.1").argv[:2] == ("sh", "-c")
    assert facts.route_get_command("10.0.0.1").argv[3:] == ("sh", "10.0.0.1")
    assert facts.route_get_command("10.0.0.1", json_output=False).argv == ("ip", "route", "get", "10.0.0.1")
    assert facts.df_command("/workspace/output").argv == ("df", "-P", "-B1", "/workspace/output")
    assert facts.versions_command("python3").argv[:2] == ("python3", "-c")
    assert facts.DOCKER_INFO.argv == ("docker", "info", "--format", "{{json .}}")


# --------------------------------------------------------------------------- nvidia-smi


@pytest.mark.parametrize("name, count, gpu_name, driver, cuda", [
    ("nvidia_smi/table_h100x8_sxm_idle.txt", 8, "NVIDIA H100 80GB HBM3", "565.57.01", "12.7"),
    ("nvidia_smi/table_a100x4_sxm_idle.txt", 4, "NVIDIA A100-SXM4-80GB", "555.42.02", "12.5"),
    ("nvidia_smi/table_h200x1_idle.txt", 1, "NVIDIA H200", "550.90.12", "12.4"),
    ("nvidia_smi/table_h20x1_no_process_section.txt", 1, "NVIDIA H20", "550.54.14", "12.6"),
    ("nvidia_smi/table_h100x1_vm_idle.txt", 1, "NVIDIA H100 80GB HBM3", "580.159.04", "13.0"),
])
def test_default_table_lists_gpus_and_versions(name, count, gpu_name, driver, cuda):
    inventory = facts.parse_smi_table(fixture(name))
    assert inventory.error is None
    assert inventory.count == count
    assert inventory.indices == tuple(range(count))
    assert {gpu.name for gpu in inventory.gpus} == {gpu_name}
    assert (inventory.driver_version, inventory.cuda_version) == (driver, cuda)
    assert inventory.processes == ()


def test_default_table_reads_bus_ids_and_memory():
    gpus = facts.parse_smi_table(fixture("nvidia_smi/table_h100x8_sxm_idle.txt")).gpus
    assert gpus[7].pci_bus_id == "00000000:DB:00.0"
    assert (gpus[7].memory_used_mib, gpus[7].memory_total_mib) == (1, 81559)
    h200 = facts.parse_smi_table(fixture("nvidia_smi/table_h200x1_idle.txt")).gpus[0]
    assert h200.memory_total_mib == 143771


def test_default_table_of_two_busy_h200s():
    inventory = facts.parse_smi_table(fixture("nvidia_smi/table_h200x2_vm_busy.txt"))
    assert inventory.indices == (0, 1) and inventory.gpus[1].pci_bus_id == "00000000:00:07.0"
    assert [(p.gpu_index, p.pid, p.used_memory_mib) for p in inventory.processes] == [(0, 556, 6662), (1, 557, 6662)]


def test_default_table_lists_compute_processes():
    busy = facts.parse_smi_table(fixture("nvidia_smi/table_h100x1_vm_busy.txt"))
    assert busy.processes == (facts.GpuProcess(pid=411, process_name="python3", gpu_index=0,
                                               used_memory_mib=6662, kind="C"),)
    assert busy.gpus[0].memory_used_mib == 6671


@pytest.mark.parametrize("name, reason", [
    ("nvidia_smi/not_found_bash.txt", "nvidia-smi is not installed"),
    ("nvidia_smi/not_found_sh.txt", "nvidia-smi is not installed"),
    ("nvidia_smi/driver_not_communicating.txt", "NVIDIA-SMI has failed because it couldn't communicate"),
    ("nvidia_smi/nvml_driver_library_mismatch.txt", "Failed to initialize NVML: Driver/library version mismatch"),
])
def test_missing_tool_or_driver_reads_as_no_gpus_with_the_reason(name, reason):
    text = fixture(name)
    for parsed in (facts.parse_smi_table(text), facts.parse_gpu_csv(text)):
        assert parsed.gpus == ()
        assert reason in parsed.error
    assert facts.parse_compute_apps_csv(text) == ()
    assert reason in facts.parse_topology(text).error
    assert reason in facts.parse_smi_query(text).error


@pytest.mark.parametrize("name", ["nvidia_smi/query_gpu_h100x1.csv", "nvidia_smi/query_gpu_h100x1_header_units.csv"])
def test_gpu_query_csv_with_or_without_header_and_units(name):
    inventory = facts.parse_gpu_csv(fixture(name))
    assert inventory.gpus == (facts.Gpu(
        index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-b3816b77-9242-1d40-869b-614a64f092de",
        memory_total_mib=81559, memory_used_mib=0, driver_version="580.159.04", pci_bus_id="00000000:00:06.0"),)
    assert inventory.driver_version == "580.159.04"
    assert inventory.index_of_uuid("GPU-b3816b77-9242-1d40-869b-614a64f092de") == 0


@pytest.mark.parametrize("name", ["nvidia_smi/compute_apps_h100x1_busy.csv",
                                  "nvidia_smi/compute_apps_h100x1_busy_header.csv"])
def test_compute_apps_csv_names_pid_process_gpu_and_memory(name):
    (process,) = facts.parse_compute_apps_csv(fixture(name))
    assert (process.pid, process.process_name, process.used_memory_mib) == (411, "python3", 6662)
    assert process.gpu_uuid == "GPU-b3816b77-9242-1d40-869b-614a64f092de"


def test_two_gpu_csv_queries_line_up_by_uuid():
    inventory = facts.parse_gpu_csv(fixture("nvidia_smi/query_gpu_h200x2.csv"))
    assert [(g.index, g.name, g.memory_total_mib) for g in inventory.gpus] == [
        (0, "NVIDIA H200", 143771), (1, "NVIDIA H200", 143771)]
    processes = facts.parse_compute_apps_csv(fixture("nvidia_smi/compute_apps_h200x2_busy.csv"))
    assert [inventory.index_of_uuid(p.gpu_uuid) for p in processes] == [0, 1]


def test_compute_apps_csv_is_empty_when_no_process_runs():
    assert facts.parse_compute_apps_csv(fixture("nvidia_smi/compute_apps_h100x1_idle.csv")) == ()


def test_topology_of_an_nvswitch_node_with_a_nic_per_gpu():
    topo = facts.parse_topology(fixture("nvidia_smi/topo_h100x8_8nic.txt"))
    assert topo.gpus == tuple(f"GPU{i}" for i in range(8))
    assert topo.nics == tuple(f"mlx5_{i}" for i in range(8))
    assert topo.link("GPU0", "GPU7") == "NV18"
    assert topo.link("GPU3", "NIC3") == "PIX" and topo.link("GPU0", "NIC4") == "SYS"
    assert topo.all_gpus_nvlinked
    assert topo.nics_near("GPU5") == ("mlx5_5",)
    assert topo.cpu_affinity["GPU4"] == "48-95,144-191" and topo.numa_affinity["GPU4"] == "1"


def test_topology_of_a_pcie_node_has_no_nvlink():
    topo = facts.parse_topology(fixture("nvidia_smi/topo_rtx5090x8_pcie_2nic.txt"))
    assert not topo.all_gpus_nvlinked
    assert topo.link("GPU0", "GPU4") == "SYS" and topo.link("GPU1", "GPU2") == "NODE"
    assert topo.nics_near("GPU0") == ()


def test_topology_of_two_nics_behind_gpu0():
    topo = facts.parse_topology(fixture("nvidia_smi/topo_h20x8_2nic.txt"))
    assert topo.nic_names == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert topo.nics_near("GPU0") == ("mlx5_0", "mlx5_1") and topo.nics_near("GPU1") == ()


def test_topology_tab_separated_with_empty_cells():
    topo = facts.parse_topology(fixture("nvidia_smi/topo_h200x2_vm_ansi.txt"))
    assert topo.gpus == ("GPU0", "GPU1") and topo.link("GPU1", "GPU0") == "NV18" and topo.all_gpus_nvlinked
    assert topo.cpu_affinity == {"GPU0": "0-31", "GPU1": "0-31"} and topo.numa_affinity["GPU1"] == "0"


def test_topology_without_nics_and_with_ansi_underlined_header():
    two = facts.parse_topology(fixture("nvidia_smi/topo_h100x2_nvlink.txt"))
    assert two.gpus == ("GPU0", "GPU1") and two.nics == () and two.all_gpus_nvlinked
    one = facts.parse_topology(fixture("nvidia_smi/topo_h100x1_vm_ansi.txt"))
    assert one.gpus == ("GPU0",) and one.cpu_affinity == {"GPU0": "0-15"} and not one.all_gpus_nvlinked


def test_query_reports_fabric_completed_on_nvswitch_gpu():
    query = facts.parse_smi_query(fixture("nvidia_smi/q_h200x1_fabric_completed_trimmed.txt"))
    assert (query.driver_version, query.cuda_version) == ("550.90.12", "12.4")
    assert query.fabric == (facts.FabricState("00000000:03:00.0", "NVIDIA H200", "Completed", "Success"),)
    assert query.fabric_applicable and query.fabric_not_ready == ()


def test_query_of_two_nvlinked_h200s_with_fabric_manager_running():
    query = facts.parse_smi_query(fixture("nvidia_smi/q_h200x2_vm_fabric_completed.txt"))
    assert [(f.bus_id, f.product, f.state, f.status) for f in query.fabric] == [
        ("00000000:00:06.0", "NVIDIA H200", "Completed", "Success"),
        ("00000000:00:07.0", "NVIDIA H200", "Completed", "Success")]
    assert query.fabric_applicable and query.fabric_not_ready == ()


def test_query_reports_fabric_in_progress_from_a_grep_excerpt():
    query = facts.parse_smi_query(fixture("nvidia_smi/q_fabric_in_progress_grep.txt"))
    assert [entry.state for entry in query.fabric] == ["In Progress"] * 3
    assert len(query.fabric_not_ready) == 3


def test_query_of_a_passthrough_gpu_has_no_fabric():
    query = facts.parse_smi_query(fixture("nvidia_smi/q_h100x1_vm.txt"))
    assert query.driver_version == "580.159.04"
    assert query.fabric[0].product == "NVIDIA H100 80GB HBM3" and query.fabric[0].state == "N/A"
    assert not query.fabric_applicable


# --------------------------------------------------------------------------- ibstat


def test_ibstat_eight_infiniband_rails_and_a_roce_bond():
    status = facts.parse_ibstat(fixture("ibstat/h100_8ib_1roce_bond_all_active.txt"))
    assert len(status.ports) == 9 and status.hcas[-1] == "mlx5_bond_0"
    assert status.nccl_ib_hca == "mlx5_0:1,mlx5_1:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1"
    assert status.link_layer == "InfiniBand"
    bond = status.ports[-1]
    assert bond.is_roce and bond.rate == 200 and bond.active


def test_ibstat_roce_node_skips_down_polling_and_slower_ports():
    status = facts.parse_ibstat(fixture("ibstat/h100_roce_some_down_polling.txt"))
    assert status.nccl_ib_hca == "mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_6:1,mlx5_9:1,mlx5_10:1"
    assert status.link_layer == "Ethernet"
    assert {(p.name, p.state, p.physical_state) for p in status.inactive_ports} == {
        ("mlx5_11:1", "Down", "Polling"), ("mlx5_5:1", "Down", "Disabled")}


def test_ibstat_mixed_node_prefers_infiniband_over_down_ethernet():
    status = facts.parse_ibstat(fixture("ibstat/h100_8ib_ethernet_ports_down.txt"))
    assert status.nccl_ib_hca == "mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1"
    assert [p.hca for p in status.inactive_ports] == ["mlx5_2", "mlx5_7", "mlx5_8"]


def test_ibstat_partial_output_before_ibpanic_keeps_ports_and_the_warning():
    status = facts.parse_ibstat(fixture("ibstat/a100_8ib_partial_ibpanic.txt"))
    assert len(status.active_ports) == 8 and status.error is None
    assert status.warnings == ("ibpanic: [1400444] main: stat of IB device 'mlx5_8' failed: No such file or directory",)


def test_ibstat_without_indentation_and_an_initializing_port():
    (port,) = facts.parse_ibstat(fixture("ibstat/initializing_flattened_azure.txt")).ports
    assert (port.name, port.state, port.physical_state, port.rate) == ("mlx5_ib0:1", "Initializing", "LinkUp", 200)
    assert not port.active


@pytest.mark.parametrize("name, reason", [
    ("ibstat/no_devices_empty.txt", "no InfiniBand/RoCE devices"),
    ("ibstat/ibpanic_only_azure_an0.txt", "stat of IB device 'mlx5_an0' failed"),
    ("ibstat/not_found_dash.txt", "ibstat is not installed"),
])
def test_ibstat_without_devices_says_why(name, reason):
    status = facts.parse_ibstat(fixture(name))
    assert not status.has_devices and status.nccl_ib_hca == ""
    assert reason in status.error


# --------------------------------------------------------------------------- ip


@pytest.mark.parametrize("name, expected", [
    ("ip/route_get_json_direct.json", facts.RouteInfo(dst="10.10.0.1", dev="ens5f0", src="10.10.0.2")),
    ("ip/route_get_text_direct.txt", facts.RouteInfo(dst="10.10.0.1", dev="ens5f0", src="10.10.0.2")),
    ("ip/route_get_json_via.json", facts.RouteInfo(dst="8.8.8.8", dev="ens5f0", src="10.10.0.2", via="10.10.0.254")),
    ("ip/route_get_text_via.txt", facts.RouteInfo(dst="8.8.8.8", dev="ens5f0", src="10.10.0.2", via="10.10.0.254")),
    ("ip/route_get_json_local.json", facts.RouteInfo(dst="10.10.0.2", dev="lo", src="10.10.0.2", local=True)),
    ("ip/route_get_text_local.txt", facts.RouteInfo(dst="10.10.0.2", dev="lo", src="10.10.0.2", local=True)),
    ("ip/route_get_json_docker0.json", facts.RouteInfo(dst="172.17.0.5", dev="docker0", src="172.17.0.1")),
    ("ip/route_get_text_docker0.txt", facts.RouteInfo(dst="172.17.0.5", dev="docker0", src="172.17.0.1")),
    ("ip/route_get_json_dev_vm.json", facts.RouteInfo(dst="192.0.2.1", dev="eth0", src="192.0.2.2")),
    ("ip/route_get_json_unreachable.txt", facts.RouteInfo(error="Network is unreachable")),
    ("ip/route_get_text_unreachable.txt", facts.RouteInfo(error="Network is unreachable")),
    ("ip/not_found_dash.txt", facts.RouteInfo(error="ip (iproute2) is not installed")),
])
def test_route_get_json_and_text(name, expected):
    assert facts.parse_route_get(fixture(name)) == expected


@pytest.mark.parametrize("name", ["ip/addr_json_docker_bridges.json", "ip/addr_oneline_docker_bridges.txt",
                                  "ip/addr_plain_docker_bridges.txt"])
def test_ip_addr_lists_interfaces_and_flags_docker_and_virtual_ones(name):
    interfaces = {iface.name: iface for iface in facts.parse_ip_addr(fixture(name))}
    assert interfaces["ens5f0"].ipv4 == ("10.10.0.2",) and not interfaces["ens5f0"].virtual
    assert interfaces["ibp26s0"].ipv4 == ("192.168.80.2",) and not interfaces["ibp26s0"].virtual
    virtual = {name for name, iface in interfaces.items() if iface.virtual}
    assert virtual == {"lo", "docker0", "br-4f2a9c1e7b3d", "veth1a2b3c4", "virbr0", "cni0"}
    assert facts.interface_with_address(list(interfaces.values()), "10.10.0.2").name == "ens5f0"


@pytest.mark.parametrize("name", ["flannel.1", "cali1234abcd", "docker0", "lo", "veth9f@if3", "tunl0"])
def test_cluster_overlay_interfaces_are_virtual(name):
    assert facts.is_virtual_interface(name)


@pytest.mark.parametrize("name", ["eth0", "ens5f0", "enp27s0f0np0", "ibp26s0", "bond0"])
def test_physical_interfaces_are_not_virtual(name):
    assert not facts.is_virtual_interface(name)


# --------------------------------------------------------------------------- ss


@pytest.mark.parametrize("name", ["ss/ltnp_python_listeners.txt", "ss/ltnpH_python_listeners.txt"])
def test_ss_names_the_holder_of_a_port(name):
    listeners = facts.parse_ss(fixture(name))
    assert [(l.local_address, l.port) for l in listeners] == [("127.0.0.1", 6666), ("0.0.0.0", 29500), ("*", 29400)]
    holder = facts.holder_of(listeners, 29500)
    assert (holder.pid, holder.process) == (10220, "python3")
    assert facts.holder_of(listeners, 29501) is None
    assert facts.free_port_near(listeners, 29499) == 29501


@pytest.mark.parametrize("name, port", [("ss/ltn_without_p.txt", 29500), ("ss/ltnp_owner_not_visible.txt", 2024)])
def test_ss_without_process_column_still_finds_the_port(name, port):
    holder = facts.holder_of(facts.parse_ss(fixture(name)), port)
    assert holder.pid is None and "cannot see" in holder.describe()


# --------------------------------------------------------------------------- docker


def test_docker_info_of_a_running_daemon_with_the_nvidia_runtime():
    info = facts.parse_docker_info(fixture("docker/info_running_nvidia_runtime.json"))
    assert info.reachable and info.server_version == "20.10.24+dfsg1"
    assert info.has_nvidia_runtime and info.default_runtime == "runc" and info.cgroup_driver == "cgroupfs"


def test_docker_info_without_the_nvidia_runtime():
    info = facts.parse_docker_info(fixture("docker/info_running_no_nvidia.json"))
    assert info.reachable and not info.has_nvidia_runtime
    assert info.runtimes == ("io.containerd.runc.v2", "io.containerd.runtime.v1.linux", "runc")


def test_docker_info_accepts_the_sdk_dict():
    data = json.loads(fixture("docker/info_running_nvidia_runtime.json"))
    assert facts.parse_docker_info(data) == facts.parse_docker_info(fixture("docker/info_running_nvidia_runtime.json"))


def test_docker_info_human_layout_and_its_grep():
    text = facts.parse_docker_info(fixture("docker/info_text_nvidia_runtime.txt"))
    assert text.has_nvidia_runtime and text.server_version == "20.10.24+dfsg1" and text.cgroup_driver == "cgroupfs"
    grepped = facts.parse_docker_info(fixture("docker/info_text_grep_runtime_no_nvidia.txt"))
    assert grepped.runtimes == ("io.containerd.runc.v2", "runc") and not grepped.has_nvidia_runtime


@pytest.mark.parametrize("name, reason", [
    ("docker/info_daemon_down.txt", "Cannot connect to the Docker daemon"),
    ("docker/info_not_found_dash.txt", "docker is not installed"),
])
def test_docker_info_without_a_daemon_says_why(name, reason):
    info = facts.parse_docker_info(fixture(name))
    assert not info.reachable and reason in info.error


def test_docker_inspect_of_the_running_job_container():
    state = facts.parse_docker_inspect(fixture("docker/inspect_running_net_host_shm16g.json"))
    assert (state.name, state.image, state.running, state.network_mode) == (
        "wan22", "registry.local/clusterctl/tiny:1", True, "host")
    assert state.shm_size_bytes == 16 << 30 and state.gpu_request is None


def test_docker_inspect_reads_the_gpu_request_and_default_shm():
    state = facts.parse_docker_inspect(fixture("docker/inspect_created_gpus_all.json"))
    assert state.gpu_request == "all" and state.status == "created" and state.shm_size_bytes == 64 << 20


def test_docker_inspect_of_a_missing_container():
    state = facts.parse_docker_inspect(fixture("docker/inspect_missing.txt"))
    assert state.status == "missing" and "No such container: nope" in state.error


# --------------------------------------------------------------------------- df, meminfo, clock, hostname


@pytest.mark.parametrize("name, size, avail, mount", [
    ("host/df_root.txt", 270553174016, 84563275776, "/"),
    ("host/df_P_tmp.txt", 270553174016, 84563271680, "/"),
    ("host/df_shm_h100_vm.txt", 128 << 30, 128 << 30, "/dev/shm"),
    ("host/df_shm_docker_default_64m.txt", 64 << 20, 64 << 20, "/dev/shm"),
    ("host/df_shm_docker_16g.txt", 16 << 30, 16 << 30, "/dev/shm"),
])
def test_df_in_bytes(name, size, avail, mount):
    usage = facts.parse_df(fixture(name))
    assert (usage.size_bytes, usage.avail_bytes, usage.mount) == (size, avail, mount)


def test_df_without_a_data_row_is_none():
    assert facts.parse_df("df: /nope: No such file or directory\n") is None


@pytest.mark.parametrize("name, total, available", [
    ("host/meminfo_dev_vm.txt", 24684092 * 1024, 24136340 * 1024),
    ("host/meminfo_h100_vm.txt", 131981020 * 1024, 131463736 * 1024),
])
def test_meminfo_total_and_available(name, total, available):
    assert facts.parse_meminfo(fixture(name)) == facts.MemInfo(total_bytes=total, available_bytes=available)


def test_clock_readings_and_offset():
    assert facts.parse_clock(fixture("host/date_h100_vm.txt")) == pytest.approx(1795289797.225321761)
    assert facts.parse_clock(fixture("host/date_dev_vm.txt")) == pytest.approx(1795289873.256450)
    assert facts.clock_offset(100.5, 99.0, 101.0) == pytest.approx(0.5)


@pytest.mark.parametrize("name, hostname, addresses, loopback", [
    ("host/hostname_loopback_127_0_1_1.txt", "gpu-node-01", ("127.0.1.1",), True),
    ("host/hostname_h100_vm_loopback.txt", "vm", ("127.0.0.1",), True),
    ("host/hostname_resolvable.txt", "gpu-node-01", ("10.10.0.2",), False),
    ("host/hostname_unresolvable.txt", "gpu-node-01", (), False),
])
def test_hostname_resolution(name, hostname, addresses, loopback):
    resolution = facts.parse_hostname_resolution(fixture(name))
    assert (resolution.hostname, resolution.addresses, resolution.loopback_only) == (hostname, addresses, loopback)
    assert resolution.resolvable == bool(addresses)


# --------------------------------------------------------------------------- versions


def test_versions_of_a_cuda_torch():
    versions = facts.parse_versions(fixture("versions/h100_torch_cu130.json"))
    assert versions == facts.Versions(python="3.12.3", torch="2.11.0+cu130", cuda="13.0", nccl="2.28.9",
                                      cuda_available=True, gpu_count=1)


def test_versions_see_both_gpus_of_the_h200_pair():
    versions = facts.parse_versions(fixture("versions/h200x2_torch_cu130.json"))
    assert versions.gpu_count == 2 and versions.key == facts.parse_versions(fixture("versions/h100_torch_cu130.json")).key


def test_versions_of_a_cpu_torch_have_no_cuda_or_nccl():
    versions = facts.parse_versions(fixture("versions/dev_vm_torch_cpu.json"))
    assert (versions.torch, versions.cuda, versions.nccl, versions.cuda_available) == ("2.13.0+cpu", None, None, False)


def test_versions_without_torch_keep_python_and_the_reason():
    versions = facts.parse_versions(fixture("versions/h100_system_python_no_torch.json"))
    assert versions.python == "3.12.3" and versions.torch is None
    assert versions.error == "ModuleNotFoundError: No module named 'torch'"


def test_versions_from_a_bare_traceback_or_a_missing_python():
    traceback = 'Traceback (most recent call last):\n  File "<string>", line 1\nModuleNotFoundError: No module named \'torch\'\n'
    assert facts.parse_versions(traceback).error == "ModuleNotFoundError: No module named 'torch'"
    assert "not installed" in facts.parse_versions("bash: line 1: python3: command not found\n").error


def test_versions_read_without_importing_torch_match_what_torch_reports_on_a_gpu_machine():
    # Both captured on one H200 machine: the snippet's reading, and torch imported (NCCL from the runtime).
    read = facts.parse_versions(fixture("versions/h200_read_not_imported.json"))
    imported = json.loads(fixture("versions/h200_torch_imported.json"))
    assert (read.torch, read.cuda, read.nccl) == (imported["torch"], imported["cuda"], imported["nccl"]) \
        == ("2.11.0+cu130", "13.0", "2.28.9")
    assert read.key == facts.parse_versions(fixture("versions/h100_torch_cu130.json")).key


@pytest.mark.parametrize("raw, version", [(21803, "2.18.3"), ("2.21.5", "2.21.5"), (2708, "2.7.8")])
def test_nccl_version_spellings(raw, version):
    assert facts.parse_versions(json.dumps({"python": "3.10.12", "torch": "1.13.1", "nccl": raw})).nccl == version


# --------------------------------------------------------------------------- firewall


def test_iptables_drop_multiport_range_source_and_udp_rules():
    text = fixture("firewall/iptables_save_port_rules.txt")
    assert facts.rules_blocking(text, 29500, direction="in") == ["-A INPUT -p tcp -m tcp --dport 29500 -j DROP"]
    assert facts.rules_blocking(text, 29505, src="10.20.3.4", direction="in") == [
        "-A INPUT -s 10.20.0.0/16 -p tcp -m multiport --dports 29400,29500:29510 -j REJECT --reject-with tcp-reset"]
    assert facts.rules_blocking(text, 29505, src="10.10.0.7", direction="in") == []
    assert facts.rules_blocking(text, 29500, proto="udp", direction="in") == ["-A INPUT -p udp -m udp --dport 29500 -j DROP"]
    assert facts.rules_blocking(text, 22, direction="in") == []


def test_iptables_output_rule_blocks_the_worker_side():
    text = fixture("firewall/iptables_save_port_rules.txt")
    assert facts.rules_blocking(text, 29501, dst="10.10.0.1", direction="out") == [
        "-A OUTPUT -d 10.10.0.1/32 -p tcp -m tcp --dport 29501 -j DROP"]
    assert facts.rules_blocking(text, 29501, dst="10.10.0.9", direction="out") == []


def test_iptables_policy_drop_blocks_ports_not_accepted():
    text = fixture("firewall/iptables_save_policy_drop.txt")
    assert facts.rules_blocking(text, 29500, src="10.10.0.7", direction="in") == [":INPUT DROP [0:0]"]
    assert facts.rules_blocking(text, 29405, src="10.10.0.7", direction="in") == []
    assert facts.rules_blocking(text, 29405, src="10.99.0.7", direction="in") == [":INPUT DROP [0:0]"]


def test_iptables_catch_all_reject_after_source_accepts():
    text = fixture("firewall/iptables_rules_v4_catch_all_reject.txt")
    assert facts.rules_blocking(text, 29500, src="10.1.0.20", direction="in") == []
    assert facts.rules_blocking(text, 29500, src="192.168.7.7", direction="in") == ["-A INPUT -j REJECT"]
    assert facts.rules_blocking(text, 29500, direction="in") == ["-A INPUT -j REJECT"]  # unknown peer: not trusted
    assert facts.rules_blocking(text, 443, direction="in") == []


def test_iptables_rules_written_by_ufw_are_followed_through_its_chains():
    text = fixture("firewall/iptables_save_ufw_managed.txt")
    assert facts.rules_blocking(text, 29500, direction="in") == ["-A ufw-user-input -p tcp -m tcp --dport 29500 -j DROP"]
    assert facts.rules_blocking(text, 29600, src="10.10.0.9", direction="in") == []
    assert facts.rules_blocking(text, 29600, src="10.11.0.9", direction="in") == [":INPUT DROP [0:0]"]
    assert facts.rules_blocking(text, 22, direction="in") == []


def test_nft_port_set_range_source_and_output_rules():
    text = fixture("firewall/nft_ruleset_port_rules.txt")
    assert facts.rules_blocking(text, 29500, direction="in") == ["tcp dport 29500 drop"]
    assert facts.rules_blocking(text, 29507, src="10.20.0.1", direction="in") == [
        "ip saddr 10.20.0.0/16 tcp dport { 29400, 29500-29510 } reject with tcp reset"]
    assert facts.rules_blocking(text, 29507, src="10.30.0.1", direction="in") == []
    assert facts.rules_blocking(text, 29501, dst="10.10.0.1", direction="out") == [
        "ip daddr 10.10.0.1 tcp dport 29501 reject with icmp port-unreachable"]


def test_nft_policy_drop_names_the_chain():
    text = fixture("firewall/nft_ruleset_policy_drop.txt")
    assert facts.rules_blocking(text, 29500, direction="in") == [
        "table inet filter chain input: type filter hook input priority filter; policy drop;"]
    assert facts.rules_blocking(text, 29400, direction="in") == []


@pytest.mark.parametrize("name, line", [
    ("firewall/ufw_status.txt", "29500/tcp                  DENY        Anywhere"),
    ("firewall/ufw_status_verbose.txt", "29500/tcp                  DENY IN     Anywhere"),
    ("firewall/ufw_status_numbered.txt", "[ 2] 29500/tcp                  DENY IN     Anywhere"),
])
def test_ufw_deny_rule_for_the_port(name, line):
    text = fixture(name)
    assert facts.rules_blocking(text, 29500, direction="in") == [line]
    assert facts.rules_blocking(text, 29405, src="10.20.1.1", direction="in")[0].split()[-1] == "10.20.0.0/16"


def test_ufw_default_deny_when_no_rule_allows_the_port():
    verbose = fixture("firewall/ufw_status_verbose.txt")
    assert facts.rules_blocking(verbose, 29700, direction="in") == [
        "Default: deny (incoming), allow (outgoing), disabled (routed)"]
    assert facts.rules_blocking(verbose, 29600, src="10.10.0.3", direction="in") == []
    flattened = fixture("firewall/ufw_status_verbose_flattened_linuxhint.txt")
    assert facts.rules_blocking(flattened, 29500, direction="in") == [
        "Default: deny (incoming), allow (outgoing), deny (routed)"]
    assert facts.rules_blocking(flattened, 22, direction="in") == []


def test_inactive_ufw_and_unknown_text_block_nothing():
    assert facts.rules_blocking(fixture("firewall/ufw_status_inactive.txt"), 29500) == []
    assert facts.rules_blocking("iptables-save: Permission denied (you must be root)\n", 29500) == []


def test_firewall_combines_the_three_dumps():
    firewall = facts.Firewall(iptables=fixture("firewall/iptables_save_port_rules.txt"),
                              nft=fixture("firewall/nft_ruleset_port_rules.txt"),
                              ufw=fixture("firewall/ufw_status_verbose.txt"))
    assert firewall.rules_blocking(29500, src="10.10.0.7", direction="in") == [
        "-A INPUT -p tcp -m tcp --dport 29500 -j DROP", "tcp dport 29500 drop",
        "29500/tcp                  DENY IN     Anywhere"]
