"""Message classes met in the misses of batches 10 and 11 (issue 51; first scores in docs/diagnosis.md): each case
is a class of message in some program's words, with the public page its excerpt comes from. The logs themselves
joined the corpus's training side; these keep the class, not the thread."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text


# classes from batches 10 and 11's misses, each named first
MISSED_CLASSES = [
    # https://github.com/hpcaitech/ColossalAI/issues/3066: an SSH client library (paramiko) with no usable key
    ("Error: failed to run torchrun --nproc_per_node=4 --nnodes=2 --node_rank=1 on gpu-1648, is localhost: False, "
     "exception: No authentication methods available", "ssh_failed"),
    # https://github.com/hpcaitech/ColossalAI/issues/5213: the same library refusing the key file's format
    ("Error: failed to run torchrun --nproc_per_node=2 --nnodes=2 --node_rank=1 pretrain.py on 192.168.1.12, "
     "is localhost: False, exception: not a valid RSA private key file", "ssh_failed"),
    # https://github.com/jax-ml/jax/issues/35905: JAX's coordination service out of reach (a firewalled port)
    ("DEADLINE_EXCEEDED: Deadline Exceeded\nRPC: /tensorflow.CoordinationService/RegisterTask", "rdzv_unreachable"),
    # https://github.com/ray-project/ray/issues/12153: a Ray worker node unable to reach the head's redis
    ("W1119 08:22:22.445783 1513663 1513663 redis_context.cc:303] Failed to connect to Redis, retrying.\n"
     "F1119 08:22:23.602082 1513663 1513663 redis_context.cc:298] Could not establish connection to redis "
     "161.97.xx.xxx:12662 (context.err = 1)", "rdzv_unreachable"),
    # https://github.com/hurryingauto3/navsim-ijepa-planning-agent (notes/summaries/MULTINODE_FIX_APPLIED.md):
    # the scheduler's tasks per node against the framework's devices
    ("ValueError: You set `devices=4` in Lightning, but the number of tasks per node \nconfigured in SLURM "
     "`--ntasks-per-node=1` does not match. HINT: Set `devices=1`.", "launcher_args"),
    # https://github.com/NVIDIA-NeMo/Speech/issues/14829: srun unable to start the step (its --mpi plugin)
    ("srun: StepId=<id>.0 aborted before step completely launched.\nsrun: error: task 0 launch failed: Unspecified "
     "error", "launcher_args"),
    # https://github.com/deepspeedai/DeepSpeed/issues/2612: the runner left with an empty master address
    ("[2022-12-15 21:00:19,543] [INFO] [runner.py:417:main] Using IP address of  for node ddp-0.ddp.ml-dev.svc\n"
     "[INFO] [runner.py:508:main] cmd = pdsh -S -f 1024 -w ddp-0,ddp-1 cd /app; python -u -m deepspeed.launcher.launch "
     "--world_info=eyJ9 --node_rank=%n --master_addr= --master_port=29500 train.py", "launcher_args"),
    # https://github.com/kubeflow/mpi-operator/issues/501: the launch chain's exec agent absent (dash's form)
    ("/etc/mpi/kubexec.sh: 11: /opt/kube/kubectl: not found\ncommand terminated with exit code 1", "launcher_missing"),
    # https://github.com/horovod/horovod/blob/master/docs/troubleshooting.rst: MPI's compiler wrapper not on PATH
    ("    error: mpicxx -show failed, is mpicxx in $PATH?\n\n    Traceback (most recent call last):\n"
     "    OSError: [Errno 2] No such file or directory", "launcher_missing"),
    # https://github.com/NVIDIA/nccl-tests/issues/5: a program built against NCCL 1.x
    ("# NCCL Tests compiled with NCCL 1.0\n#   Rank  0 on     node03 device  0 [0x00] Tesla P100-PCIE-16GB\n"
     "NCCL failure all_reduce.cu:95 'unhandled cuda error'", "nccl_too_old"),
    # https://github.com/horovod/horovod/blob/master/docs/troubleshooting.rst: a data type the linked NCCL lacks
    ("UnknownError (see above for traceback): ncclAllReduce failed: invalid data type", "nccl_too_old"),
    # https://docs.cscs.ch/software/communication/nccl/: NCCL_NET names a network no loaded plugin provides
    ("nid006352: Test NCCL failure common.cu:958 'invalid usage (run with NCCL_DEBUG=WARN for details)\n"
     "nid006352:34157:34217 [1] net.cc:626 NCCL WARN Error: network AWS Libfabric not found.",
     "net_plugin_incompatible"),
    # https://blog.gitcode.com/d08c140514542d97e00603db51e0afa7.html: a JIT-built op missing from torch's cache
    ("ImportError: /root/.cache/torch_extensions/py38_cu118/fused_adam/fused_adam.so: cannot open shared object "
     "file: No such file or directory", "extension_build_failed"),
    # https://docs.alcf.anl.gov/polaris/data-science/frameworks/deepspeed/: a global batch below the GPU count
    ("x3202c0s31b0n0: AssertionError: Micro batch size per gpu: 0 has to be greater than 0", "config_divisibility"),
    # https://gitee.com/mindspore/docs (faq/distributed_configure.md): NCCL with no route to the peer's address
    ("include/socket.h:403 NCCL WARN Connect to XXX failed: Network is unreachable", "nic_mismatch"),
    # the same page: UCX (Open MPI's pml) unable to reach a peer over the interfaces the hosts have
    ("pml_ucx.c:175 Error: Failed to receive UCX worker address: Not found (-13)\n"
     "pml_ucx.c:452 Error: Failed to resolve UCX endpoint for rank X", "nic_mismatch"),
    # https://github.com/hiyouga/LlamaFactory/issues/3839: the device still held by the previous run's process
    ("RuntimeError: [ERROR] HCCL error in: torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:64\n"
     "EJ0001: 2024-05-21-11:57:54.167.645 Failed to initialize the HCCP process. Reason: Maybe the last training "
     "process is running.\n        Solution: Wait for 10s after killing the last training process and try again.",
     "duplicate_gpu"),
]


# the new signals stay off their neighbours' lines
NEIGHBOURS = [
    # https://github.com/NVIDIA/nccl-tests/issues/185 (a corpus entry): ibverbs failing with ENETUNREACH is the fabric's
    ("dgxh100-3:225140:225355 [0] misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed with error Network is "
     "unreachable", "ib_config"),
    # NCCL socket.cc's WARN form: a peer that refused is a socket error, not an interface the nodes do not share
    ("node1:1:1 [0] NCCL WARN Connect to 10.0.0.2<43210> failed : Connection refused", "nccl_socket_error"),
    # srun's launch failure after pyxis could not start the container is the container's
    # (https://docs.cscs.ch/software/container-engine/known-issue/, with srun's own line after it)
    ("0: slurmstepd: error: pyxis:     [ERROR] /etc/enroot/hooks.d/87-slurm.sh exited with return code 1\n"
     "0: slurmstepd: error: pyxis: couldn't start container\n"
     "0: slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1\n"
     "srun: error: task 0 launch failed: Unspecified error", "container_start_failed"),
    # a task that srun started and that then exited is no launch failure
    ("srun: error: nid001234: task 0: Exited with exit code 1", "unknown"),
]


@pytest.mark.parametrize("text", [
    # https://github.com/NVIDIA/pyxis/wiki/Pyxis---Enroot-Error-Reference: the NVIDIA hook on a missing device node
    "error: pyxis:     nvidia-container-cli: mount error: stat failed: /dev/nvidia-modeset: no such file or directory\n"
    "error: pyxis:     [ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1",
    # https://docs.cscs.ch/software/container-engine/known-issue/: a hook the image's libc cannot run
    "0: slurmstepd: error: pyxis:     [ERROR] Failed to refresh the dynamic linker cache\n"
    "0: slurmstepd: error: pyxis:     [ERROR] /etc/enroot/hooks.d/87-slurm.sh exited with return code 1\n"
    "0: slurmstepd: error: pyxis: couldn't start container",
    # https://docs.coreweave.com/support/sunk/articles/why-does-pyxis-report-file-already-exists-after-preemption
    "pyxis: ERROR File already exists: /opt/sunk/tmp/enroot-data/user-[UID]/pyxis_[JOB-ID].[STEP]\n"
    "pyxis: couldn't start container\nspank: required plugin spank_pyxis.so: task_init failed with rc=-1",
    # https://docs.determined.ai/latest/setup-cluster/slurm/slurm-known-issues.html: an unprivileged Apptainer install
    "FATAL: container creation failed: mount /var/tmp->/var/tmp error: while mounting /var/tmp: could not mount "
    "/var/tmp: operation not supported",
    # https://blog.gitcode.com/e30099b3430485d1cf7000d393004a49.html: an OCI hook (the toolkit's CDI symlinks) failing
    "OCI runtime create failed: runc create failed: unable to start container process: error during container init: "
    "error running hook #1: error running hook: exit status 1",
])
def test_a_container_runtime_that_cannot_create_the_container_is_container_start_failed(text):
    assert diagnose_text(text)[0].cause == "container_start_failed", [f.cause for f in diagnose_text(text)]


# a specific cause before the container runtime's generic failure leads
SPECIFIC_FIRST = [
    # https://github.com/NVIDIA/pyxis/issues/110 (a batch-11 log): the hook failing because the GPU runtime is absent
    ("slurmstepd: error: pyxis:     [ERROR] Command not found: nvidia-container-cli, see "
     "https://github.com/NVIDIA/libnvidia-container\n"
     "slurmstepd: error: pyxis:     [ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1\n"
     "slurmstepd: error: pyxis: couldn't start container", "docker_no_gpu_runtime"),
    # https://github.com/NVIDIA/enroot/issues/39 (a batch-11 log): a hook failing on a full disk
    ("sed: couldn't close stdout: No space left on device\n"
     "[ERROR] /etc/enroot/hooks.d/10-shadow.sh exited with return code 4", "disk_full"),
]


# a setting NCCL names at init leads when the init fails
INIT_SETTINGS = [
    # https://github.com/ROCm/rccl/issues/1129: RCCL's init check for an IOMMU not in pass-through mode
    ("deep-visionscaper3:38629:38629 [0] /long_pathname_so_that_rpms_can_package_the_debug_info/src/extlibs/rccl/build/"
     "hipify/src/init.cc:132 NCCL WARN Missing \"iommu=pt\" from kernel comm", "p2p_unsupported"),
    # https://github.com/NVIDIA/nccl/issues/1101: a system error at init while the image's topology file is set
    ("RuntimeError: NCCL Error 2: unhandled system error\n"
     "cs-project:2748:2852 [1] NCCL INFO NET/IB : Using [0]mlx5_an0:1/RoCE [RO]; OOB eth0:10.0.0.6<0>\n"
     "cs-project:2748:2852 [1] NCCL INFO Using network IB\n"
     "cs-project:2748:2852 [1] NCCL INFO NCCL_TOPO_FILE set by environment to /opt/microsoft/ncv4/topo.xml",
     "nccl_topo_file"),
]


# a crash after NCCL's own reported failure follows that failure
CRASHES = [
    # https://github.com/NVIDIA/nccl/issues/1562: NVLS setup failing, then a crash in ncclGroupEnd
    ("gpu46:78367:78492 [0] transport/nvls.cc:244 NCCL WARN Cuda failure 1 'invalid argument'\n"
     "==== backtrace (tid:  57187) ====\n   1 0x000000000007e6d1 ncclGroupEnd()  ???:0\n"
     "   Fatal Python error: Segmentation fault", "fabricmanager"),
    # a crash with no failure NCCL reported first stays a segfault
    ("NCCL INFO Using network IB\nFatal Python error: Segmentation fault", "segfault"),
]


@pytest.mark.parametrize("text, cause", MISSED_CLASSES + NEIGHBOURS + SPECIFIC_FIRST + INIT_SETTINGS + CRASHES)
def test_each_class_names_its_cause_first(text, cause):
    assert diagnose_text(text)[0].cause == cause, [f.cause for f in diagnose_text(text)]
