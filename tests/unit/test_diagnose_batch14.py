"""Message classes met in the misses of batch 14 (and the rest of batch 13's; issue 51, their first scores are in
docs/diagnosis.md): each a class of message, tested with another public thread's excerpt than the batch's own (the
page is named above it) or with a property over the class's forms, never with the batch's log."""
from __future__ import annotations

import re
import warnings

import pytest
from clusterctl_helpers import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from clusterctl.diagnose import corpus, diagnose_text
from clusterctl.diagnose.textmatch import required_literals

ENTRIES = {entry.path: entry for entry in corpus.load()}

CASES = [
    # https://github.com/WangRongsheng/XrayGLM/issues/20: DeepSpeed's fused_adam JIT build, ninja's failure line and the
    # nvcc command it ran (no `Error building extension` kept)
    ("FAILED: multi_tensor_adam.cuda.o\n/ssd/wphu/anaconda3/bin/nvcc  -DTORCH_EXTENSION_NAME=fused_adam "
     "-DTORCH_API_INCLUDE_EXTENSION_H -DPYBIND11_COMPILER_TYPE=\\\"_gcc\\\" -gencode=arch=compute_70,code=sm_70",
     "extension_build_failed"),
    # https://github.com/PASSIONLab/OpenEquivariance/issues/194: newer ninja's form, indented under pip's build output
    ("      FAILED: [code=1] oeq_stable_cuda.cpython-312-aarch64-linux-gnu.so", "extension_build_failed"),
    # https://github.com/facebookresearch/maskrcnn-benchmark/issues/750: setuptools' compiler command failing
    ("error: command '/usr/local/cuda/bin/nvcc' failed with exit status 2", "extension_build_failed"),
    # https://github.com/MVIG-SJTU/AlphaPose/issues/814: the same on Windows
    ("error: command 'C:\\\\Program Files\\\\NVIDIA GPU Computing Toolkit\\\\CUDA\\\\v10.0\\\\bin\\\\nvcc.exe' failed "
     "with exit status 2", "extension_build_failed"),
    # https://github.com/horovod/horovod/issues/527 (its title quotes the line): Open MPI's daemon absent where mpirun's
    # ssh landed, then ORTE's generic notice
    ('"/usr/local/bin/orted: No such file or directory" when running mpirun from Docker container\n'
     "debug1: Exit status 127\nORTE was unable to reliably start one or more daemons.", "launcher_missing"),
    # https://github.com/NVIDIA/nccl/issues/474 (its title): NCCL_COMM_ID on a subnet this node has no interface on
    ("No interface found in the same subnet as remote address", "nic_mismatch"),
    # https://github.com/pytorch/gloo/issues/399: a cluster with IPv4 and IPv6 stacks, ranks on different families
    ("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:276] ss1.ss_family == "
     "ss2.ss_family. 2 vs 10", "nic_mismatch"),
    # https://github.com/meta-pytorch/torchcodec/issues/1071: no linux-aarch64 wheel of the version asked
    ("ERROR: Could not find a version that satisfies the requirement torchcodec==0.7.0 (from versions: 0.0.0.dev0)",
     "import_error"),
]


@pytest.mark.parametrize("text,cause", CASES)
def test_each_class_leads_with_its_cause(text, cause):
    findings = diagnose_text(text)
    assert findings and findings[0].cause == cause, [(f.cause, f.confidence) for f in findings]


def test_memory_xids_are_the_gpus_memory_with_any_xid_next():
    # https://github.com/NVIDIA/gpu-operator/issues/1146: a double-bit error, then page retirement failing
    text = ("Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', "
            "name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
            "physAddr 0x7fffa8860 partition 7, subpartition 1.\n"
            "Dec  2 11:38:47 worker4 kernel: [  219.471050] NVRM: Xid (PCI:0000:07:00): 64, pid='<unknown>', "
            "name=<unknown>, Dynamic Page Retirement: Blacklisting failed.  Page should have been blacklisted on boot.")
    causes = [f.cause for f in diagnose_text(text)]
    assert causes[0] == "ecc_error" and "gpu_xid" in causes[:3]
    # an Xid of another kind (a contained SM error) stays gpu_xid
    other = "NVRM: Xid (PCI:0000:00:08): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No"
    assert diagnose_text(other)[0].cause == "gpu_xid"


def test_the_desync_reports_rank_out_of_step_is_the_collective_mismatch_before_its_timeout():
    # https://github.com/pytorch/pytorch/issues/152623 (TORCH_NCCL_DESYNC_DEBUG=1 on modded-nanogpt)
    text = ("[rank0]:[E515 18:36:47.341808597 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=241, OpType=ALLREDUCE, NumelIn=6, NumelOut=6, Timeout(ms)=600000) ran for 600086 "
            "milliseconds before timing out.\n"
            "[rank0]:[E515 18:36:47.343377708 ProcessGroupNCCL.cpp:1937] Rank 0\n"
            "         - [0] Timeout at collective: ALLREDUCE, #315\n"
            "         - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:\n"
            "             [7] finished collective #182, but didn't join collective #183 (count from 1)")
    causes = [f.cause for f in diagnose_text(text)]
    assert causes[:2] == ["collective_mismatch", "nccl_timeout_slow_rank"]


def test_nvls_multicast_failing_names_the_fabric_manager_first_and_the_nvlink_hardware_next():
    # https://github.com/pytorch/ci-infra/pull/541 (corpus copy: the fabric manager was not running); a node whose
    # NVLink got into a bad state fails with the same lines, so the hardware is the runner-up
    causes = [f.cause for f in diagnose_text(ENTRIES["fabricmanager/b11-pytorch-ci-infra-541.log"].text)]
    assert causes[0] == "fabricmanager" and "gpu_xid" in causes[:3]


def test_nccl_unwinding_an_error_at_the_end_of_a_one_host_log_is_no_silent_stall():
    # https://github.com/NVIDIA/nccl-tests/issues/231: one host's ranks return error 3 up NCCL's stack (the socket's
    # failure), the log ending on those trace lines
    text = "\n".join(f"mbay-csp3:11509:1156{dev} [{dev}] NCCL INFO {where} -> 3{tail}"
                     for dev in (1, 2, 6) for where, tail in (("misc/socket.cc:47", ""), ("bootstrap.cc:90", ""),
                                                              ("init.cc:1393", ""), ("group.cc:70", " [Async thread]")))
    assert diagnose_text(text)[0].cause != "p2p_unsupported"


def test_a_client_connect_with_errno_99_is_not_an_address_of_another_interface():
    # https://github.com/pytorch/PiPPy/issues/158: a client's EADDRNOTAVAIL (ports not yet released), not a bind
    text = ("[W socket.cpp:558] [c10d] The client socket has failed to connect to [localhost]:29500 (errno: 99 - Cannot "
            "assign requested address).")
    assert diagnose_text(text)[0].cause != "nic_mismatch"


SIGKILLS = st.sampled_from([
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 811) of binary: "
    "/usr/bin/python3", "Signal 9 (SIGKILL) received by PID 4242", "/var/spool/slurmd/job01/slurm_script: line 12: "
    "  811 Killed                  python train.py", "subprocess.CalledProcessError: Command '['python', 'train.py']' "
    "returned non-zero exit status -9.", "Killed"])
MEMORY_SHORT = st.sampled_from([
    "fatal   : Memory allocation failure", "terminate called after throwing an instance of 'std::bad_alloc'",
    "OSError: [Errno 12] Cannot allocate memory", "MemoryError", "numpy.core._exceptions._ArrayMemoryError: Unable to "
    "allocate 3.50 GiB for an array with shape (470000000,) and data type float64", "RuntimeError: DataLoader worker "
    "(pid 77) is killed by signal: Killed. [Errno 12] Cannot allocate memory"])
FILLER = st.sampled_from(["Loading checkpoint shards:  50%|#####     | 1/2", "[INFO] step 10 loss 2.31", ""])


@settings(max_examples=examples(60), deadline=None)
@given(SIGKILLS, MEMORY_SHORT, st.lists(FILLER, max_size=4), st.booleans())
def test_a_sigkill_in_a_log_that_shows_the_host_short_of_memory_is_the_oom_killer_first(kill, short, filler, before):
    lines = filler + ([short, kill] if before else [kill, short])
    causes = [f.cause for f in diagnose_text("\n".join(lines))]
    assert causes[0] == "oom_killed" and "killed_by_signal" in causes[:3], causes


@settings(max_examples=examples(30), deadline=None)
@given(SIGKILLS, st.lists(FILLER, max_size=4))
def test_a_bare_sigkill_stays_killed_by_signal_first(kill, filler):
    causes = [f.cause for f in diagnose_text("\n".join(filler + [kill]))]
    assert causes[0] == "killed_by_signal" and "oom_killed" in causes[:3], causes


WINDOWS_ROOTS = st.sampled_from(["C:\\Users\\{u}\\AppData\\Local\\conda\\envs\\{d}\\lib\\site-packages",
                                 "D:\\Anaconda3\\envs\\{d}\\lib\\site-packages", "C:\\Python39\\lib\\site-packages",
                                 "C:\\ProgramData\\Miniconda3\\envs\\{d}\\Lib\\site-packages"])
NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=10)
SETUP = st.sampled_from(["initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/2",
                         "dist.init_process_group(backend='nccl', init_method='env://')",
                         "Using DistributedDataParallel with 2 GPUs"])


@settings(max_examples=examples(60), deadline=None)
@given(WINDOWS_ROOTS, NAMES, NAMES, st.sampled_from(["pytorch_lightning\\trainer\\trainer.py", "mylib\\fit.py"]),
       SETUP, st.booleans())
def test_a_distributed_run_on_a_windows_host_is_the_platform(root, user, env, module, setup, with_setup):
    frame = f'  File "{root.format(u=user, d=env)}\\{module}", line 510, in fit'
    text = "\n".join(([setup] if with_setup else []) + ["Traceback (most recent call last):", frame, frame])
    causes = [f.cause for f in diagnose_text(text)]
    assert (causes[0] == "platform_backend_unsupported") == with_setup, causes


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(min_value=4, max_value=15), NAMES, st.integers(min_value=0, max_value=7))
def test_a_reduction_op_the_loaded_nccl_does_not_know_is_an_nccl_too_old(op, host, dev):
    # NCCL's enqueue check (ncclAvg is 4, PreMulSum 5+: newer than the library that refuses them)
    text = f"{host}:1234:1234 [{dev}] enqueue.cc:1021 NCCL WARN AllReduce: invalid reduction operation {op}"
    assert diagnose_text(text)[0].cause == "nccl_too_old"


@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet="ab\\[]^()|?*+{}.-", max_size=30))
def test_the_literal_prefilter_ends_on_any_pattern_text(pattern):
    # a character class ending in an escaped backslash (`[/\\]`) once made the tokenizer loop forever
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `[[`: a possible nested set in future Pythons
            re.compile(pattern)
    except re.error:
        assume(False)  # the rule table holds compiled patterns only
    literals = required_literals(pattern)
    assert literals is None or all(isinstance(literal, str) for literal in literals)


def test_a_class_ending_in_an_escaped_backslash_closes_at_its_own_bracket():
    assert required_literals(r"error: command '(?:[^']*[/\\])?nvcc' failed with exit") == ("nvcc' failed with exit",)


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(min_value=17, max_value=31), st.integers(min_value=1024, max_value=65535), NAMES)
def test_nccl_connecting_to_a_docker_bridges_gateway_is_the_interface_not_the_network(second, port, host):
    # a peer published the host's own address on docker0 / a user-defined bridge (172.17-31.0.1): reachable from that
    # host's containers only (pytorch/examples#689's class)
    text = (f"{host}:715:790 [1] include/socket.h:382 NCCL WARN Connect to 172.{second}.0.1<{port}> failed : "
            "Connection refused")
    assert diagnose_text(text)[0].cause == "nic_mismatch"


def test_nccl_refused_on_a_routed_private_address_stays_the_network():
    # https://github.com/espnet/espnet/issues/1940: a refused connection to a routed address is the network's (firewall)
    text = ("tj1-asr-train-v100-13:941227:943077 [0] include/socket.h:390 NCCL WARN Connect to 10.38.10.112<21724> "
            "failed : Connection refused")
    assert diagnose_text(text)[0].cause == "nccl_socket_error"


KEYS = st.lists(st.sampled_from(["id_rsa", "id_rsa-cert", "id_dsa", "id_ecdsa", "id_ed25519", "id_ed25519-cert"]),
                min_size=2, max_size=6, unique=True)
SSH_HEAD = ("OpenSSH_7.2p2 Ubuntu-4ubuntu2.4, OpenSSL 1.0.2g  1 Mar 2016\ndebug1: Connecting to 10.94.1.165 "
            "[10.94.1.165] port 12345.\ndebug1: Connection established.\ndebug1: permanently_set_uid: 0/0")


@settings(max_examples=examples(40), deadline=None)
@given(KEYS, st.integers(min_value=-1, max_value=3))
def test_a_verbose_ssh_trace_with_no_key_to_offer_is_the_ssh_login(keys, first_type):
    # the ssh -vvvv trace a launcher's `plm_rsh_args` prints (horovod/horovod#211, #162: the same lines, a key found
    # there: `id_rsa type 1`); with every identity file absent the login cannot succeed
    lines = [SSH_HEAD] + [f"debug1: key_load_public: No such file or directory\ndebug1: identity file /root/.ssh/{key} "
                          f"type {first_type if index == 0 else -1}" for index, key in enumerate(keys)]
    causes = [f.cause for f in diagnose_text("\n".join(lines))]
    assert (causes[0] == "ssh_failed") == (first_type == -1), causes


def test_rdma_registration_out_of_locked_memory_is_not_the_host_short_of_memory():
    # RDMA's memory registration says `Cannot allocate memory` when the memlock limit is low (ib_config), SIGKILL or not
    text = ("NET/OFI Unable to register memory (type = 2) for device 0. RC: -12, Error: Cannot allocate memory\n"
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 1) of binary: "
            "/usr/bin/python3")
    assert diagnose_text(text)[0].cause == "ib_config"
