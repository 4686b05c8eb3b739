"""Message classes met in the misses of issue 51's batches 31 and 32 after their first scores (bench/first_scores/):
each test names the class, with the real lines that met it (their pages in `# source` comments)."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text
from clusterctl.diagnose.engine import with_similar_causes
from clusterctl.diagnose.similar import Similar

# source: https://github.com/pytorch/pytorch/issues/52916 (DDP over two nodes: batch-31a/05). NCCL pinned to the
# loopback: every connection to a peer fails, the interface's fault before the network's
LOOPBACK_PINNED = """\
GPU9:10330:10330 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to lo
GPU9:10330:10330 [0] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0>
GPU9:10330:10330 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>
GPU9:10330:10330 [0] NCCL INFO Using network Socket
GPU9:10330:10399 [0] NCCL INFO Call to connect returned Connection refused, retrying
GPU9:10330:10399 [0] NCCL INFO Call to connect returned Connection refused, retrying
"""

# source: https://github.com/pytorch/pytorch/issues/150916 (the other node's torchrun agent killed: batch-31a/09)
PEER_GONE_MID_RUN = """\
  what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: NCCL \
error: remote process exited or there was a network error, NCCL version 2.21.5
ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
Last error:
socketProgress: Connection closed by remote peer ip-172-31-36-217.eu-north-1.compute.internal<59116>
"""

# source: https://github.com/deepspeedai/DeepSpeed/issues/7143 (fused_adam's JIT build: batch-31c/01)
GCC_TOO_OLD_FOR_TORCH = """\
In file included from /env/lib/python3.12/site-packages/torch/include/ATen/ATen.h:7,
                 from /env/lib/python3.12/site-packages/deepspeed/ops/csrc/adam/multi_tensor_adam.cu:11:
/env/lib/python3.12/site-packages/torch/include/c10/util/C++17.h:13:2: error: #error "You're trying to build \
PyTorch with a too old version of GCC. We need GCC 9 or later."
"""

# source: https://verl.readthedocs.io/en/latest/faq/faq.html#triton-compile-module-from-src-error (batch-31e/06)
TRITON_HELPER_BUILD = """\
File "/envs/verl/lib/python3.10/site-packages/triton/backends/nvidia/driver.py", line 57, in compile_module_from_src
  so = _build(name, src_path, tmpdir, library_dirs(), include_dir, libraries)
File "/envs/verl/lib/python3.10/site-packages/triton/runtime/build.py", line 48, in _build
  ret = subprocess.check_call(cc_cmd)
File "/envs/verl/lib/python3.10/subprocess.py", line 369, in check_call
  raise CalledProcessError(retcode, cmd)
"""

# source: https://github.com/PaddlePaddle/PaddleSeg/issues/3794 (Paddle on Windows, two GPUs: batch-31f/08)
NO_NCCL_IN_BUILD = """\
  File "C:\\ProgramData\\Anaconda3\\lib\\site-packages\\paddle\\distributed\\collective.py", line 157, in _new_process_group_impl
    pg = core.ProcessGroupNCCL.create(
AttributeError: module 'paddle.base.libpaddle' has no attribute 'ProcessGroupNCCL'
"""

# source: https://github.com/open-mpi/ompi/issues/6517 (Open MPI 4 on mlx4: batch-31d/09)
OPENIB_PORTS_UNUSED = """\
By default, for Open MPI 4.0 and later, infiniband ports on a device
are not used by default.  The intent is to use UCX for these devices.
You can override this policy by setting the btl_openib_allow_ib MCA parameter
to true.
  Local host:              c36a-s39
  Local adapter:           mlx4_0
WARNING: There was an error initializing an OpenFabrics device.
"""

# source: https://github.com/SlinkyProject/containers/pull/2 (pyxis in a nested container: batch-31d/04): the GPU hook
# is there and fails inside the new container: the start's failure, not a missing runtime
ENROOT_HOOK_FAILS = """\
[2025-07-18T15:06:29.684] error: pyxis: container start failed with error code: 1
[2025-07-18T15:06:29.684] error: pyxis:     nvidia-container-cli: ldcache error: process /usr/sbin/ldconfig.real failed \
with error code: 1
[2025-07-18T15:06:29.684] error: pyxis:     [ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1
[2025-07-18T15:06:29.684] error: pyxis: couldn't start container
"""

# source: https://github.com/NVIDIA/pyxis/issues/101 (batch-31d/03): the hook's program absent on the node, the GPU
# runtime missing (batch 11's pyxis#110 alike: one class, one label)
ENROOT_RUNTIME_ABSENT = """\
slurmstepd: error: pyxis:     [ERROR] Command not found: nvidia-container-cli, see https://github.com/NVIDIA/libnvidia-container
slurmstepd: error: pyxis:     [ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1
slurmstepd: error: pyxis: couldn't start container
"""


# source: https://github.com/NVIDIA/nccl/issues/331 (NCCL in Docker on two hosts: batch-32b/06): the peer published its
# container's address on Docker's default bridge, which no other host routes to
BRIDGE_CONTAINER_PEER = """\
71d46aa8dab5:5241:5262 [2] NCCL INFO Call to connect returned Connection refused, retrying
71d46aa8dab5:5241:5262 [2] NCCL INFO Call to connect returned Connection refused, retrying
71d46aa8dab5:5241:5262 [2] include/socket.h:390 NCCL WARN Connect to 172.17.0.3<37551> failed : Connection refused
71d46aa8dab5:5241:5262 [2] NCCL INFO bootstrap.cc:100 -> 2
"""

# source: https://github.com/NVIDIA/nccl-tests/issues/287 (RTX 5090, NCCL 2.25.1: batch-32a/04, a repeat of batch 25's
# thread; NVIDIA/nccl#1637 in batch 26): the NCCL build older than the GPU's arch (two labels of three: gpu_arch_unsupported)
NCCL_OLDER_THAN_GPU = "gpu-a:4766:4780 [0] NCCL INFO ncclMaxSharedMem 82240 exceeds device/fn maxSharedMem 79856\n"


@pytest.mark.parametrize("text, cause", [
    (BRIDGE_CONTAINER_PEER, "nic_mismatch"), (NCCL_OLDER_THAN_GPU, "gpu_arch_unsupported"),
    (LOOPBACK_PINNED, "nic_mismatch"), (PEER_GONE_MID_RUN, "node_unreachable"),
    (GCC_TOO_OLD_FOR_TORCH, "extension_build_failed"), (TRITON_HELPER_BUILD, "extension_build_failed"),
    (NO_NCCL_IN_BUILD, "platform_backend_unsupported"), (OPENIB_PORTS_UNUSED, "ib_config"),
    (ENROOT_HOOK_FAILS, "container_start_failed"), (ENROOT_RUNTIME_ABSENT, "docker_no_gpu_runtime"),
])
def test_each_class_names_its_cause_first(text, cause):
    assert diagnose_text(text)[0].cause == cause, [f.cause for f in diagnose_text(text)]


def test_the_peer_gone_is_a_consequence_a_root_in_the_same_log_leads():
    text = PEER_GONE_MID_RUN + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert diagnose_text(text)[0].cause == "cuda_oom"


def test_the_same_connection_failure_without_loopback_is_the_networks():
    text = LOOPBACK_PINNED.replace("lo:127.0.0.1", "eth0:10.1.2.3").replace("to lo", "to eth0")
    assert diagnose_text(text)[0].cause == "nccl_socket_error"


def test_a_runner_up_from_a_resembling_case_never_prints_surer_than_the_answer_above_it():
    findings = diagnose_text(PEER_GONE_MID_RUN)[:1]
    similar = [Similar(cause="ib_config", source="https://example.org/1", score=0.9, fix="f")]
    out = with_similar_causes(findings, similar)
    assert [f.cause for f in out] == ["node_unreachable", "ib_config"]
    assert out[1].confidence <= out[0].confidence
