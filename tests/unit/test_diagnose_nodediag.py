"""Node diagnostics parsed for the diagnosis (kernel OOM kills, Xids, ECC, a container's final
state) on real captured outputs (tests/fixtures/diagnose/README.md names each source)."""
from __future__ import annotations

import json
from pathlib import Path

from clusterctl.diagnose import diagnose_path, nodediag

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DIAG = FIXTURES / "diagnose"
SMI_H100 = FIXTURES / "tools" / "nvidia_smi" / "q_h100x1_vm.txt"
SMI_H200 = FIXTURES / "tools" / "real-h200" / "nvidia_smi_q.txt"


def test_the_kernel_oom_killer_lines_name_the_killed_process():
    kills = nodediag.oom_kills((DIAG / "dmesg_memcg_oom.txt").read_text())
    assert [(k.pid, k.process) for k in kills] == [(19417, "python"), (19417, "python")]
    assert "Memory cgroup out of memory" in kills[0].line


def test_xid_lines_give_the_gpu_the_xid_and_the_process():
    found = nodediag.xids((DIAG / "dmesg_xids.txt").read_text())
    assert [(x.pci, x.xid, x.process) for x in found] == [
        ("0000:00:05", 43, "pt_main_thread"), ("0000:00:05", 43, "pt_main_thread"),
        ("0000:00:07", 31, "python3.10"), ("0000:00:08", 94, "<unknown>")]
    assert found[3].message.startswith("Contained: SM")


def test_a_gpu_that_fell_off_the_bus_without_an_xid_counts_as_xid_79():
    found = nodediag.xids((DIAG / "dmesg_fallen_off.txt").read_text())
    assert [(x.pci, x.xid) for x in found] == [("0000:b3:00.0", 79)]


def test_healthy_real_gpus_report_no_ecc_trouble():
    for capture in (SMI_H100, SMI_H200):
        state = nodediag.ecc_state(capture.read_text())
        assert not state.bad and state.describe() == "no ECC errors"


def test_uncorrectable_counters_and_a_remapping_failure_are_reported():
    # derived, not captured: the real H100 capture with two fields edited (no public capture found)
    text = SMI_H100.read_text()
    text = text.replace("            DRAM Uncorrectable                         : 0", "            DRAM Uncorrectable"
                        "                         : 2", 1)
    text = text.replace("Remapping Failure Occurred                     : No", "Remapping Failure Occurred"
                        "                     : Yes")
    state = nodediag.ecc_state(text)
    assert (state.volatile_uncorrectable, state.remap_failure, state.bad) == (2, True, True)
    assert state.describe() == "2 volatile uncorrectable ECC error(s), row remapping failure"


def test_docker_inspect_state_gives_the_exit_code_and_the_oom_flag():
    state = nodediag.container_state((DIAG / "docker_inspect_state_exit137.json").read_text())
    assert (state.status, state.exit_code, state.oom_killed) == ("exited", 137, False)
    assert nodediag.container_state("not json") is None
    assert nodediag.container_state(json.dumps([{"State": "odd"}])) is None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_collected_run_joins_a_sigkilled_rank_with_its_nodes_exit_137_as_a_signal_kill_not_an_oom(tmp_path):
    # docker says OOMKilled=false and nothing else records an OOM kill: a signal kill (issue 39; this
    # test said oom_killed before)
    root = tmp_path / "run"
    _write(root / "gpu3" / "logs" / "gpu3-agent.log",
           "[E ...] failed (exitcode: -9) local_rank: 0 (pid: 11) of binary: /usr/bin/python3\n")
    _write(root / "gpu3" / "diag" / "docker-inspect.json", (DIAG / "docker_inspect_state_exit137.json").read_text())
    findings = diagnose_path(root)
    first = findings[0]
    assert (first.cause, first.host) == ("killed_by_signal", "gpu3")
    assert "exitcode: -9" in first.evidence and "ExitCode=137" in first.evidence
    assert "dmesg" in first.fix and "OOMKilled" in first.fix
    assert first.confidence < 0.89 and "oom_killed" in [f.cause for f in findings]


def test_a_collected_run_names_the_xid_of_the_node_whose_rank_died(tmp_path):
    root = tmp_path / "run"
    _write(root / "node7" / "logs" / "node7-r3.log", "[rank3]: RuntimeError: CUDA error: unspecified launch failure\n")
    _write(root / "node7" / "diag" / "dmesg.txt", (DIAG / "dmesg_xids.txt").read_text())
    findings = diagnose_path(root)
    xid = next(f for f in findings if f.cause == "gpu_xid")
    assert xid.host == "node7" and "Xid (PCI:0000:00:08): 94" in xid.evidence and "Xid 94" in xid.fix


def test_a_collected_run_reports_ecc_errors_of_a_node(tmp_path):
    root = tmp_path / "run"
    smi = SMI_H100.read_text().replace("Remapping Failure Occurred                     : No",
                                       "Remapping Failure Occurred                     : Yes")  # derived
    _write(root / "g1" / "logs" / "g1-r0.log", "RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    _write(root / "g1" / "diag" / "nvidia-smi-q.txt", smi)
    first = diagnose_path(root)[0]
    assert (first.cause, first.host) == ("ecc_error", "g1") and "row remapping failure" in first.evidence
