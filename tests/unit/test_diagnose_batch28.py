"""Message classes met in the misses of issue 51's batch 28 after its first score (bench/first_scores/batch-28.md):
each test names the class, with the real lines that met it (their pages in `# source` comments) and other members
of the class in the same form. Two causes are new: ddp_unused_parameters and slurm_gres_config."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text

# source: https://github.com/NVIDIA/nccl/issues/1381 (LLaMA-Factory in Docker on two nodes: batch-28d/02)
DOCKER_BRIDGE = """\
c39f5cf046aa:4533:4533 [0] NCCL INFO cudaDriverVersion 12050
c39f5cf046aa:4533:4533 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.3<0>
c39f5cf046aa:4533:4667 [0] NCCL INFO NET/Socket : Using [0]eth0:172.17.0.3<0>
c39f5cf046aa:4533:4667 [0] NCCL INFO Using network Socket
c39f5cf046aa:4533:4667 [0] NCCL INFO misc/socket.cc:568 -> 2
c39f5cf046aa:4533:4667 [0] NCCL INFO misc/socket.cc:619 -> 2
"""

# source: https://github.com/Oneflow-Inc/oneflow/issues/3586 (a veth listed beside the NIC: batch-28d/01)
VETH_LISTED = """\
worker:101542:101542 [0] NCCL INFO NET/Socket : Using [0]eno1:172.18.40.41<0> \
[1]veth25f2e72:fe80::380d:bfff:fe5b:54d2%veth25f2e72<0>
worker:101542:101542 [0] NCCL INFO Using network Socket
worker:101542:101934 [0] NCCL INFO Channel 00 : 0[18000] -> 1[18000] [receive] via NET/Socket/1
worker:101542:101934 [0] NCCL INFO Call to connect returned Connection timed out, retrying
"""

# source: https://github.com/LiuY1Chen/OOTDiffusion-train/issues/8 (under accelerate: batch-28f/07)
UNUSED = """\
RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This error \
indicates that your module has parameters that were not used in producing loss.
Parameter indices which did not receive grad for rank 1: 578 579 580 581
"""

# sources: https://github.com/SlinkyProject/containers/issues/14, https://github.com/BiBiServ/bibigrid/issues/705,
# https://github.com/NVIDIA/deepops/issues/1195 (batch-28c/04, 28e/04, 28e/05)
GRES = [
    "Reason=gres/gpu count reported lower than configured (0 < 4)\n[2026-04-14T06:39:53] We were configured to "
    "autodetect nvml functionality, but we weren't able to find that lib when Slurm was configured.",
    "Feb 02 09:52:07 bibigrid-worker slurmd[12912]: slurmd: fatal: can't stat gres.conf file /dev/nvidia0: No such "
    "file or directory",
    "[2022-06-10T09:46:22.044] error: _node_config_validate: gres/gpu: invalid GRES core specification (48-63,176-191) "
    "on node node01",
]


def _first(text: str) -> str:
    return diagnose_text(text)[0].cause


def test_a_rank_in_a_container_off_the_hosts_network_whose_connections_fail_is_nic_mismatch():
    assert _first(DOCKER_BRIDGE) == "nic_mismatch"
    # the same address on one host, nothing failing: no finding from it
    assert not diagnose_text("c39f5cf046aa:4533:4533 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.3<0>\n") or \
        _first("c39f5cf046aa:4533:4533 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.3<0>\n") != "nic_mismatch"


def test_connects_failing_where_ncclss_list_holds_a_veth_are_the_interface_not_a_peer_hang():
    findings = [f.cause for f in diagnose_text(VETH_LISTED)]
    assert findings[0] == "nic_mismatch" and "p2p_unsupported" not in findings[:1]
    # the same connect failure with only real NICs listed stays the network's
    plain = VETH_LISTED.replace(" [1]veth25f2e72:fe80::380d:bfff:fe5b:54d2%veth25f2e72<0>", "")
    assert _first(plain) == "nccl_socket_error"


@pytest.mark.parametrize("text", [
    UNUSED,
    "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the following reasons",
])
def test_ddps_reducer_against_the_models_graph_is_ddp_unused_parameters(text):
    assert _first(text) == "ddp_unused_parameters"


@pytest.mark.parametrize("text", GRES)
def test_a_nodes_own_gpu_gres_configuration_is_slurm_gres_config(text):
    assert _first(text) == "slurm_gres_config"


@pytest.mark.parametrize("text, cause", [
    # source: https://github.com/facebookresearch/dlrm/issues/256 (batch-28f/03)
    ("dlrm_main/0 [0]:File fbgemm_gpu_py.so not found\ndlrm_main/0 [1]:File fbgemm_gpu_py.so not found\n",
     "import_error"),
    # source: https://github.com/Coobiw/MPP-LLaVA/issues/31 (DeepSpeed's op builder: batch-28d/05)
    ('  File "deepspeed/ops/op_builder/builder.py", line 101, in assert_no_cuda_mismatch\n'
     "    raise CUDAMismatchException(\n", "extension_build_failed"),
    ("RuntimeError: The detected CUDA version (12.1) mismatches the version that was used to compile PyTorch (11.7). "
     "Please make sure to use the same CUDA versions.", "extension_build_failed"),
    # source: https://maxtext.readthedocs.io/en/maxtext-v0.2.0/guides/monitoring_and_debugging/megascale_hang_playbook.html
    # (batch-28c/07): workers that compiled different programs
    ("Megascale detects a hang that is likely caused by inconsistent HLO module compilation across workers.\n"
     "  Potential cause: INCONSISTENT_TPU_PROGRAM", "collective_mismatch"),
])
def test_other_classes_of_batch_28(text, cause):
    assert _first(text) == cause
