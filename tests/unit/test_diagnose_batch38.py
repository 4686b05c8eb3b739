"""Message classes met in the misses of issue 51's batch 38 after its first score (bench/first_scores/batch-38.md),
and the cause it added, `mpi_gpu_support_missing` (the fourth `other:` label for it over batches 32, 35 and 38):
each test names the class, with the real lines that met it (their pages in `# source` comments)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from clusterctl.diagnose import diagnose_text
from clusterctl.diagnose.engine import with_similar_causes

# source: https://docs.cscs.ch/software/communication/cray-mpich/#ref-communication-cray-mpich-gpu-aware (batch-32e/03)
CRAY_GTL = """\
MPICH ERROR [Rank 0] [job id 410301.1] [Thu Feb 13 12:42:18 2025] [nid005414] - Abort(-1) (rank 0 in comm 0): MPIDI_CRAY_init: GPU_SUPPORT_ENABLED is requested, but GTL library is not linked
 (Other MPI error)

aborting job:
MPIDI_CRAY_init: GPU_SUPPORT_ENABLED is requested, but GTL library is not linked
"""
# source: https://github.com/conda-forge/openmpi-feedstock/issues/83 (batch-38c/05): mpi4py + CuPy on a build
# without CUDA; the segfault that follows is its consequence
OMPI_NO_CUDA = """\
$ OMPI_MCA_opal_cuda_support=true  mpirun -n 2 python demo/cuda-aware-mpi/use_cupy.py
--------------------------------------------------------------------------
The user requested CUDA support with the --mca mpi_cuda_support 1 flag
but the library was not compiled with any support.
--------------------------------------------------------------------------
[WCS-164320:29458] *** Process received signal ***
[WCS-164320:29458] Signal: Segmentation fault (11)
[WCS-164320:29458] Signal code: Address not mapped (1)
"""
# source: https://github.com/openucx/ucx/issues/3776 (batch-38c/06): UCX_TLS without cuda_copy, device buffers
UCX_NO_CUDA_COPY = """\
mpirun -np 2  -x UCX_TLS=rc,gdr_copy -mca pml ucx -mca btl self,tcp --host host1:1,host2:1 osu_latency -m 1:$((2**10)) -x 1 -i 1 -d cuda D D
==== backtrace ====
    0  libucs.so.0(+0x20b1c) [0x7f1a9b56fb1c]
    4  libuct_ib.so.0(uct_rc_mlx5_ep_am_short+0x25b) [0x7f1a9a4b7a7b]
    5  libucp.so.0(ucp_tag_send_nbr+0x87) [0x7f1a9b7bc377]
    7  libmpi.so.40(PMPI_Send+0x2f) [0x7f1adab98c8f]
"""


def test_an_mpi_handed_gpu_buffers_without_its_gpu_support_is_named_with_the_build_to_use():
    for log in (CRAY_GTL, OMPI_NO_CUDA, UCX_NO_CUDA_COPY):
        first = diagnose_text(log)[0]
        assert first.cause == "mpi_gpu_support_missing", (log, first)
        assert "mpi_built_with_cuda_support" in first.fix and "GTL" in first.fix, first.fix


def test_the_segfault_after_open_mpis_refusal_is_its_consequence_not_the_lead():
    findings = diagnose_text(OMPI_NO_CUDA)
    assert findings[0].cause == "mpi_gpu_support_missing" and findings[0].confidence > 0.6, findings


def test_ucx_transports_that_keep_cuda_copy_are_not_this_cause():
    kept = UCX_NO_CUDA_COPY.replace("UCX_TLS=rc,gdr_copy", "UCX_TLS=rc,cuda_copy,gdr_copy")
    assert all(f.cause != "mpi_gpu_support_missing" for f in diagnose_text(kept))


# source: https://github.com/tensorflow/tensorflow/issues/44281 (batch-38c/01): MirroredStrategy's default all-reduce
# on Windows, whose TensorFlow has no NCCL
TF_NO_NCCL = """\
No OpKernel was registered to support Op 'NcclAllReduce' used by {{node NcclAllReduce}} with these attrs: [reduction="sum", shared_name="c1", T=DT_FLOAT, num_devices=2]
Registered devices: [CPU, GPU, XLA_CPU, XLA_GPU]
Registered kernels:
  <no registered kernels>
"""


def test_a_frameworks_nccl_op_without_a_kernel_is_a_build_without_nccl():
    assert diagnose_text(TF_NO_NCCL)[0].cause == "platform_backend_unsupported"


# source: https://github.com/openmm/openmm/issues/4036 (batch-38c/03): a second context enabling peer access again
PEER_ACCESS_TWICE = """\
  File "/home/ndonyapour/miniconda3/envs/ommv8/lib/python3.11/site-packages/openmm/openmm.py", line 10069, in __init__
    _openmm.Context_swiginit(self, _openmm.new_Context(*args))
openmm.OpenMMException: Error initializing Context: CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED (704) at /home/conda/feedstock_root/build_artifacts/openmm_1675115849849/work/platforms/cuda/src/CudaContext.cpp:246
"""


@given(st.sampled_from([PEER_ACCESS_TWICE,
                        "RuntimeError: CUDA error: peer access is already enabled\n",
                        "cudaDeviceEnablePeerAccess failed: cudaErrorPeerAccessAlreadyEnabled\n"]))
def test_peer_access_enabled_twice_is_the_librarys_own_bookkeeping_not_the_machines_p2p(log):
    first = diagnose_text(log)[0]
    assert first.cause == "library_bug", (log, first)


# source: https://github.com/pmodels/mpich/issues/3946 (batch-36k/04): Hydra's own error, no rank's line, no rule
HYDRA_NODE_LIST = """\
[prun] Launch cmd = mpiexec.hydra -bootstrap slurm ./a.out (family=mpich)
Error: node list format not recognized. Try using '-hosts=<hostnames>'.
"""


def test_a_tools_own_error_that_nothing_names_is_a_release_bug_first_and_unknown_after_it():
    named = with_similar_causes(diagnose_text(HYDRA_NODE_LIST), similar=[])
    assert [f.cause for f in named] == ["library_bug", "unknown"], named
    assert "node list format not recognized" in named[0].evidence and "tracker" in named[0].fix
    assert named[1].confidence <= named[0].confidence


def test_a_ranks_own_line_or_the_jobs_exception_keeps_its_unknown():
    for log in ("[rank3]: ERROR: dataset shard 7 is missing its index\n",
                "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
                "RuntimeError: the loss went to nan at step 512\n"):
        named = with_similar_causes(diagnose_text(log), similar=[])
        assert named[0].cause in ("unknown", "job_code_error"), (log, named)


def test_a_log_with_no_error_line_or_nothing_at_all_keeps_its_unknown():
    for log in ("", "step 10 loss 2.31\nstep 11 loss 2.29\n"):
        assert with_similar_causes(diagnose_text(log), similar=[])[0].cause == "unknown", log
