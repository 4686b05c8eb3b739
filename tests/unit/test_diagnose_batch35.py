"""Message classes met in the misses of issue 51's batch 35 after its first score (bench/first_scores/batch-35.md):
each test names the class, with the real lines that met it (their pages in `# source` comments)."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text

# source: https://github.com/NVIDIA/TensorRT-LLM/issues/4238 (batch-35c/02): NCCL 2.25.1's bug,
# fixed by 2.26.2
NCCL_ENQUEUE_INVALID_ARGUMENT = """\
[1] enqueue.cc:1500 NCCL WARN Cuda failure 1 'invalid argument'
[1] NCCL INFO group.cc:242 -> 1
[1] NCCL INFO group.cc:470 -> 1
[1] NCCL INFO group.cc:573 -> 1
[1] NCCL INFO enqueue.cc:2229 -> 1
Failed, NCCL error /home/jenkins/agent/workspace/LLM/main/L0_Test-x86_64/tensorrt_llm/cpp/tensorrt_llm/thop/allreduceOp.cpp:308 'unhandled cuda error (run with NCCL_DEBUG=INFO for details)'
"""

# source: https://github.com/hiyouga/LlamaFactory/issues/1169 (batch-35a/04): NCCL 2.18.5's bug,
# fixed by 2.18.6 (the NCCL maintainer in NVIDIA/nccl#1024)
TORCH_QUOTING_NCCLS_LAST_ERROR = """\
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1331, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.5
ncclUnhandledCudaError: Call to CUDA function failed.
Last error:
Cuda failure 'invalid argument'
"""

# source: https://github.com/flux-framework/flux-core/issues/6044 (batch-35b/03): Cray MPICH's
# PMI client failing under Flux
PMI_INIT_RETURNED_MINUS_ONE = """\
MPICH ERROR [Rank 0] [job id unknown] [Fri Jun 14 18:55:23 2024] [frontier04856] - Abort(1091855) (rank 0 in comm 0): Fatal error in PMPI_Init: Other MPI error, error stack:
MPIR_Init_thread(170):
MPID_Init(441).......:
MPIR_pmi_init(110)...: PMI_Init returned -1
"""


@pytest.mark.parametrize("text, cause", [
    (NCCL_ENQUEUE_INVALID_ARGUMENT, "library_bug"),
    (TORCH_QUOTING_NCCLS_LAST_ERROR, "library_bug"),
    (PMI_INIT_RETURNED_MINUS_ONE, "mpi_pmi_missing"),
])
def test_each_class_leads_with_its_cause(text, cause):
    findings = diagnose_text(text)
    assert findings and findings[0].cause == cause, [(f.cause, f.confidence) for f in findings]


def test_the_same_cuda_failure_in_nvls_or_shared_memory_keeps_its_own_cause():
    # NCCL's NVLS buffers (the fabric manager's) fail with the same words: corpus fabricmanager/b3-nccl-1338.log
    nvls = "node2:242431:242479 [5] transport/nvls.cc:158 NCCL WARN Cuda failure 1 'invalid argument'\n"
    assert diagnose_text(nvls)[0].cause == "fabricmanager"


def test_nccl_unable_to_load_the_drivers_nvml_is_the_gpu_runtime_missing_not_a_socket():
    # source: https://github.com/hiyouga/LlamaFactory/issues/6161 (batch-32d/02): NCCL's system-error boilerplate names
    # sockets; the last error says the driver's user-space library is not visible to the process
    text = ("[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device "
            "error.\n[rank1]: Last error:\n[rank1]: Failed to open libnvidia-ml.so.1\n")
    assert diagnose_text(text)[0].cause == "docker_no_gpu_runtime"
