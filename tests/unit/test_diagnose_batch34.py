"""Message classes met in the misses of issue 51's batch 34 after its first score (bench/first_scores/batch-34.md):
each test names the class, with the real lines that met it (their pages in `# source` comments)."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text

# source: https://github.com/NovaSearch-Team/RAG-Retrieval/issues/50 (batch-34b/01): accelerate's own
# check, the port now quoted in backticks
ACCELERATE_PORT_QUOTED = """\
ConnectionError: Tried to launch distributed communication on port `29500`, but another process is utilizing it. Please specify a different port (such as using the `--main_process_port` flag or specifying a different `main_process_port` in your config file) and rerun your script. To automatically use the next open port (on a single node), you can set this to `0`.
"""

# source: https://fuchaojie.com/2022/06/CUDAVersion (batch-34e/02): PhysX comparing the driver's CUDA
# version with the one it needs
DRIVER_VERSION_IN_NUMBERS = """\
/buildAgent/work/45f70df4210b2e3e/source/cudamanager/src/CudaContextManager.cpp (635) : warning : CUDA driver version is 11020, expected at least 11040.
"""

# source: https://github.com/pmodels/mpich/issues/7200 (batch-34f/06): MPICH's MPIR_Assert in its own source
MPICH_OWN_ASSERT = """\
Assertion failed in file src/mpid/ch4/src/init_comm.c at line 72: in_use == 0
/opt/aurora/24.180.1/CNDA/mpich/20240717/mpich-ofi-all-icc-default-pmix-gpu-drop20240717/lib/libmpi.so.12(+0x1d86514) [0x14763ac07514]
/opt/aurora/24.180.1/CNDA/mpich/20240717/mpich-ofi-all-icc-default-pmix-gpu-drop20240717/lib/libmpi.so.12(+0x1c128b1) [0x14763aa938b1]
"""

# source: https://github.com/open-mpi/ompi-release/issues/875 (batch-34d/04): Open MPI's own daemon crashing
ORTED_SEGFAULT = """\
[vegas26:00823] *** Process received signal ***
[vegas26:00823] Signal: Segmentation fault (11)
[vegas26:00823] Signal code: Address not mapped (1)
[vegas26:00823] Failing at address: (nil)
[vegas26:00823] [ 0] /lib64/libpthread.so.0[0x36d820f710]
[vegas26:00823] *** End of error message ***
bash: line 1:   823 Segmentation fault      (core dumped) /labhome/valentinp/workspace/ompi-release/build_v1.10_rel/install/bin/orted --hnp-topo-sig 2N:2S:2L3:16L2:16L1:16C:16H:x86_64 -mca ess "env" -mca orte_ess_jobid "644218880" -mca orte_ess_vpid 1 -mca orte_ess_num_procs "2" -mca orte_hnp_uri "644218880.0;tcp://10.209.44.52,21.151.70.25,2.11.0.25,11.151.70.25:37667" --tree-spawn -mca plm "rsh" -mca rmaps_base_mapping_policy "node" -mca rmaps_base_display_map "1" --tree-spawn
--------------------------------------------------------------------------
ORTE was unable to reliably start one or more daemons.
"""

# source: https://github.com/nv-legate/cupynumeric/issues/1231 (batch-34d/03): Open MPI started by srun
# without Slurm's PMI
SRUN_WITHOUT_PMI = """\
nid001236:1733247] OPAL ERROR: Unreachable in file pmix3x_client.c at line 111
--------------------------------------------------------------------------
The application appears to have been direct launched using "srun",
but OMPI was not built with SLURM's PMI support and therefore cannot
execute. There are several options for building PMI support under
SLURM, depending upon the SLURM version you are using:

  version 16.05 or later: you can use SLURM's PMIx support. This
  requires that you configure and build SLURM --with-pmix.

  Versions earlier than 16.05: you must use either SLURM's PMI-1 or
  PMI-2 support. SLURM builds PMI-1 by default, or you can manually
  install PMI-2. You must then build Open MPI using --with-pmi pointing
  to the SLURM PMI library location.

Please configure as appropriate and try again.
--------------------------------------------------------------------------
*** An error occurred in MPI_Init_thread
*** on a NULL communicator
"""

# source: https://github.com/vllm-project/vllm/issues/9920 (batch-34g/01): NCCL connects two GPUs
# of one workstation, then nothing (ACS/IOMMU on)
ONE_HOST_STALL_AFTER_NCCL_INIT = """\
HP-Z8-Fury-G5-Workstation-Desktop-PC:23458:23458 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct
HP-Z8-Fury-G5-Workstation-Desktop-PC:23458:23458 [0] NCCL INFO Channel 01 : 0[0] -> 1[1] via SHM/direct/direct
HP-Z8-Fury-G5-Workstation-Desktop-PC:23458:23458 [0] NCCL INFO Connected all rings
HP-Z8-Fury-G5-Workstation-Desktop-PC:23458:23458 [0] NCCL INFO Connected all trees
HP-Z8-Fury-G5-Workstation-Desktop-PC:23541:23541 [1] NCCL INFO Connected all rings
HP-Z8-Fury-G5-Workstation-Desktop-PC:23541:23541 [1] NCCL INFO Connected all trees
HP-Z8-Fury-G5-Workstation-Desktop-PC:23541:23541 [1] NCCL INFO threadThresholds 8/8/64 | 16/8/64 | 512 | 512
HP-Z8-Fury-G5-Workstation-Desktop-PC:23541:23541 [1] NCCL INFO 2 coll channels, 0 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer
HP-Z8-Fury-G5-Workstation-Desktop-PC:23458:23458 [0] NCCL INFO threadThresholds 8/8/64 | 16/8/64 | 512 | 512
HP-Z8-Fury-G5-Workstation-Desktop-PC:23458:23458 [0] NCCL INFO 2 coll channels, 0 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer
HP-Z8-Fury-G5-Workstation-Desktop-PC:23458:23665 [0] NCCL INFO comm 0x23ba7ea0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 47000 commId 0x47dc53f08cbcda96 - Init COMPLETE
HP-Z8-Fury-G5-Workstation-Desktop-PC:23541:23673 [1] NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct
HP-Z8-Fury-G5-Workstation-Desktop-PC:23541:23673 [1] NCCL INFO Channel 01 : 1[1] -> 0[0] via SHM/direct/direct
INFO 11-01 23:16:33 distributed_gpu_executor.py:56] # GPU blocks: 185231, # CPU blocks: 18724
<vllm.entrypoints.llm.LLM object at 0x72c46e351a50>
Processed prompts:   0%|          | 0/16 [00:00<?, ?it/s, est. speed input: 0.00 toks/s, output: 0.00 toks/s]
"""

# source: https://github.com/NVIDIA/nccl/issues/104 (batch-34d/01): nccl-tests' header, no result row
NCCL_TESTS_NO_ROW = """\
> Using devices
   Rank  0 uses device  0 [0x05] Tesla M40 24GB
   Rank  1 uses device  1 [0x08] Tesla M40 24GB
   Rank  2 uses device  2 [0x0d] Tesla M40 24GB
   Rank  3 uses device  3 [0x13] Tesla M40 24GB
   Rank  4 uses device  4 [0x83] Tesla M40 24GB
   Rank  5 uses device  5 [0x89] Tesla M40 24GB
   Rank  6 uses device  6 [0x8e] Tesla M40 24GB
   Rank  7 uses device  7 [0x91] Tesla M40 24GB
>
>                                                 out-of-place                    in-place
>      bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw      res
"""


@pytest.mark.parametrize("text, cause", [
    (ACCELERATE_PORT_QUOTED, "port_in_use"),
    (DRIVER_VERSION_IN_NUMBERS, "driver_too_old"),
    (MPICH_OWN_ASSERT, "library_bug"),
    (ORTED_SEGFAULT, "library_bug"),
    (SRUN_WITHOUT_PMI, "mpi_pmi_missing"),
    (ONE_HOST_STALL_AFTER_NCCL_INIT, "p2p_unsupported"),
    (NCCL_TESTS_NO_ROW, "p2p_unsupported"),
])
def test_each_class_leads_with_its_cause(text, cause):
    findings = diagnose_text(text)
    assert findings and findings[0].cause == cause, [(f.cause, f.confidence) for f in findings]


def test_a_stall_is_p2p_only_where_nothing_in_the_log_says_what_failed():
    failed = ONE_HOST_STALL_AFTER_NCCL_INIT + "[rank1]: RuntimeError: NCCL error: unhandled system error\n"
    assert diagnose_text(failed)[0].cause != "p2p_unsupported"
    done = NCCL_TESTS_NO_ROW + "# Avg bus bandwidth    : 10.5\n"
    assert all(f.cause != "p2p_unsupported" for f in diagnose_text(done))


def test_a_local_protection_error_names_p2p_among_the_causes():
    # source: https://github.com/openucx/ucx/issues/3564 (batch-34d/06): GPUDirect RDMA refused with ACS on
    text = ("mlx5:  got completion with error:\n"
            "rc_verbs_iface.c:67   send completion with error: local protection error\n")
    assert "p2p_unsupported" in [f.cause for f in diagnose_text(text)]


def test_an_assertion_that_the_machine_lacks_a_feature_is_not_the_jobs_code():
    # source: https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/650 (batch-34c/05): the device lacks it
    text = ("[rank0]: AssertionError: CUDA device, driver and/or toolkit version does not support comm+GEMM overlap "
            "with CUDA Multicast. Launch app with UB_SKIPMC=1 to try CUDA IPC instead.\n")
    assert diagnose_text(text)[0].cause != "job_code_error"
