"""Message classes met in the misses of issue 51's batches 29 and 30 after their first scores (bench/first_scores/):
each test names the class, with the real lines that met it (their pages in `# source` comments)."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text

# source: https://github.com/modelscope/ms-swift/issues/2776 (ms-swift in Docker: batch-29d/07). A container on
# Docker's bridge, but the failure is its /dev/shm: NCCL's bare system error is no network failure
SHM_IN_BRIDGE = """\
2edaa9ce4458:21610:21610 [1] NCCL INFO Bootstrap : Using eth0:172.17.0.6<0>
2edaa9ce4458:21610:21723 [1] NCCL INFO NET/Socket : Using [0]eth0:172.17.0.6<0>
2edaa9ce4458:21610:21723 [1] NCCL INFO Using network Socket
[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, \
unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
[rank0]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
[rank0]: Last error:
[rank0]: Error while creating shared memory segment /dev/shm/nccl-9D6bNG (size 9637888)
"""

# source: https://github.com/pytorch/pytorch/issues/14870 (examples/imagenet on two nodes: batch-29a/06)
LO_LISTED = """\
b8b857cb-e016-457b-8d8b-c5b1403413b6:39358:39358 [0] NCCL INFO Using internal Network Socket
b8b857cb-e016-457b-8d8b-c5b1403413b6:39358:39358 [0] NCCL INFO NET : Using interface lo:127.0.0.1<0>
b8b857cb-e016-457b-8d8b-c5b1403413b6:39358:39358 [0] NCCL INFO NET : Using interface eth1:9.73.128.149<0>
b8b857cb-e016-457b-8d8b-c5b1403413b6:39358:39358 [0] NCCL INFO NET/Socket : 2 interfaces found
NCCL version 2.3.7+cuda9.0
b8b857cb-e016-457b-8d8b-c5b1403413b6:39358:39358 [0] NCCL INFO rank 0 nranks 8
"""


def _first(text: str) -> str:
    return diagnose_text(text)[0].cause


def test_a_full_shm_in_a_bridged_container_is_the_shm_not_the_network():
    assert _first(SHM_IN_BRIDGE) == "shm_too_small"


def test_a_stall_after_nccl_took_the_loopback_among_its_interfaces_is_the_interface():
    assert _first(LO_LISTED) == "nic_mismatch"


@pytest.mark.parametrize("text, cause", [
    # source: https://github.com/PaddlePaddle/PaddleSpeech/discussions/772 (batch-29d/05)
    ("E0819 07:01:47.576184 7372 pybind.cc:1584] Invalid CUDAPlace(1), must inside [0, 1), because GPU number on "
     "your machine is 1", "gpu_ordinal"),
    # source: https://github.com/Tlntin/Qwen-TensorRT-LLM/issues/123 (batch-29e/06)
    ("RuntimeError: [TensorRT-LLM][ERROR] Assertion failed: mpiSize == tp * pp (/home/jenkins/agent/workspace/LLM/"
     "release-0.8/L0_PostMerge/tensorrt_llm/cpp/tensorrt_llm/runtime/worldConfig.cpp:90)", "config_divisibility"),
    # source: https://github.com/NVIDIA/TensorRT-LLM/issues/440 (batch-29e/07)
    ("    assert world_size == tensorrt_llm.mpi_world_size(), \\\nAssertionError: Engine world size (1) != Runtime "
     "world size (8)", "config_divisibility"),
])
def test_other_classes_of_batch_29(text, cause):
    assert _first(text) == cause


def test_a_gpu_the_driver_says_must_be_reset_is_the_nodes_gpu():
    # source: https://github.com/scitix/sichek/issues/51 (batch-30b/03: nccl-tests on a GPU in NV_ERR_RESET_REQUIRED)
    text = ("'CUDA-capable device(s) is/are busy or unavailable'\n"
            " [Sun Jan 11 09:52:01 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required "
            "[NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874")
    assert _first(text) == "gpu_xid"
