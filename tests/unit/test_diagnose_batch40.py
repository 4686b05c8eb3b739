"""Message classes met in the misses of issue 51's batch 40 after its first score (bench/first_scores/batch-40.md),
each with the real lines that met it (their pages in `# source` comments) and what the class must not take."""
from __future__ import annotations

from clusterctl.diagnose import diagnose_text

# source: https://github.com/Azure/AML-Kubernetes/issues/58 (batch-40a/02): two workers each given rank 2 of 2
NCCL_RANK_PAST_WORLD = """\
2021-02-05 05:32:39 [job-pytorch-distr-nccl-1612503130-4b919e08-worker-1, unknown_ip] job-pytorch-distr-nccl-1612503130-4b919e08-worker-1:25:25 [0] NCCL INFO Bootstrap : Using [0]eth0:10.240.1.123<0>
2021-02-05 05:32:39 [job-pytorch-distr-nccl-1612503130-4b919e08-worker-1, unknown_ip] job-pytorch-distr-nccl-1612503130-4b919e08-worker-1:25:25 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).
2021-02-05 05:32:39 [job-pytorch-distr-nccl-1612503130-4b919e08-worker-1, unknown_ip] job-pytorch-distr-nccl-1612503130-4b919e08-worker-1:25:25 [0] NCCL INFO NET/IB : No device found.
2021-02-05 05:32:39 [job-pytorch-distr-nccl-1612503130-4b919e08-worker-1, unknown_ip] job-pytorch-distr-nccl-1612503130-4b919e08-worker-1:25:25 [0] NCCL INFO NET/Socket : Using [0]eth0:10.240.1.123<0>
2021-02-05 05:32:39 [job-pytorch-distr-nccl-1612503130-4b919e08-worker-1, unknown_ip] job-pytorch-distr-nccl-1612503130-4b919e08-worker-1:25:25 [0] init.cc:981 NCCL WARN Invalid rank requested : 2/2
"""
# source: https://github.com/michellab/BioSimSpace/issues/305 (batch-40b/02): mdrun with one rank per core
GROMACS_NO_DECOMPOSITION = """\
-------------------------------------------------------
Program:     gmx mdrun, version 2022
Source file: src/gromacs/domdec/domdec.cpp (line 2232)
MPI rank:    0 (out of 10)

Fatal error:
There is no domain decomposition for 10 ranks that is compatible with the
given box and a minimum cell size of 0.8525 nm
Change the number of ranks or mdrun option -rdd or -dds
Look in the log file for details on the domain decomposition

For more information and tips for troubleshooting, please check the GROMACS
website at http://www.gromacs.org/Documentation/Errors
-------------------------------------------------------
"""
# source: https://github.com/firemodels/fds/issues/7868 (batch-40b/03): Intel MPI over libfabric picking psm2
PSM2_ADDRINFO = """\
libfabric:core:core:ofi_layering_ok():877<info> Need core provider, skipping ofi_rxm
libfabric:core:core:fi_getinfo_():980<info> Since psm2 can be used, sockets has been skipped. To use sockets, please, set FI_PROVIDER=sockets
libfabric:core:core:fi_getinfo_():980<info> Since psm2 can be used, tcp has been skipped. To use tcp, please, set FI_PROVIDER=tcp
libfabric:core:core:fi_getinfo_():1002<warn> fi_getinfo: provider ofi_rxm returned -61 (No data available)
libfabric:core:core:fi_getinfo_():980<info> Since psm2 can be used, sockets has been skipped. To use sockets, please, set FI_PROVIDER=sockets
libfabric:core:core:fi_getinfo_():980<info> Since psm2 can be used, tcp has been skipped. To use tcp, please, set FI_PROVIDER=tcp
Abort(1094799) on node 0 (rank 0 in comm 0): Fatal error in PMPI_Init_thread: Other MPI error, error stack:
MPIR_Init_thread(666)......: 
MPID_Init(922).............: 
MPIDI_NM_mpi_init_hook(719): OFI addrinfo() failed (ofi_init.h:719:MPIDI_NM_mpi_init_hook:No data available)
libfabric:psm2:core:psmx2_fini():538<info>
"""
# source: https://github.com/openucx/ucx/issues/7845 (batch-40b/01): VASP on a UCX built without CUDA
UCX_PACKS_DEVICE_MEMORY = """\
[gpu-8:165331:0:165331] Caught signal 11 (Segmentation fault: invalid permissions for mapped object at address 0x7fc073c00000)
[gpu-3:51593:0:51593] Caught signal 11 (Segmentation fault: invalid permissions for mapped object at address 0x7fc234a02016)
 0 0x000000000014cc75 __memcpy_ssse3()  :0
 1 0x000000000003ea99 ucp_dt_pack()  /opt/ucx-source/src/ucp/dt/dt.c:120
 2 0x0000000000063eb2 ucp_tag_pack_eager_common()  /opt/ucx-source/src/ucp/tag/eager_snd.c:31
 3 0x00000000000337a2 uct_rc_mlx5_ep_am_bcopy()  /opt/ucx-source/src/uct/ib/rc/accel/rc_mlx5_ep.c:337
 4 0x00000000000337a2 uct_rc_mlx5_ep_am_bcopy()  /opt/ucx-source/src/uct/ib/rc/accel/rc_mlx5_ep.c:341
 5 0x00000000000653ea uct_ep_am_bcopy()  /opt/ucx-source/src/uct/api/uct.h:2852
"""
# source: https://github.com/pmodels/mpich/pull/5812 (batch-40b/04): MPICH's bundled UCX before 1.12
UCX_WIREUP_CONTRADICTS = """\
thetagpu11:~/soft/petsc/packages$ mpiexec -n 1 -host localhost ./hello
[1644178926.844524] [thetagpu11:3110029:0]          parser.c:1885 UCX  WARN  unused env variable: UCX_DIR (set UCX_WARN_UNUSED_ENV_VARS=n to suppress this warning)
[1644178926.861597] [thetagpu11:3110029:0]          wireup.c:1027 UCX  ERROR   old: am_lane 1 wireup_msg_lane 3 cm_lane <none> reachable_mds 0x1ffff ep_check_map 0x0
[1644178926.861633] [thetagpu11:3110029:0]          wireup.c:1048 UCX  ERROR   old: lane[0]:  0:posix/memory.0 md[0]          -> md[0]/posix/sysdev[255] rkey_ptr
[1644178926.861638] [thetagpu11:3110029:0]          wireup.c:1048 UCX  ERROR   old: lane[1]:  2:self/memory0.0 md[2]          -> md[2]/self/sysdev[255] am am_bw#0
[1644178926.861640] [thetagpu11:3110029:0]          wireup.c:1048 UCX  ERROR   old: lane[2]:  8:rc_mlx5/mlx5_0:1.0 md[4]      -> md[4]/ib/sysdev[255] rma_bw#0
[1644178926.861643] [thetagpu11:3110029:0]          wireup.c:1048 UCX  ERROR   old: lane[3]: 13:rc_mlx5/mlx5_1:1.0 md[5]      -> md[5]/ib/sysdev[255] rma_bw#1 wireup
"""
# source: https://github.com/THUDM/slime/issues/1998 (batch-40d/06): SGLang's custom all-reduce in graph capture
LIBRARY_RUNTIME_CHECK = """\
RuntimeError: Runtime check failed at /sgl-workspace/sglang/python/sglang/jit_kernel/include/sgl_kernel/distributed/custom_all_reduce.cuh:37: CUDA error: invalid argument
Exception: Capture cuda graph failed
ray::SGLangEngine.init()
File "/root/slime/backends/sglang_utils/sglang_engine.py", line 95, in _wait_server_healthy
    raise Exception("Server process terminated unexpectedly.")
Exception: Server process terminated unexpectedly.
"""


def test_nccl_given_a_rank_past_its_world_size_is_the_launch_and_names_both():
    first = diagnose_text(NCCL_RANK_PAST_WORLD)[0]
    assert first.cause == "launcher_args" and "(2)" in first.fix and "WORLD_SIZE" in first.fix, first


def test_a_domain_decomposition_with_no_layout_for_its_ranks_is_sizes_that_do_not_fit():
    assert diagnose_text(GROMACS_NO_DECOMPOSITION)[0].cause == "config_divisibility"


def test_libfabric_picking_psm2_that_cannot_start_is_the_provider_to_name():
    first = diagnose_text(PSM2_ADDRINFO)[0]
    assert first.cause == "net_plugin_incompatible" and "FI_PROVIDER" in first.fix, first


def test_ucx_faulting_in_memcpy_of_its_own_pack_is_a_gpu_buffer_it_took_for_host_memory():
    first = diagnose_text(UCX_PACKS_DEVICE_MEMORY)[0]
    assert first.cause == "mpi_gpu_support_missing" and "--with-cuda" in first.fix, first
    elsewhere = UCX_PACKS_DEVICE_MEMORY.replace("__memcpy_ssse3()", "ucs_event_set_wait()")
    assert diagnose_text(elsewhere)[0].cause == "segfault"


def test_ucx_contradicting_its_own_endpoint_wireup_is_its_bug():
    assert diagnose_text(UCX_WIREUP_CONTRADICTS)[0].cause == "library_bug"


def test_a_librarys_runtime_check_on_a_cuda_call_refused_for_its_arguments_is_its_bug():
    assert diagnose_text(LIBRARY_RUNTIME_CHECK)[0].cause == "library_bug"


# source: https://github.com/SlinkyProject/slurm-operator/issues/57 (batch-40c/07): slurmd on MI300X nodes
GRES_CONFIG_ONLY_GPU = """\
[2025-10-06T15:42:05] debug:  Gres GPU plugin: Merging configured GRES with system GPUs
[2025-10-06T15:42:05] error: Discarding the following config-only GPU due to lack of File specification:
[2025-10-06T15:42:05] warning: The following autodetected GPUs are being ignored:
"""


def test_slurmd_finding_its_gres_lines_and_detected_gpus_disagree_is_the_nodes_gres_config():
    assert diagnose_text(GRES_CONFIG_ONLY_GPU)[0].cause == "slurm_gres_config"
