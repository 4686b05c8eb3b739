"""Message classes met in the misses of issue 51's batch 26 after its first score (bench/first_scores/batch-26.md):
each test names the class, with the real lines that met it (their pages in `# source` comments) and other members
of the class in the same form. The batch's logs stay outside the corpus (its split is frozen)."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text

# source: https://github.com/vllm-project/vllm/issues/14016 (a vLLM worker on RTX 2080 Ti: batch-26a/08)
FLASH_ATTN = """\
ERROR 02-28 13:03:30 engine.py:400] RuntimeError: FlashAttention only supports Ampere GPUs or newer.
(VllmWorkerProcess pid=3923) ERROR 02-28 13:03:30 multiproc_worker_utils.py:242]   File \
"/root/miniconda3/lib/python3.12/site-packages/vllm/worker/worker.py", line 229, in determine_num_available_blocks
"""

# source: https://github.com/deepseek-ai/DeepEP/issues/316 (DeepEP's internode test, two hosts one name: batch-26c/07)
NVSHMEM_IPC = """\
IPC failure: Sending data over socket failed: No such file or directory
/dvs/p4/build/sw/rel/gpgpu/toolkit/r12.8/main_nvshmem/src/host/mem/mem_heap.cpp:exchange_heap_memory_handle:775: \
Fatal IPC Failure
"""


def _first(text: str) -> str:
    return diagnose_text(text)[0].cause


@pytest.mark.parametrize("line", [
    FLASH_ATTN,
    "RuntimeError: FlashAttention only supports Ampere GPUs or newer.",
    "RuntimeError: this kernel requires compute capability 8.0 or higher",
    "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU "
    "has compute capability 7.5.",
    "AssertionError: FP8 only supports Hopper GPUs or newer",
])
def test_a_librarys_own_check_of_the_gpus_generation_is_gpu_arch_unsupported(line):
    assert _first(line) == "gpu_arch_unsupported"


def test_nvshmems_ipc_failure_between_pes_it_takes_for_one_node_is_a_duplicate_host():
    found = diagnose_text(NVSHMEM_IPC)
    assert found[0].cause == "duplicate_host" and found[0].confidence < 0.9  # weakly: one cause of several
