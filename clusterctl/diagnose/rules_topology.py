"""Rules for how ranks, hosts and GPUs fit together: causes the first rule table lacked (issue 51).

- collective_mismatch: ranks out of step on their collectives (TORCH_DISTRIBUTED_DEBUG=DETAIL's
  fingerprint check, the flight recorder's mismatch report, NCCL's invalid usage on a mismatch);
- duplicate_host: two nodes NCCL takes for one host (the same hostname or host hash);
- p2p_unsupported: GPUs without peer-to-peer access (ACS/IOMMU, consumer GPUs, VMs), and after batch 34 a single host's
  NCCL job stalled silently after connecting its ranks;
- gpu_arch_unsupported: a torch/NCCL/extension build without code for the GPU's architecture;
- ddp_unused_parameters (after batch 28's first score): DDP's reducer and the model's graph disagree (parameters
  that took no part in the loss, a parameter marked ready twice): the rank's own words name it, every rank alike.

Same form as rules.py (see its docstring); families.py adds their shape-level evidence.
"""
from __future__ import annotations

from clusterctl.diagnose import fixes as F
from clusterctl.diagnose.signals import Rule, S

# (after batch 34) A log that stops right after NCCL connected one host's ranks through its P2P/SHM paths (or nccl-tests'
# result header with nothing under it), with no word of a failure anywhere: the first collective never completed.
# NCCL's troubleshooting names ACS/IOMMU redirecting peer traffic for exactly this (test: NCCL_P2P_DISABLE=1).
NCCL_SETUP_DONE = (r"NCCL INFO (?:comm 0x[0-9a-f]+ .{0,200}Init COMPLETE|Connected all (?:rings|trees))"
                   r"|\bbytes\s+N\s+type\s+(?:redop\s+|op\s+)?(?:root\s+)?time\s+algbw\s+busbw")
ONE_HOSTS_PATHS = r"\bvia (?:P2P|SHM)/|\bRank +\d+ uses device \d+|Using devices"
SILENT_STALL_ONLY = (r"error|warn|fail|exception|traceback|killed|timed? ?out|abort|signal|refused|denied|\bvia NET/"
                     r"|Avg bus bandwidth|100%\|")

TOPOLOGY_RULES = (
    Rule("collective_mismatch",
         "`Detected mismatch between collectives on ranks`, the flight recorder's mismatch report",
         F.COLLECTIVE_MISMATCH, (
             S(r"Detected mismatch between collectives on ranks|Collectives differ in the following aspects", .95),
             S(r"is running (?:inconsistent )?collective: CollectiveFingerPrint\(\S*OpType=(?P<op>\w+)", .93),
             S(r"(?:COLLECTIVE_(?:TYPE|STATE|DTYPE)|SIZE_OR_SYNTAX)_MISMATCH|Not all ranks joining collective", .9),
             # shapes that must agree on every rank (Accelerate's debug mode, DeepSpeed/Horovod checks)
             S(r"(?:shape|size|dtype)s? mismatch\w*.{0,80}(?:across|between) (?:devices|ranks|processes)"
               r"|must be (?:the same|identical|valid) (?:on|across) all (?:ranks|processes|devices)", .8),
             S(r"\bcollectives? (?:\w+ )?mismatch|mismatch(?:ed)? (?:in )?collectives?\b|collective sequence number"
               r"|SeqNum mismatch|ranks? (?:are|is) out of (?:sync|step)", .75,
               unless=r"local size \d+ remote size"),  # NCCL's IB transport: a size truncation (version_mismatch)
             S(r"\bdesync\b|Desync debug", .55),
             # Horovod's stall inspector: the same class in another framework's words
             S(r"different ranks are trying to submit different tensors|only (?:a )?subset of ranks is submitting", .8),
             # (after batch 28) XLA's multi-host runtime finding workers that compiled different programs: the same
             # class, the program differing rather than one collective
             S(r"inconsistent HLO module compilation|INCONSISTENT_TPU_PROGRAM|different HLO fingerprints", .85),
         )),
    Rule("ddp_unused_parameters",
         "`Expected to have finished reduction in the prior iteration before starting a new one` (parameters that "
         "took no part in the loss), `Expected to mark a variable ready only once`",
         F.DDP_UNUSED_PARAMETERS, (
             S(r"Expected to have finished reduction in the prior iteration before starting a new one", .95),
             S(r"module has parameters that were not used in producing (?:the )?loss"
               r"|Parameter indices which did not receive grad for rank", .9),
             S(r"Expected to mark a variable ready only once", .88),
         )),
    Rule("duplicate_host", "two nodes with one hostname / NCCL host hash (cloned machines, one container hostname)",
         F.DUPLICATE_HOST, (
             S(r"(?:same|duplicate|identical) (?:host ?name|host hash|hostHash|host id)", .85),
             S(r"\bNCCL_HOSTID\b", .5),
             S(r"hostHash|host hash", .35),
             # NVSHMEM (DeepEP, MoE kernels) takes PEs on one hostname for one node and swaps their memory handles over
             # local sockets: a peer on another machine under the same name is not there (after batch 26's first score)
             S(r"Fatal IPC Failure|IPC failure: Sending data over socket failed", .6),
         )),
    Rule("p2p_unsupported", "`peer access is not supported between these two devices`, ACS/IOMMU blocking P2P",
         F.P2P_UNSUPPORTED, (
             S(r"peer access is not supported between these two devices?|cudaErrorPeerAccessUnsupported"
               r"|CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", .93),
             S(r"(?:P2P|peer[- ]to[- ]peer|peer access)\W+(?:is )?(?:not supported|not available|disabled|unsupported"
               r"|fails?|failed)", .7),
             S(r"\b(?:ACS|IOMMU)\b.{0,60}(?:P2P|peer|enabled|NCCL)|(?:P2P|peer).{0,60}\b(?:ACS|IOMMU)\b", .7),
             S(r"Two or more GPUs with Peer-to-Peer access capability are required", .85),
             S(r"peer mapping resources exhausted|cudaErrorPeerAccessNotEnabled", .6),
             # the tools' own probes: CUDA's p2pBandwidthLatencyTest, TensorRT-LLM/vLLM's canAccessPeer checks
             S(r"CANNOT Access Peer|peer access Device \d+ is not available|cudaDeviceCanAccessPeer failed"
               r"|Can't enable (?:peer )?access between", .75),
             # lspci's view of a PCIe switch that redirects peer traffic (ACS on: SrcValid+ ... ReqRedir+)
             S(r"ACSCtl:\s*SrcValid\+.*ReqRedir\+", .7),
             # RCCL's own check at init: the IOMMU not in pass-through mode, which blocks peer traffic on AMD hosts
             S(r'Missing "?iommu=pt"?', .75),
             # ...a silent stall of one host's first collective (above): weak, a hang whatever its cause
             S(NCCL_SETUP_DONE, .45, requires=ONE_HOSTS_PATHS, unless_log=SILENT_STALL_ONLY),
             # (after batch 34) GPUDirect RDMA's writes refused by the HCA (a local protection error): the GPU's memory
             # is not reachable from the NIC (ACS/IOMMU on the path, peer memory not registered); ib_config leads
             S(r"local protection error|Got completion from peer .{0,80} with error 4\b", .45),
         )),
    Rule("gpu_arch_unsupported",
         "`no kernel image is available for execution on the device`, `sm_120 is not compatible with the current "
         "PyTorch installation`",
         F.GPU_ARCH_UNSUPPORTED, (
             S(r"no kernel image is available for execution|CUDA_ERROR_NO_BINARY_FOR_GPU"
               r"|cudaErrorNoKernelImageForDevice", .93),
             S(r"(?:CUDA capability|with CUDA capability) (?P<arch>sm_\d+) is not compatible with the current "
               r"PyTorch", .96),
             S(r"not compatible with the current PyTorch installation|current PyTorch install supports CUDA "
               r"capabilities", .9),
             S(r"Unsupported gpu architecture '?(?P<arch>compute_\d+\w*)|nvcc fatal\s*:\s*Unsupported gpu", .88),
             S(r"(?:arch(?:itecture)?|compute capability|sm_\d+) (?:\S+ )?(?:is )?not supported"
               r"|unsupported (?:GPU|CUDA) arch", .6),
             # a library's own check of the GPU's generation (after batch 26's first score: FlashAttention's "only
             # supports Ampere GPUs or newer"; the same form in other kernels' checks, by generation or capability)
             S(r"(?:only supports?|supports? only|requires?)\s+(?:an?\s+)?(?:NVIDIA\s+)?(?:Pascal|Volta|Turing|Ampere"
               r"|Ada(?: Lovelace)?|Hopper|Blackwell|sm_?\d+|compute capability\s*(?:>=?\s*)?[\d.]+)"
               r"\s*(?:GPUs?|devices?|architecture)?\s*(?:or|and)\s+(?:newer|later|above|higher)", .85),
         )),
)
