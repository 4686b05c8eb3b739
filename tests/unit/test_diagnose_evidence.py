"""The typed evidence layer (clusterctl/diagnose/evidence.py) and its families (families.py).

Lines are the message shapes real logs print (NCCL's `host:pid:tid [dev] file:line NCCL WARN ...`,
the CUDA runtime's documented error strings, torchrun's/mpirun's/DeepSpeed's banners); the
property tests feed remote-looking garbage, truncations and huge lines."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from clusterctl_helpers import examples

from clusterctl.diagnose import diagnose_text
from clusterctl.diagnose import evidence as ev
from clusterctl.diagnose import families
from clusterctl.diagnose.logformat import parse_lines


def records(text: str) -> list:
    lines, _ = parse_lines(text)
    return ev.extract(lines)


def of(kind, text: str) -> list:
    return [r for r in records(text) if isinstance(r, kind)]


def test_every_spelling_of_a_cuda_error_is_one_enum():
    spellings = ["RuntimeError: CUDA error: no kernel image is available for execution on the device",
                 "cuda runtime error (209) : no kernel image is available for execution on the device",
                 "CUDA_ERROR_NO_BINARY_FOR_GPU", "Cuda failure 209 'no kernel image is available'",
                 "host:12:34 [0] NCCL INFO Cuda failure 'no kernel image is available for execution on the device'"]
    for text in spellings:
        assert [e.name for e in of(ev.CudaError, text)] == ["cudaErrorNoKernelImageForDevice"], text


def test_a_cuda_message_without_a_cuda_context_is_not_a_cuda_error():
    assert of(ev.CudaError, "ValueError: invalid argument") == []


def test_nccl_lines_give_level_subsystem_call_and_class():
    (warn,) = of(ev.NcclMessage, "node1:2011:2040 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : "
                                 "Got completion from peer 10.1.1.2<55342> with error 12, opcode 0")
    assert (warn.level, warn.subsystem) == ("WARN", "net_ib")
    (sock,) = of(ev.NcclMessage, "gpu-a:88:88 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: "
                                 "Connect to 10.0.0.7<43119> failed : Software caused connection abort")
    assert (sock.subsystem, sock.call) == ("socket", "socketStartConnect")
    (wrapped,) = of(ev.NcclMessage, "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                                    "remote process exited or there was a network error, NCCL version 2.19.3")
    assert wrapped.error_class == "remote"


def test_exit_codes_and_signals_normalise_to_one_signal_number():
    cases = {"exitcode  : -9 (pid: 4242)": 9, "Signal 11 (SIGSEGV) received by PID 77": 11,
             "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status -7.": 7,
             "mpirun noticed that process rank 0 with PID 0 on node n1 exited on signal 9 (Killed).": 9,
             "Fatal Python error: Bus error": 7, "Killed": 9, "Exited with exit code 137": 9,
             "[launch.py:316:sigkill_handler] Killing subprocess 1; exits with return code = -11": 11}
    for text, signal in cases.items():
        assert [s.signal for s in of(ev.ExitStatus, text)] == [signal], text


def test_python_exceptions_carry_the_innermost_frame_module():
    text = ('Traceback (most recent call last):\n'
            '  File "/usr/lib/python3/dist-packages/torch/distributed/rendezvous.py", line 189, in _create_c10d_store\n'
            'torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.')
    (exc,) = of(ev.PyException, text)
    assert (exc.type, exc.qualified, exc.module) == ("DistStoreError", "torch.distributed.DistStoreError",
                                                     "torch.distributed.rendezvous")


def test_store_container_kernel_and_errno_shapes():
    assert [s.kind for s in of(ev.StoreMessage, "[c10d] The client socket has timed out after 60s while trying to "
                                                "connect to (10.0.0.1, 29500).")] == ["timeout"]
    assert [c.kind for c in of(ev.ContainerError, "docker: Error response from daemon: pull access denied for "
                                                  "acme/trainer, repository does not exist")] == ["auth"]
    assert [k.kind for k in of(ev.KernelLine, "python[4121]: segfault at 0 ip 00007f sp 00007ffd error 4 in "
                                              "libc.so.6")] == ["segfault"]
    assert [e.errno for e in of(ev.OsErrno, "OSError: [Errno 28] No space left on device")] == [28]


def test_an_unseen_wording_of_a_known_family_lands_in_its_family():
    """Wordings no signature in rules.py names: the shape alone decides."""
    cases = {
        "gpu-3:9:9 [1] transport/net_ib.cc:812 NCCL WARN NET/IB : mlx5_2:1 port went DOWN while posting": "ib_config",
        "RuntimeError: CUDA driver error: CUDA_ERROR_SYSTEM_NOT_READY": "fabricmanager",
        "worker exited: exitcode -7 (SIGBUS) while reading a batch": "shm_too_small",
        "kernel: nvidia-smi[3321]: segfault at 10 ip 00007f0 sp 00007ff error 4 in libnvidia-ml.so.1": "segfault",
        "Error: failed to pull and unpack image \"registry.local/team/train:v3\": failed to resolve reference": 
            "image_pull_failed",
    }
    for text, cause in cases.items():
        assert diagnose_text(text)[0].cause == cause, (text, [f.cause for f in diagnose_text(text)])


def test_a_warning_line_weighs_less_than_the_error_it_resembles():
    error = families.supports(records("OSError: [Errno 28] No space left on device"))
    assert error and error[0].cause == "disk_full"
    warned = diagnose_text("[W socket.cpp:601] [c10d] The IPv6 network addresses of (localhost, 5) cannot be "
                           "retrieved (gai error: -2 - Name or service not known).\nKeyError: 'w'\n")
    assert warned[0].cause == "job_code_error"


GARBAGE = st.lists(st.one_of(
    st.sampled_from(["NCCL WARN ", "NCCL INFO ", "CUDA error: ", "Cuda failure ", "[Errno ", "exitcode  : -",
                     "Signal ", "SIG", "File \"", "\", line 3", "Error response from daemon: ", "TCPStore ",
                     "NVRM: Xid (PCI:", "segfault at ", "Root Cause", "(", ")", "'", ":", "\n", "\x00", "\ufffd"]),
    st.text(max_size=30)), max_size=60).map("".join)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(GARBAGE)
def test_extract_never_raises_on_garbage(text):
    for record in records(text):
        assert record.line is not None
    families.supports(records(text))


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(min_value=0, max_value=120))
def test_truncated_real_lines_never_raise(cut):
    lines = ["node1:2011:2040 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer with error 12",
             "RuntimeError: CUDA error: an illegal memory access was encountered",
             "subprocess.CalledProcessError: Command '['x']' returned non-zero exit status -9."]
    for line in lines:
        records(line[:cut])


def test_a_huge_line_is_read_only_up_to_its_cap():
    line = "NCCL WARN " + "(" * 2_000_000 + " Cuda failure 'out of memory'"
    assert all(len(getattr(r, "text", "")) <= ev.MAX_LINE for r in records(line))
    records("x" * 5_000_000)


def test_configuration_shapes_usage_versions_interfaces_and_resources():
    assert [u.kind for u in of(ev.UsageError, "main.py: error: unrecognized arguments: --local-rank=0")] == \
        ["unrecognized"]
    assert [(v.subject, v.relation) for v in of(ev.VersionRelation, "The NVIDIA driver on your system is too old "
                                                "(found version 11040).")] == [("driver", "too_old")]
    assert [(v.subject, v.relation) for v in of(ev.VersionRelation, "Found GPU0 GeForce 820M which is of cuda "
                                                "capability 2.1. PyTorch no longer supports this GPU because it is "
                                                "too old.")] == [("gpu_arch", "too_old")]
    assert [i.kind for i in of(ev.NetInterface, "host:1:1 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>")] == \
        ["loopback"]
    assert [i.kind for i in of(ev.NetInterface, "Unable to find address for: ib0")] == ["none"]
    assert [r.resource for r in of(ev.ResourceExhausted, "ERROR: Unexpected bus error encountered in worker. This "
                                   "might be caused by insufficient shared memory (shm).")] == ["shm"]


def test_an_unknown_still_names_its_best_line_and_a_next_step_from_the_evidence():
    text = ('Traceback (most recent call last):\n'
            '  File "/opt/conda/lib/python3.10/site-packages/mylib/data/loader.py", line 3, in f\n'
            "RuntimeError: image record truncated\n")
    (finding,) = diagnose_text(text)
    assert finding.cause == "unknown" and "RuntimeError" in finding.evidence
    assert "`RuntimeError` raised in `mylib.data.loader`" in finding.fix


@pytest.mark.parametrize("line", [
    "a" * 4090 + " fail", "a." * 2045 + "Error fail", "a " * 2045 + " error fail", ": a" * 1365 + " Error",
    "signal " * 585, "NCCL WARN " + "(" * 4000, "CUDA error " + "x" * 4000, "x" * 4000 + ": error: unrecognized",
    "x" * 4000 + " Failed .service", "driver " * 580 + "too old", "Using " * 680, "errno " * 680,
    "Job for a.b.c failed NVSwitch " * 140, "a-" * 2000 + ".service: Failed"])
def test_adversarial_lines_of_the_cap_length_are_parsed(line):
    """Lines built against each parser's regex (repetition, unclosed brackets, long words): each is
    read through (the bounded, anchored patterns keep every one linear; bench/ has the timings)."""
    records(line)
