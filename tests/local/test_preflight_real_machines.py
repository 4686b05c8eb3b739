"""Issue 17: preflight judged on outputs of machines we do not have (tests/fixtures/tools/, sources in
SOURCES.md): IB all down, ibpanic, zh_CN df and shell, ip without -j, ss without -H, the nvidia-smi
610+ header, an 8-GPU NVSwitch topology and fabric, the GPU runtime dockerd really uses.

Where a rule needs a state no public capture shows (a GPU that lost its NVLinks), the test builds
the fact value itself and says so; it never writes a tool's output by hand."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from clusterctl.models import CheckSettings, CheckStatus
from clusterctl.preflight import facts, verdicts
from clusterctl.preflight.facts.ib import _SYSFS_SCRIPT

from unit.test_preflight_real_machines import FIXTURES, fixture

PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL
H100_SYSFS = FIXTURES / "hardware" / "h100x8_nvlink_8ib" / "sys" / "class" / "infiniband"


def run_sh(script: str, *args: str, path_first: Path = None) -> str:
    """A probe script run for real by this machine's sh (stdout and stderr, as the batch keeps them)."""
    env = dict(os.environ, LC_ALL="C", LANG="C")
    if path_first is not None:
        env["PATH"] = f"{path_first}:{env['PATH']}"
    done = subprocess.run(["sh", "-c", script, "sh", *args], capture_output=True, text=True, env=env, timeout=60)
    return done.stdout + done.stderr


def tool_rejecting(tmp_path: Path, name: str, option: str, capture: str) -> Path:
    """A directory holding `name` that prints a real captured refusal when given `option`, and runs
    the real tool otherwise: an older iproute2/ss on this machine."""
    real = shutil.which(name)
    assert real, f"{name} is needed for this test"
    body = facts.strip_provenance(fixture(capture))
    script = tmp_path / name
    script.write_text(f"#!/bin/sh\nfor a in \"$@\"; do case $a in {option}*) cat >&2 <<'EOF'\n{body}EOF\nexit 255;; "
                      f"esac; done\nexec {real} \"$@\"\n")
    script.chmod(0o755)
    return tmp_path


# --------------------------------------------------------------------------- InfiniBand


def test_sysfs_and_ibstat_of_the_same_kind_of_h100_node_agree():
    sysfs = facts.parse_ib_sysfs(run_sh(_SYSFS_SCRIPT, str(H100_SYSFS)))
    ibstat = facts.parse_ibstat(fixture("ibstat/h100_8ib_1roce_bond_all_active.txt"))
    assert sysfs.source == "sysfs" and len(sysfs.ports) == 9
    assert sysfs.nccl_ib_hca == ibstat.nccl_ib_hca == "mlx5_0:1,mlx5_1:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1," \
                                                       "mlx5_8:1,mlx5_9:1"
    assert [(p.name, p.state, p.physical_state, p.rate, p.link_layer) for p in sysfs.ports][-1] == \
        ("mlx5_bond_0:1", "Active", "LinkUp", 200, "Ethernet")


def test_sysfs_wins_over_an_ibstat_that_panics():
    status = facts.ib_status(run_sh(_SYSFS_SCRIPT, str(H100_SYSFS)), fixture("ibstat/ibpanic_only_azure_an0.txt"))
    assert status.source == "sysfs" and status.unreadable is None and len(status.nccl_ports) == 8
    assert verdicts.check_ib({"a": status})[0].status == PASS


def test_an_ibpanic_without_sysfs_is_unknown_not_no_infiniband():
    status = facts.ib_status(run_sh(_SYSFS_SCRIPT, "/nonexistent/infiniband"), fixture("ibstat/ibpanic_only_azure_an0.txt"))
    assert status.unreadable and not status.has_devices
    (result,) = verdicts.check_ib({"a": status})
    assert result.status == WARN and "mlx5_an0" in result.detail and "no InfiniBand" not in result.detail


def test_no_hca_at_all_passes_as_tcp_and_says_where_it_looked():
    status = facts.ib_status(run_sh(_SYSFS_SCRIPT, "/nonexistent/infiniband"), fixture("ibstat/no_devices_empty.txt"))
    (result,) = verdicts.check_ib({"a": status})
    assert result.status == PASS and "/sys/class/infiniband" in result.detail and "TCP" in result.detail


def test_the_route_probe_falls_back_to_text_where_ip_refuses_json(tmp_path):
    old_ip = tool_rejecting(tmp_path, "ip", "-j", "ip/j_option_unknown_iproute2_ss160111.txt")
    command = facts.route_get_command("127.0.0.1")
    route = facts.parse_route_get(run_sh(command.argv[2], *command.argv[4:], path_first=old_ip))
    assert route.unreadable is None and route.local and route.dev == "lo"
    interfaces = facts.parse_ip_addr(run_sh(facts.IP_ADDR_PROBE.argv[2], path_first=old_ip))
    assert "lo" in {iface.name for iface in interfaces}


def test_the_listener_probe_falls_back_to_ss_with_a_header_where_h_is_unknown(tmp_path):
    old_ss = tool_rejecting(tmp_path, "ss", "-ltnH", "ss/H_invalid_option_rhel6_trimmed.txt")
    text = run_sh(facts.SS_LISTENERS_SCRIPT, "29500", path_first=old_ss)
    assert "invalid option" not in text and facts.ss_unreadable(text) is None
    assert text.splitlines()[0].split()[0] == "State"  # the header this older ss prints, skipped by parse_ss


def test_free_space_of_an_outputs_dir_not_created_yet_is_read_at_its_nearest_parent(tmp_path):
    missing = tmp_path / "gout" / "runs"
    usage = facts.parse_df(run_sh(facts.df_at_argv(str(missing))[2], str(missing)))
    assert usage.read_at == str(tmp_path) and usage.size_bytes > 0
    result = verdicts.check_disk("node-a", usage, CheckSettings(disk_min_bytes=1), str(missing))
    assert result.status == PASS
    assert f"at {tmp_path} (job.outputs {missing} does not exist yet on node-a" in result.detail
    existing = facts.parse_df(run_sh(facts.df_at_argv(str(tmp_path))[2], str(tmp_path)))
    assert "does not exist" not in verdicts.check_disk("node-a", existing, CheckSettings(disk_min_bytes=1),
                                                       str(tmp_path)).detail


def test_every_probe_script_runs_in_the_c_locale():
    wrapped = facts.in_c_locale(facts.IB_SYSFS)
    assert wrapped.argv[2].startswith("LC_ALL=C; LANG=C; export LC_ALL LANG; ")
    assert facts.in_c_locale(facts.IBSTAT).argv == ("env", "LC_ALL=C", "LANG=C", "ibstat")
    done = subprocess.run(list(facts.in_c_locale(facts.HOSTNAME_RESOLUTION).argv), capture_output=True, text=True,
                          env=dict(os.environ, LANG="zh_CN.UTF-8", LC_ALL="zh_CN.UTF-8"), timeout=30)
    assert facts.parse_hostname_resolution(done.stdout).hostname == os.uname().nodename  # read by `uname -n`


# --------------------------------------------------------------------------- the GPU runtime dockerd uses


def test_the_gpu_hook_probe_runs_here_and_without_hook_or_cdi_fails_as_docker_would():
    hooks = facts.parse_gpu_hooks(run_sh(facts.GPU_HOOKS.argv[2]))
    assert hooks.unreadable is None and hooks.runtime_hook is None  # this machine has no NVIDIA toolkit
    info = facts.parse_docker_info(fixture("docker/info_running_nvidia_runtime.json"))
    result = verdicts.check_gpu_runtime("node-a", info, hooks=hooks)
    assert result.status == FAIL and verdicts.cause_of(result) == "docker_no_gpu_runtime"
    assert "could not select device driver" in result.detail and "container.gpus: none" in result.fix


def test_a_sysfs_port_file_that_cannot_be_read_sends_the_probe_to_ibstat(tmp_path):
    tree = tmp_path / "infiniband"
    port = tree / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    for name in ("phys_state", "rate", "link_layer"):
        (port / name).write_bytes((H100_SYSFS / "mlx5_0" / "ports" / "1" / name).read_bytes())
    # no `state` file: cat says so, and that is not a port state
    status = facts.ib_status(run_sh(_SYSFS_SCRIPT, str(tree)), fixture("ibstat/h100_8ib_1roce_bond_all_active.txt"))
    assert status.source == "ibstat" and len(status.nccl_ports) == 8
