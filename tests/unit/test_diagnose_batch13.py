"""Message classes met in the misses of batch 13 (issue 51; its first score, blind, is in docs/diagnosis.md): each a
class of message in some program's words, with the public page its excerpt comes from, and a second source where
one shows the same class."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text

CASES = [
    # https://docs.pytorch.org/docs/stable/distributed.html (monitored_barrier's example): rank 1 never calls it
    ("RuntimeError: Rank 1 failed to pass monitoredBarrier in 2000 ms\n Original exception:\n"
     "[gloo/transport/tcp/pair.cc:598] Connection closed by peer [2401:db00:eef0:1100:3560:0:1c05:25d]:8594",
     "rank_hang"),
    # torch's ProcessGroupGloo.cpp monitoredBarrier with wait_all_ranks=True (pytorch/pytorch#55010): every rank missing
    ("RuntimeError: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms", "rank_hang"),
    # https://mmcv.readthedocs.io/en/latest/faq.html: mmcv's ops built without CUDA
    ("RuntimeError: nms is not compiled with GPU support", "extension_build_failed"),
    # https://github.com/HKUST-Aerial-Robotics/Stereo-RCNN/issues/71: the same class in a detectron-style csrc op
    ("RuntimeError: Not compiled with GPU support (nms at ../Stereo-RCNN/lib/model/csrc/nms.h:22)",
     "extension_build_failed"),
    # https://github.com/modelscope/ms-swift (FAQ Q40): Megatron's fused kernel from apex not built
    ("RuntimeError: ColumnParallelLinear was called with gradient_accumulation_fusion set to True but the custom CUDA "
     "extension fused_weight_gradient_mlp_cuda module is not found. To use gradient_accumulation_fusion you must "
     "install APEX with --cpp_ext and --cuda_ext.", "extension_build_failed"),
    # https://github.com/aws/aws-ofi-nccl/pull/1226: NCCL's topology discovery on p5.48xlarge (32 EFA + 8 H100)
    ("NCCL WARN Error : too many XML nodes (max 256)", "nccl_topo_file"),
]


@pytest.mark.parametrize("text,cause", CASES)
def test_each_class_leads_with_its_cause(text, cause):
    findings = diagnose_text(text)
    assert findings and findings[0].cause == cause, [(f.cause, f.confidence) for f in findings]


def test_torch_built_for_the_cpu_is_not_an_extension_build():
    # torch's own assertion (a CPU wheel of torch, or no GPU): another class than a framework's ops built without CUDA
    findings = diagnose_text('AssertionError: Torch not compiled with CUDA enabled')
    assert not findings or findings[0].cause != "extension_build_failed"
