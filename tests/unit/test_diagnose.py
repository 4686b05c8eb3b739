"""The diagnosis engine: the seeds' failures, cascades, ranking, confidence, collected run directories.
The corpus of real public logs and its accuracy are tests/unit/test_diagnose_corpus.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterctl.diagnose import CAUSES, RULES, diagnose_path, diagnose_text, render_fix

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
FIXTURE_FILES = sorted(FIXTURES.glob("*/*.log"))


# --------------------------------------------------------------------------- fixtures


@pytest.mark.parametrize("log", FIXTURE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_diagnoses_to_its_folder_cause_first(log: Path):
    findings = diagnose_path(log)
    assert findings[0].cause == log.parent.name, [f.to_json() for f in findings]
    assert findings[0].evidence and findings[0].fix


@pytest.mark.parametrize("log", FIXTURE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_is_small_and_sourced(log: Path):
    text = log.read_text()
    assert len(text.encode()) < 4096
    assert text.startswith("# source: ")


def test_every_cause_has_a_rule_and_every_seed_fixture_names_one():
    assert {rule.cause for rule in RULES} == set(CAUSES) - {"unknown"}
    assert {log.parent.name for log in FIXTURE_FILES} <= set(CAUSES)


def test_rule_patterns_compile_weights_are_probabilities_and_fixes_render_without_braces():
    for rule in RULES:
        for signal in rule.signals:
            assert signal.regex.pattern and 0 < signal.weight < 1, (rule.cause, signal.pattern)
        assert rule.summary and rule.fix
        assert "{" not in render_fix(rule.fix, {}).replace("{world_size}", "")


# --------------------------------------------------------------------------- ranking


CASCADE = """\
[2024-05-01 10:00:00,000] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS environment variable for each process to be 1
[rank3]: Traceback (most recent call last):
[rank3]:   File "generate.py", line 210, in <module>
[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 3 has a total capacity of 79.11 GiB
[rank0]:[E501 10:35:12.000000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLGATHER, NumelIn=1, NumelOut=8, Timeout(ms)=1800000) ran for 1800047 milliseconds before timing out.
[rank1]:[E501 10:35:12.100000000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLGATHER, NumelIn=1, NumelOut=8, Timeout(ms)=1800000) ran for 1800051 milliseconds before timing out.
[rank2]:[E501 10:35:12.200000000 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLGATHER, NumelIn=1, NumelOut=8, Timeout(ms)=1800000) ran for 1800055 milliseconds before timing out.
[rank1]: torch.distributed.DistBackendError: NCCL error: remote process exited or there was a network error, Connection reset by peer
[2024-05-01 10:35:20,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) local_rank: 3 (pid: 4242) of binary: /usr/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
generate.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2024-05-01_10:35:20
  host      : node-b
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 4239)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 4239
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-01_10:05:12
  host      : node-b
  rank      : 3 (local_rank: 3)
  exitcode  : 1 (pid: 4242)
  error_file: /tmp/torchelastic_x/none_y/attempt_0/3/error.json
  traceback : Traceback (most recent call last):
============================================================
"""


def test_cascade_puts_the_first_failed_rank_first():
    findings = diagnose_text(CASCADE)
    first = findings[0]
    assert first.cause == "cuda_oom"
    assert first.rank == 3
    assert "CUDA out of memory" in first.evidence
    assert first.confidence > findings[1].confidence
    causes = [f.cause for f in findings]
    assert "nccl_timeout_slow_rank" in causes
    assert causes.index("nccl_timeout_slow_rank") > 0


def test_watchdog_alone_is_a_slow_rank():
    line = CASCADE.splitlines()[4]
    findings = diagnose_text(line)
    assert findings[0].cause == "nccl_timeout_slow_rank"
    assert findings[0].rank == 0
    assert "1800000 ms" in findings[0].fix


def test_earlier_failure_beats_later_one_of_equal_weight():
    text = ("[2024-05-01 10:00:05,000] [rank5]: RuntimeError: CUDA error: invalid device ordinal\n"
            "[2024-05-01 10:00:01,000] [rank1]: general_train.py: error: unrecognized arguments: --foo\n")
    findings = diagnose_text(text)
    assert findings[0].cause == "gpu_ordinal"  # higher priority wins over a slightly earlier generic error
    assert {f.cause for f in findings} == {"gpu_ordinal", "launcher_args"}


def test_duplicate_findings_collapse_to_one_per_cause_and_host_with_lowest_rank():
    text = "\n".join(f"[rank{r}]: RuntimeError: CUDA error: invalid device ordinal" for r in (7, 5, 6))
    findings = diagnose_text(text, host="node-a")
    assert len(findings) == 1
    assert (findings[0].cause, findings[0].host, findings[0].rank) == ("gpu_ordinal", "node-a", 5)


# --------------------------------------------------------------------------- collected run directory


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _collected_run(root: Path) -> Path:
    _write(root / "manifest.json", json.dumps({"run_id": "r1", "world_size": 4, "nproc_per_node": 2}))
    for host, ranks in (("node-a", (0, 1)), ("node-b", (2,))):
        for rank in ranks:
            _write(root / host / "logs" / f"{host}-r{rank}.log",
                   f"[rank{rank}]:[E501 10:35:12.000000000 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught "
                   "collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                   "Timeout(ms)=600000) ran for 600031 milliseconds before timing out.\n")
    _write(root / "node-b" / "logs" / "node-b-r3.log", "step 10/50 loss=0.12\nstep 11/50 loss=0.11\n")
    _write(root / "node-b" / "logs" / "node-b-agent.log", "\n".join([
        "[2024-05-01 10:05:12,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
        "local_rank: 1 (pid: 4242) of binary: /usr/bin/python3",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "Root Cause (first observed failure):", "[0]:",
        "  time      : 2024-05-01_10:05:12", "  host      : node-b", "  rank      : 3 (local_rank: 1)",
        "  exitcode  : -9 (pid: 4242)", "  error_file: <N/A>",
        "  traceback : Signal 9 (SIGKILL) received by PID 4242", "=" * 60, ""]))
    _write(root / "node-a" / "logs" / "node-a-agent.log",
           "[2024-05-01 10:35:30,000] torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n")
    _write(root / "node-b" / "diag" / "dmesg.txt",
           "[812345.123456] Out of memory: Killed process 4242 (python3) total-vm:912345678kB, anon-rss:500123456kB\n")
    _write(root / "node-a" / "diag" / "df-shm.txt",
           "Filesystem 1B-blocks Used Available Use% Mounted on\nshm 17179869184 0 17179869184 0% /dev/shm\n")
    return root


def test_collected_dir_joins_sigkill_with_dmesg_oom(tmp_path: Path):
    findings = diagnose_path(_collected_run(tmp_path / "run"))
    first = findings[0]
    assert (first.cause, first.host, first.rank) == ("oom_killed", "node-b", 3)
    assert "SIGKILL" in first.evidence or "-9" in first.evidence
    assert "Out of memory: Killed process 4242" in first.evidence
    assert "OOM killer" in first.fix and "node-b" in first.fix
    assert all(f.cause != "unknown" for f in findings)


def test_collected_dir_tiny_shm_names_the_size(tmp_path: Path):
    root = tmp_path / "run"
    _write(root / "gpu1" / "logs" / "gpu1-r0.log", "OSError: [Errno 28] No space left on device\n")
    _write(root / "gpu1" / "diag" / "df-shm.txt",
           "Filesystem 1B-blocks Used Available Use% Mounted on\nshm 67108864 67108864 0 100% /dev/shm\n")
    first = diagnose_path(root)[0]
    assert (first.cause, first.host, first.rank) == ("shm_too_small", "gpu1", 0)
    assert "64 MiB" in first.evidence and "64 MiB" in first.fix
    assert "container.shm_size" in first.fix


def test_collected_dir_socket_ifname_missing_on_node(tmp_path: Path):
    root = tmp_path / "run"
    _write(root / "gpu2" / "logs" / "gpu2-r0.log", "step 1\n")
    _write(root / "gpu2" / "diag" / "env.txt", "NCCL_SOCKET_IFNAME=eth0\nHF_TOKEN=***\n")
    _write(root / "gpu2" / "diag" / "ip-addr.txt",
           "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\n2: ens5f0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500\n")
    first = diagnose_path(root)[0]
    assert (first.cause, first.host) == ("nic_mismatch", "gpu2")
    assert "NCCL_SOCKET_IFNAME=eth0" in first.evidence and "ens5f0" in first.evidence


def test_collected_dir_different_nccl_versions(tmp_path: Path):
    root = tmp_path / "run"
    _write(root / "a" / "logs" / "a-r0.log", "NCCL version 2.19.3+cuda12.3\n")
    _write(root / "b" / "logs" / "b-r1.log", "NCCL version 2.18.1+cuda12.1\n")
    first = diagnose_path(root)[0]
    assert first.cause == "version_mismatch"
    assert "2.19.3" in first.evidence and "2.18.1" in first.evidence


def test_gpu_ordinal_fix_quotes_nproc_and_visible_gpus(tmp_path: Path):
    root = tmp_path / "run"
    _write(root / "manifest.json", json.dumps({"nproc_per_node": 5}))
    _write(root / "pod0" / "logs" / "pod0-r3.log", "RuntimeError: CUDA error: invalid device ordinal\n")
    _write(root / "pod0" / "diag" / "nvidia-smi-q.txt", "Driver Version : 535.54.03\nAttached GPUs : 1\n")
    first = diagnose_path(root)[0]
    assert first.fix.startswith("job.nproc_per_node (5) exceeds the 1 GPU this node exposes")
    assert "nproc_per_node: auto or 1" in first.fix


def test_gpu_ordinal_fix_counts_the_gpus_cuda_visible_devices_leaves(tmp_path: Path):
    # nvidia-smi attaches 8; the container's CUDA_VISIBLE_DEVICES leaves the ranks 2
    root = tmp_path / "run"
    _write(root / "manifest.json", json.dumps({"nproc_per_node": 4}))
    _write(root / "n1" / "logs" / "n1-r2.log", "RuntimeError: CUDA error: invalid device ordinal\n")
    _write(root / "n1" / "diag" / "nvidia-smi-q.txt", "Driver Version : 570.86.15\nAttached GPUs : 8\n")
    _write(root / "n1" / "diag" / "env.txt", "PATH=/usr/bin\nCUDA_VISIBLE_DEVICES=0,1\n")
    first = diagnose_path(root)[0]
    assert first.fix.startswith("job.nproc_per_node (4) exceeds the 2 GPUs this node exposes"), first.fix


# --------------------------------------------------------------------------- formats


def test_unknown_quotes_the_suspicious_lines():
    text = ("loading shards 3/4\nTraceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
            "RuntimeError: shard index file is inconsistent\nsaving nothing\n")
    findings = diagnose_text(text, host="h1", rank=2)
    assert len(findings) == 1
    assert findings[0].cause == "unknown"
    assert findings[0].evidence.startswith("RuntimeError: shard index file is inconsistent")
    assert (findings[0].host, findings[0].rank) == ("h1", 2)


def test_an_exception_of_the_jobs_own_kind_is_job_code_error_with_the_same_quote_and_place():
    text = ("loading shards 3/4\nTraceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
            "KeyError: 'model.layers.41.weight'\nsaving nothing\n")
    findings = diagnose_text(text, host="h1", rank=2)
    assert len(findings) == 1
    assert findings[0].cause == "job_code_error"
    assert findings[0].evidence.startswith("KeyError: 'model.layers.41.weight'")
    assert findings[0].fix.startswith("`KeyError` raised in `x`: ")
    assert (findings[0].host, findings[0].rank) == ("h1", 2)


def test_empty_text_is_unknown():
    assert diagnose_text("")[0].cause == "unknown"


def test_source_comment_lines_are_ignored():
    assert diagnose_text("# source: https://example.invalid Address already in use\n")[0].cause == "unknown"


def test_ansi_colours_are_stripped():
    text = "\x1b[1;31m[rank2]: RuntimeError: CUDA error: \x1b[0minvalid device ordinal\x1b[0m\n"
    first = diagnose_text(text)[0]
    assert first.cause == "gpu_ordinal" and first.rank == 2
    assert "\x1b" not in first.evidence


def test_deepspeed_host_and_local_prefixes():
    text = "worker-1: [default0]:[rank4]: RuntimeError: CUDA error: invalid device ordinal\n"
    first = diagnose_text(text)[0]
    assert (first.cause, first.host, first.rank) == ("gpu_ordinal", "worker-1", 4)


def test_kubernetes_timestamps_and_scheduler_events():
    text = ("2024-05-01T10:00:00.123456789Z Warning  FailedScheduling  pod/wan22-master-0  "
            "0/8 nodes are available: 8 Insufficient memory.\n")
    assert diagnose_text(text)[0].cause == "insufficient_resources"


def test_wrapped_lines_are_rejoined():
    text = ("docker: Error response from daemon: could not select device driver \"\" with capab\n"
            "ilities: [[gpu]].\n")
    assert diagnose_text(text)[0].cause == "docker_no_gpu_runtime"


def test_rank_and_host_from_collected_file_name(tmp_path: Path):
    log = tmp_path / "node-7-r12.log"
    log.write_text("main.py: error: unrecognized arguments: --local-rank=0\n")
    first = diagnose_path(log)[0]
    assert (first.cause, first.host, first.rank) == ("launcher_args", "node-7", 12)


def test_findings_serialise_to_the_contract_shape_with_a_confidence():
    payload = diagnose_text("Address already in use")[0].to_json()
    assert set(payload) == {"cause", "host", "rank", "evidence", "fix", "confidence"}
    assert 0 < payload["confidence"] <= 1


def test_render_fix_placeholders():
    assert render_fix("a[ ({x})] b {y|dflt} c", {}) == "a b dflt c"
    assert render_fix("a[ ({x})] b {y|dflt} c", {"x": 1, "y": 2}) == "a (1) b 2 c"
    assert render_fix("keep hosts[].nic and \"{{world_size}}\"", {}) == "keep hosts[].nic and \"{world_size}\""


def test_the_jobs_own_exception_beats_mere_warnings_and_timeouts():
    text = ("[W socket.cpp:601] [c10d] The IPv6 network addresses of (localhost, 51595) cannot be retrieved "
            "(gai error: -2 - Name or service not known).\n"
            "[rank2]: KeyError: 'model.diffusion_model.input_blocks.0.0.weight'\n"
            + CASCADE.splitlines()[4] + "\n")
    findings = diagnose_text(text)
    assert findings[0].cause == "job_code_error"
    assert findings[0].rank == 2 and "KeyError" in findings[0].evidence
    assert {"hostname_unresolvable", "nccl_timeout_slow_rank"} <= {f.cause for f in findings[1:]}


def test_the_jobs_own_exception_takes_rank_from_torchrun_root_cause():
    text = "\n".join(line for line in CASCADE.splitlines() if "OutOfMemoryError" not in line)
    frame = "[rank3]:   File \"generate.py\", line 210, in <module>"
    text = text.replace(frame, frame + "\n[rank3]: ZeroDivisionError: division by zero")
    first = diagnose_text(text)[0]
    assert (first.cause, first.rank) == ("job_code_error", 3)
    assert first.evidence.startswith("ZeroDivisionError")


def test_first_failure_in_time_leads_among_equal_signatures(tmp_path: Path):
    root = tmp_path / "run"
    _write(root / "node-a" / "logs" / "node-a-r0.log",
           "[2024-05-01 10:00:09,000] [rank0]: RuntimeError: CUDA error: invalid device ordinal\n")
    _write(root / "node-b" / "logs" / "node-b-r5.log",
           "[2024-05-01 10:00:01,000] [rank5]: RuntimeError: CUDA error: invalid device ordinal\n")
    findings = diagnose_path(root)
    assert [(f.host, f.rank) for f in findings] == [("node-b", 5), ("node-a", 0)]


def test_collected_dir_different_images_and_fabric_not_ready(tmp_path: Path):
    root = tmp_path / "run"
    for host, image in (("h1", "sha256:aaa"), ("h2", "sha256:bbb")):
        _write(root / host / "logs" / f"{host}-agent.log", "starting\n")
        _write(root / host / "diag" / "docker-inspect.json",
               json.dumps([{"Image": image, "HostConfig": {"ShmSize": 67108864, "IpcMode": "private"}}]))
    _write(root / "h2" / "diag" / "nvidia-smi-q.txt",
           "Driver Version : 550.90.07\n    Fabric\n        State : In Progress\n")
    findings = diagnose_path(root)
    causes = {f.cause: f for f in findings}
    assert "sha256:aaa" in causes["version_mismatch"].evidence and "sha256:bbb" in causes["version_mismatch"].evidence
    assert causes["fabricmanager"].host == "h2" and "550.90.07" in causes["fabricmanager"].fix


def test_clusterctl_rank_prefixes():
    text = "[bjdb-h20-node-082 rank7]: RuntimeError: CUDA error: invalid device ordinal\n"
    first = diagnose_text(text)[0]
    assert (first.host, first.rank) == ("bjdb-h20-node-082", 7)
    first = diagnose_text("[node-1 r3] Address already in use\n")[0]
    assert (first.cause, first.host, first.rank) == ("port_in_use", "node-1", 3)
