"""Issue 17: preflight judged on outputs of machines we do not have (tests/fixtures/tools/, sources in
SOURCES.md): IB all down, ibpanic, zh_CN df and shell, ip without -j, ss without -H, the nvidia-smi
610+ header, an 8-GPU NVSwitch topology and fabric, the GPU runtime dockerd really uses.

Where a rule needs a state no public capture shows (a GPU that lost its NVLinks), the test builds
the fact value itself and says so; it never writes a tool's output by hand."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from clusterctl.errors import TopologyError
from clusterctl.plan.topology import NodeFacts, plan
from clusterctl.models import CheckSettings, CheckStatus, ContainerSpec, Host, Inventory, JobSpec
from clusterctl.preflight import facts, verdicts

PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TOOLS = FIXTURES / "tools"
SETTINGS = CheckSettings()


def fixture(name: str) -> str:
    return (TOOLS / name).read_text()


# --------------------------------------------------------------------------- nvidia-smi


def test_the_driver_610_table_header_gives_the_driver_and_cuda_versions():
    table = facts.parse_smi_table(fixture("nvidia_smi/table_b200x2_610_kmd_trimmed.txt"))
    assert (table.driver_version, table.cuda_version) == ("610.43.02", "13.3")
    assert [(g.index, g.name, g.memory_total_mib) for g in table.gpus] == [(0, "NVIDIA B200", 183359),
                                                                           (1, "NVIDIA B200", 183359)]
    assert table.unreadable is None


def test_a_compute_apps_csv_led_by_gpu_uuid_gives_no_pid_and_says_it_could_not_read_one():
    # Read by position, "GPU-777ead31-..." used to become pid -777: a suggested `kill -777` signals a process group.
    text = fixture("nvidia_smi/compute_apps_uuid_first_no_pid.csv")
    assert facts.parse_compute_apps_csv(text) == ()
    assert "--query-compute-apps" in facts.compute_apps_unreadable(text)
    result = verdicts.check_gpu_busy("node-a", facts.parse_compute_apps_csv(text),
                                     unreadable=facts.compute_apps_unreadable(text))
    assert result.status == WARN and "kill" not in result.fix and "GPU-d0180485" in result.detail


def test_compute_apps_read_by_header_name_and_an_idle_node_is_not_unreadable():
    (process,) = facts.parse_compute_apps_csv(fixture("nvidia_smi/compute_apps_h100x1_busy_header.csv"))
    assert process.pid == 411
    assert facts.compute_apps_unreadable(fixture("nvidia_smi/compute_apps_h100x1_idle.csv")) is None
    assert facts.compute_apps_unreadable(fixture("nvidia_smi/compute_apps_h100x1_busy.csv")) is None


def test_gpu_csv_that_is_not_a_gpu_list_is_unreadable_and_the_gpus_check_warns():
    text = fixture("ip/j_option_unknown_iproute2_ss160111.txt")  # any real non-CSV output will do
    gpus = facts.parse_gpu_csv(text)
    assert gpus.gpus == () and "Option" in gpus.unreadable
    inv = Inventory(name="t", hosts=(Host(name="node-a", address="10.0.0.1"),),
                    container=ContainerSpec(image="img"), job=JobSpec())
    assert verdicts.check_gpus("node-a", inv, gpus).status == WARN


def test_eight_h100s_on_nvswitch_pass_nvlink_and_fabric():
    topology = facts.parse_topology(fixture("nvidia_smi/topo_h100x8_8nic.txt"))
    query = facts.parse_smi_query(fixture("nvidia_smi/q_h100x8_sxm_fabric_completed.txt"))
    assert query.driver_version == "565.57.01" and len(query.fabric) == 8 and not query.fabric_not_ready
    nvlink = verdicts.check_nvlink("node-a", topology, query)
    assert nvlink.status == PASS and "every pair on NV18 (NVSwitch fabric)" in nvlink.detail
    assert verdicts.check_fabric("node-a", query).status == PASS
    assert verdicts.check_nvlink("node-a", topology, query, selection=(2, 5)).detail.startswith("2 GPUs")


def test_a_gpu_that_lost_its_nvlinks_on_an_nvswitch_node_fails_naming_it():
    # No public capture shows this state: the real 8x H100 matrix with GPU3's NVLinks replaced by SYS.
    topology = facts.parse_topology(fixture("nvidia_smi/topo_h100x8_8nic.txt"))
    links = {pair: ("SYS" if "GPU3" in pair and pair[0] != pair[1] and all(p.startswith("GPU") for p in pair)
                    else link) for pair, link in topology.links.items()}
    broken = replace(topology, links=links)
    result = verdicts.check_nvlink("node-a", broken, facts.parse_smi_query(
        fixture("nvidia_smi/q_h100x8_sxm_fabric_completed.txt")))
    assert result.status == FAIL and verdicts.cause_of(result) == "fabricmanager"
    assert "GPU3 reaches GPU0 over SYS" in result.detail and "nvidia-smi nvlink -s" in result.fix
    assert verdicts.check_nvlink("node-a", broken, selection=(0, 1, 2)).status == PASS  # GPU3 not used


def test_an_nvswitch_fabric_without_any_nvlink_fails_and_pcie_boards_pass():
    pcie = facts.parse_topology(fixture("nvidia_smi/topo_rtx5090x8_pcie_2nic.txt"))
    assert verdicts.check_nvlink("node-a", pcie).status == PASS
    fabric = facts.parse_smi_query(fixture("nvidia_smi/q_h200x1_fabric_completed_trimmed.txt"))
    assert verdicts.check_nvlink("node-a", pcie, fabric).status == FAIL
    assert verdicts.check_nvlink("node-a", facts.parse_topology(fixture("nvidia_smi/topo_h100x1_vm_ansi.txt"))) \
        .status == PASS


def test_nvidia_smi_printing_no_matrix_makes_the_nvlink_check_warn():
    text = fixture("ss/H_invalid_option_rhel6_trimmed.txt")  # a real output that is not a matrix
    result = verdicts.check_nvlink("node-a", facts.parse_topology(text))
    assert result.status == WARN and "nvidia-smi topo -m" in result.detail
    ib = facts.parse_ibstat(fixture("ibstat/h100_8ib_1roce_bond_all_active.txt"))
    assert verdicts.check_gpu_nics("node-a", facts.parse_topology(text), ib).status == WARN


def test_the_nic_nearest_each_gpu_and_a_gpu_whose_nearest_nic_is_down():
    topology = facts.parse_topology(fixture("nvidia_smi/topo_h100x8_8nic.txt"))
    healthy = verdicts.check_gpu_nics("node-a", topology, facts.parse_ibstat(
        fixture("ibstat/h100_8ib_1roce_bond_all_active.txt")))
    assert healthy.status == PASS and "GPU0: mlx5_0 (PIX)" in healthy.detail and "GPU7: mlx5_7 (PIX)" in healthy.detail
    # Down Ethernet ports beside InfiniBand rails are not rails: no warning for them.
    beside = verdicts.check_gpu_nics("node-a", topology, facts.parse_ibstat(
        fixture("ibstat/h100_8ib_ethernet_ports_down.txt")))
    assert beside.status == PASS
    # Captures of two H100 machines put together: in this RoCE node's ibstat mlx5_5 is down, mlx5_1 slower.
    down = verdicts.check_gpu_nics("node-a", topology, facts.parse_ibstat(
        fixture("ibstat/h100_roce_some_down_polling.txt")))
    assert down.status == WARN and verdicts.cause_of(down) == "ib_config"
    assert "GPU5's nearest NIC mlx5_5 (PIX) is down (Down/Disabled); it would use mlx5_4 (NODE)" in down.detail
    assert "GPU1's nearest NIC mlx5_1 (PIX) runs at 100 Gb/s, slower than the 400 Gb/s rails" in down.detail


@pytest.mark.parametrize("name, state, cause_words", [
    ("ibstat/single_hca_down_linkup_sriov_pod.txt", "Down/LinkUp", "subnet manager"),
    ("ibstat/one_hca_down_polling_redacted.txt", "Down/Polling", "cable"),
    ("ibstat/one_hca_down_disabled_truncated.txt", "Down/Disabled", "disabled"),
    ("ibstat/initializing_flattened_azure.txt", "Initializing/LinkUp", "subnet manager"),
])
def test_hcas_with_every_port_down_fail_ib_config_on_every_node_naming_ports_and_causes(name, state, cause_words):
    status = facts.parse_ibstat(fixture(name))
    results = verdicts.check_ib({"a": status, "b": status})  # all nodes alike: no healthy node beside them
    assert [r.status for r in results] == [FAIL, FAIL]
    assert verdicts.cause_of(results[0]) == "ib_config" and state in results[0].detail
    assert cause_words in results[0].fix and "checks.ib: off" in results[0].fix
    assert verdicts.check_ib({"a": status}, mode="off")[0].status == PASS


def test_nccl_ib_disable_is_set_only_when_the_user_chose_checks_ib_off():
    hosts = (Host(name="a", address="10.0.0.1"), Host(name="b", address="10.0.0.2"))
    node = NodeFacts(gpu_ids=(0,), nic="eth0", address="10.0.0.1", ib_hcas=("mlx5_0:1",))
    auto = plan(Inventory(name="t", hosts=hosts, job=JobSpec()), {"a": node, "b": replace(node, address="10.0.0.2")})
    env = dict(auto.nodes[0].env)
    assert env["NCCL_IB_HCA"] == "mlx5_0:1" and "NCCL_IB_DISABLE" not in env
    off = Inventory(name="t", hosts=hosts, job=JobSpec(), checks=CheckSettings(ib="off"))
    env = dict(plan(off, {"a": node, "b": replace(node, address="10.0.0.2")}).nodes[0].env)
    assert env["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in env


# --------------------------------------------------------------------------- ip, ss


def test_ip_without_json_is_not_read_as_a_route(tmp_path):
    route = facts.parse_route_get(fixture("ip/j_option_unknown_iproute2_ss160111.txt"))
    assert route.dev is None and route.unreadable and "-j" in route.unreadable
    (result,) = verdicts.check_nic({"node-b": route}, master="node-a")
    assert result.status == WARN and "None" not in result.detail and "hosts[node-b].nic" in result.fix
    assert facts.parse_ip_addr(fixture("ip/j_option_unknown_iproute2_ss160111.txt")) == ()


def test_ss_without_dash_h_cannot_say_a_port_is_free(tmp_path):
    text = fixture("ss/H_invalid_option_rhel6_trimmed.txt")
    assert facts.parse_ss(text) == () and "invalid option" in facts.ss_unreadable(text)
    result = verdicts.check_rdzv_port_free("node-a", 29500, facts.parse_ss(text), unreadable=facts.ss_unreadable(text))
    assert result.status == WARN and "ss" in result.detail and "29500" in result.fix


# --------------------------------------------------------------------------- df, locale, hostname


def test_a_translated_df_header_names_the_unit_and_is_not_read_as_data():
    usage = facts.parse_df(fixture("host/df_zh_CN_1K_blocks.txt"))
    assert (usage.filesystem, usage.size_bytes, usage.mount) == ("/dev/sda2", 146294492 * 1024, "/")
    assert facts.parse_df(fixture("host/df_zh_CN_human.txt")) is None  # no block column: sizes are not bytes
    assert "文件系统" in facts.df_unreadable(fixture("host/df_zh_CN_human.txt"))


def test_busybox_df_in_1024_blocks_and_its_refusal_of_an_option():
    usage = facts.parse_df(fixture("host/df_P_busybox_1024_blocks.txt"))
    assert (usage.filesystem, usage.avail_bytes) == ("/dev/root", 140172 * 1024)
    refused = fixture("host/df_busybox_unrecognized_option.txt")
    assert facts.parse_df(refused) is None and "refused" in facts.df_unreadable(refused)
    assert facts.unknown_option(refused)


def test_an_unreadable_df_warns_naming_the_command_and_what_it_printed():
    refused = fixture("host/df_busybox_unrecognized_option.txt")
    result = verdicts.check_disk("node-a", None, SETTINGS, "/workspace/output", unreadable=facts.df_unreadable(refused))
    assert result.status == WARN and "unrecognized option" in result.detail and "/workspace/output" in result.detail
    shm = verdicts.check_shm("node-a", None, SETTINGS, unreadable=facts.df_unreadable(refused, "df -P -B1 /dev/shm"))
    assert shm.status == WARN and "df -P -B1 /dev/shm" in shm.detail


def test_a_zh_cn_shell_saying_command_not_found_is_understood():
    assert facts.combined  # the probe appends stderr; the message is what a zh_CN bash-as-sh prints
    from clusterctl.preflight.facts._text import command_missing

    assert command_missing(fixture("host/sh_zh_CN_command_not_found.txt"), "__git_ps1")


def test_a_hostname_that_could_not_be_read_warns_and_one_on_loopback_is_fine_on_a_single_node():
    unread = facts.parse_hostname_resolution("sh: 1: uname: not found\n")
    assert unread.unreadable and verdicts.check_hostname("node-a", unread).status == WARN
    loopback = facts.parse_hostname_resolution(fixture("host/hostname_h100_vm_loopback.txt"))
    assert verdicts.check_hostname("node-a", loopback).status == WARN
    alone = verdicts.check_hostname("node-a", loopback, single_node=True)
    assert alone.status == PASS and "talks over loopback" in alone.detail


def test_gpu_ids_are_named_as_ids_not_a_count():
    one = facts.parse_smi_table(fixture("nvidia_smi/table_h200x1_idle.txt"))
    inv = Inventory(name="t", hosts=(Host(name="node-a", address="10.0.0.1", gpus=4),),
                    container=ContainerSpec(image="img"), job=JobSpec())
    assert "shows 1 (GPU ids: 0)" in verdicts.check_gpus("node-a", inv, one).detail
    hosts = (Host(name="a", address="10.0.0.1"), Host(name="b", address="10.0.0.2"))
    with pytest.raises(TopologyError) as err:
        plan(Inventory(name="t", hosts=hosts, job=JobSpec(nproc_per_node=2)),
             {"a": NodeFacts(gpu_ids=(0,), nic="eth0", address="10.0.0.1"),
              "b": NodeFacts(gpu_ids=(0,), nic="eth0", address="10.0.0.2")})
    assert "exposes only 1 GPU(s) (GPU ids: 0)" in str(err.value)


def test_the_gpu_runtime_passes_on_the_hook_or_on_cdi_where_the_engine_uses_it():
    info = facts.parse_docker_info(fixture("docker/info_running_no_nvidia.json"))  # no `nvidia` runtime registered
    hook = facts.GpuHooks(dockerd_running=True, runtime_hook="/usr/bin/nvidia-container-runtime-hook")
    assert verdicts.check_gpu_runtime("node-a", info, hooks=hook).status == PASS
    cdi = facts.GpuHooks(dockerd_running=True, cdi_hook="/usr/bin/nvidia-cdi-hook", cdi_specs=("/var/run/cdi/nvidia.yaml",))
    assert verdicts.check_gpu_runtime("node-a", replace(info, server_version="29.0.1"), hooks=cdi).status == PASS
    older = verdicts.check_gpu_runtime("node-a", info, hooks=cdi)  # 20.10: --gpus does not go through CDI
    assert older.status == WARN and "moby/moby#50228" in older.detail
    asked = verdicts.check_gpu_runtime("node-a", info, hooks=hook, oci_runtime="nvidia")
    assert asked.status == FAIL and "nvidia runtime" in asked.detail


def test_docker_output_that_is_not_understood_warns_and_never_passes_with_a_reason_of_none():
    text = fixture("ss/H_invalid_option_rhel6_trimmed.txt")  # real text that is not docker's
    info = facts.parse_docker_info(text)
    assert info.unreadable and "docker info" in info.unreadable
    for result in (verdicts.check_docker("node-a", info), verdicts.check_gpu_runtime("node-a", info)):
        assert result.status == WARN and "None" not in result.detail
    hooks = facts.parse_gpu_hooks(text)
    assert verdicts.check_gpu_runtime("node-a", facts.parse_docker_info(fixture(
        "docker/info_running_no_nvidia.json")), hooks=hooks).status == WARN


# --------------------------------------------------------------------------- the probe itself


def test_the_probe_batch_and_its_docker_exec_part_run_in_the_c_locale_and_read_sysfs_and_hooks():
    from clusterctl.preflight import probe

    hosts = (Host(name="a", address="10.0.0.1"), Host(name="b", address="10.0.0.2"))
    with_gpus = Inventory(name="t", hosts=hosts, container=ContainerSpec(image="img", name="wan22"), job=JobSpec())
    script = probe.probe_command(with_gpus, hosts[1]).argv[2]
    assert script.startswith("LC_ALL=C; LANG=C; export LC_ALL LANG; ")
    assert script.count("LC_ALL=C; LANG=C; export LC_ALL LANG;") == 2  # the in-container script has its own
    for section in ("ib_sysfs", "ibstat", "topo", "smi_query", "gpu_hooks", "uname -n"):
        assert section in script, section
    no_gpus = replace(with_gpus, container=ContainerSpec(image="img", name="wan22", gpus="none"))
    assert "gpu_hooks" not in probe.probe_command(no_gpus, hosts[1]).argv[2]


def test_hostname_on_loopback_warns_across_nodes_but_not_when_every_rank_is_on_one_node():
    from clusterctl.preflight import probe
    from clusterctl.transport import BATCH_MARK

    stdout = f"{BATCH_MARK}hostname\n{facts.strip_provenance(fixture('host/hostname_loopback_127_0_1_1.txt'))}"
    parsed = probe.parse_probe(stdout)
    one = Inventory(name="t", hosts=(Host(name="a", address="10.0.0.1"),), job=JobSpec())
    two = replace(one, hosts=one.hosts + (Host(name="b", address="10.0.0.2"),))
    alone = {c.check: c for c in probe._per_node(one, {"a": parsed})}["hostname"]
    across = {c.check: c for c in probe._per_node(two, {"a": parsed})}["hostname"]
    assert (alone.status, across.status) == (PASS, WARN)


def test_the_probe_batch_captured_on_a_real_h100_vm_reads_into_the_checks_of_that_machine():
    from clusterctl.preflight import probe

    parsed = probe.parse_probe(fixture("probe/h100x1_vm_host_batch.txt"))
    inventory = Inventory(name="t", hosts=(Host(name="vm", address="127.0.0.1"),),
                          job=JobSpec(outputs="/tmp/clusterctl-capture/outputs"))
    checks = {c.check: c for c in probe._per_node(inventory, {"vm": parsed})}
    assert checks["gpus"].detail == "1 x NVIDIA H100 80GB HBM3 usable (GPU ids: 0)"
    assert checks["fabric"].status == PASS and "N/A" in checks["fabric"].detail
    assert checks["nvlink"].status == PASS and checks["shm"].status == PASS
    assert "does not exist yet" in checks["disk"].detail and parsed.disk.read_at == "/tmp"
    assert parsed.ib.error and not parsed.ib.unreadable  # no HCA, no infiniband-diags: TCP, not unknown
    assert parsed.hooks.unreadable is None and parsed.hooks.dockerd_running is False
    assert all(c.status is not WARN for c in checks.values()), [c for c in checks.values() if c.status is WARN]
