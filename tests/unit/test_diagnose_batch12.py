"""Message classes met in the misses of batch 12 (issue 51; its first score is in docs/diagnosis.md): each case is a
class of message in some program's words, with the public page its excerpt comes from; where another thread
than the batch's own shows the class, that thread's excerpt is here too, so the class is tested, not the log."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text
from clusterctl.diagnose import evidence as ev
from clusterctl.diagnose.logformat import parse_lines

# an HPC container runtime unable to create the container: its namespaces refused, its own helpers failing, the
# NVIDIA hook failing a step inside the new container
CONTAINER_START = [
    # https://github.com/apptainer/apptainer/issues/2027: Ubuntu 24.04's AppArmor restriction on user namespaces
    "INFO   : A system administrator may need to enable user namespaces, install\n"
    "ERROR  : Failed to create user namespace: Permission denied",
    # https://github.com/NVIDIA/deepops/pull/1392: the same restriction met by enroot under pyxis
    "    enroot-nsenter: failed to create user namespace: Permission denied",
    # https://github.com/apptainer/apptainer/issues/2691: the same restriction in a later Apptainer's words
    "ERROR  : Could not write info to setgroups: Permission denied\n"
    "ERROR  : Error while waiting event for user namespace mappings: no event received",
    # https://github.com/apptainer/apptainer/issues/2360: a fakeroot build on the same Ubuntu
    "ERROR  : Failed to create mount namespace: mount namespace requires privileges, check Apptainer installation",
    # https://github.com/NVIDIA/enroot/issues/177: an image without a shell (enroot needs /bin/sh)
    "enroot start hello-world\n\nenroot-switchroot: failed to execute: /bin/sh: No such file or directory",
    # https://github.com/NVIDIA/enroot/issues/156: the container's data on a noexec tmpfs
    "[81.0] error: pyxis: container start failed with error code: 1\n"
    "[81.0] error: pyxis:     enroot-switchroot: failed to execute: /bin/sh: Permission denied",
    # https://github.com/NVIDIA/enroot/issues/234: the NVIDIA hook's lookup in the container's rootfs refused
    "slurmstepd: error: pyxis: container start failed with error code: 1\n"
    "slurmstepd: error: pyxis:   nvidia-container-cli: container error: file lookup failed: /proc/421042/root/fsx/"
    "enroot/data/user-1111/pyxis_nemo/etc/debian_version: permission denied\n"
    "slurmstepd: error: pyxis:   [ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1",
    # https://github.com/NVIDIA/enroot/issues/88: SELinux refusing the hook's capability change
    "nvidia-container-cli: permission error: capability change failed: operation not permitted\n"
    "[ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1",
    # https://github.com/NVIDIA/nvidia-docker/issues/1447: the same hook under runc, its cgroup step failing
    "docker: Error response from daemon: OCI runtime create failed: container_linux.go:370: starting container "
    "process caused: process_linux.go:459: container init caused: Running hook #0:: error running hook: exit status "
    "1, stdout: , stderr: nvidia-container-cli: container error: cgroup subsystem devices not found: unknown.",
]

# other classes of batch 12's misses, each named first
MISSED_CLASSES = [
    # https://github.com/horovod/horovod/issues/850: MPICH's resolver call failing on the node's own name
    ("MPID_nem_tcp_get_business_card(420): \nMPID_nem_tcp_init(379).............: gethostbyname failed, ac922 "
     "(errno 1)", "hostname_unresolvable"),
    # https://github.com/pmodels/mpich/issues/4710: the same, on a CI runner
    ("MPID_Init(224).....................: channel initialization failed\nMPID_nem_tcp_init(373).............: "
     "gethostbyname failed, Mac-1594849612293 (errno 0)", "hostname_unresolvable"),
    # https://github.com/mit-han-lab/spvnas/issues/30: a host list's host:slots handed to ssh as a host name
    ("ssh: Could not resolve hostname localhost:1: Temporary failure in name resolution", "launcher_args"),
    # https://github.com/horovod/horovod/issues/951: the same with horovodrun -H localhost:4
    ("ssh: Could not resolve hostname localhost:4: Name or service not known\n"
     "ORTE was unable to reliably start one or more daemons.", "launcher_args"),
    # https://github.com/NVIDIA/nccl-tests/issues/41: an RDMA device with no userspace verbs provider in the container
    ("libibverbs: Warning: no userspace device-specific driver found for /sys/class/infiniband_verbs/uverbs0\n"
     "ip-0AB85F07: Test NCCL failure common.cu:775 'internal error'", "ib_config"),
    # https://github.com/deepspeedai/DeepSpeedExamples/issues/103: nvcc older than the arch list of an op's JIT build
    ("nvcc fatal   : Unsupported gpu architecture 'compute_86'\nninja: build stopped: subcommand failed.\n"
     "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.",
     "extension_build_failed"),
    # https://github.com/deepspeedai/DeepSpeedExamples/issues/845: a network error while the launch pins the interface
    ("[INFO] [runner.py:571:main] cmd = pdsh -S -f 1024 -w 192.168.3.100,192.168.3.101 export NCCL_SOCKET_IFNAME=eno1; "
     "cd /root/cifar; python -u -m deepspeed.launcher.launch --node_rank=%n cifar10_deepspeed.py\n"
     "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1333, "
     "remote process exited or there was a network error, NCCL version 2.18.6", "nic_mismatch"),
]


@pytest.mark.parametrize("text", CONTAINER_START)
def test_a_container_runtime_that_cannot_create_the_container_is_named_first(text):
    assert diagnose_text(text)[0].cause == "container_start_failed"


@pytest.mark.parametrize("text,cause", MISSED_CLASSES)
def test_batch_12_classes_are_named_first(text, cause):
    assert diagnose_text(text)[0].cause == cause


def test_open_mpi_tcp_failure_keeps_its_firewall_hint_first_and_names_the_interface_next():
    # https://github.com/kubeflow/kubeflow/issues/3789: fixed by pinning NCCL_SOCKET_IFNAME (multi-homed pods)
    text = ("A process or daemon was unable to complete a TCP connection\nto another process:\n"
            "  Local host:    test-openmpi-master\n  Remote host:   test-openmpi-worker-14.mpi-test.tfworkflow\n"
            "This is usually caused by a firewall on the remote host.")
    assert [f.cause for f in diagnose_text(text)][:2] == ["nccl_socket_error", "nic_mismatch"]


def test_nccls_description_of_its_system_error_class_is_not_socket_evidence():
    # https://github.com/HRNet/DEKR/issues/18 (fixed with --ipc=host): NCCL's fixed text lists "socket" as an example
    text = ("> RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled system error, "
            "NCCL version 2.7.8\n\nncclSystemError: System call (socket, malloc, munmap, etc) failed.")
    lines, _ = parse_lines(text)
    assert all(r.subsystem != "socket" for r in ev.extract(lines) if isinstance(r, ev.NcclMessage))
    assert diagnose_text(text)[0].cause == "shm_too_small"


def test_a_benign_verbs_provider_warning_does_not_outweigh_a_specific_cause():
    # https://github.com/NVIDIA/nccl/issues/1044: maintainers: libibverbs' own warning for a provider of another device
    text = ("libibverbs: Warning: couldn't load driver 'libipathverbs-rdmav25.so': libipathverbs-rdmav25.so: cannot "
            "open shared object file: No such file or directory\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert diagnose_text(text)[0].cause == "cuda_oom"
