"""Message classes met in the misses of issue 51's batch 42 after its first score (bench/first_scores/batch-42.md),
each with the real lines that met it (their pages in `# source` comments) and what the class must not take."""
from __future__ import annotations

from clusterctl_helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterctl.diagnose import diagnose_text

# source: https://github.com/NVIDIA/nccl/issues/872 (batch-42d/05): nccl-tests' binary under mpirun, libmpi not on the node
LOADER_LACKS_LIBMPI = """\
./build/all_reduce_perf: error while loading shared libraries: libmpi.so.40: cannot open shared object file: No such file or directory
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
./build/all_reduce_perf: error while loading shared libraries: libmpi.so.40: cannot open shared object file: No such file or directory
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[3862,1],3]
  Exit code:    127
--------------------------------------------------------------------------
"""
# source: https://github.com/NVIDIA/nccl-tests/issues/254 (batch-42d/03): every process of a 2-node run is rank 0
NCCL_TESTS_EVERY_RANK_0 = """\
Using devices 
Rank  0 Group  0 Pid 544816 on    dgx01 device  0 [0x1a] NVIDIA H100 80GB HBM3
Rank  0 Group  0 Pid 332597 on    dgx02 device  0 [0x1a] NVIDIA H100 80GB HBM3
Rank  0 Group  0 Pid 332599 on    dgx02 device  0 [0x1a] NVIDIA H100 80GB HBM3
Rank  0 Group  0 Pid 544818 on    dgx01 device  0 [0x1a] NVIDIA H100 80GB HBM3
Rank  0 Group  0 Pid 332601 on    dgx02 device  0 [0x1a] NVIDIA H100 80GB HBM3
Rank  0 Group  0 Pid 544822 on    dgx01 device  0 [0x1a] NVIDIA H100 80GB HBM3
Rank  0 Group  0 Pid 544820 on    dgx01 device  0 [0x1a] NVIDIA H100 80GB HBM3
Rank  0 Group  0 Pid 332596 on    dgx02 device  0 [0x1a] NVIDIA H100 80GB HBM3
Rank  0 Group  0 Pid 332603 on    dgx02 device  0 [0x1a] NVIDIA H100 80GB HBM3
Rank  0 Group  0 Pid 544815 on    dgx01 device  0 [0x1a] NVIDIA H100 80GB HBM3
Rank  0 Group  0 Pid 544821 on    dgx01 device  0 [0x1a] NVIDIA H100 80GB HBM3
Rank  0 Group  0 Pid 332598 on    dgx02 device  0 [0x1a] NVIDIA H100 80GB HBM3
"""
# source: https://github.com/rwth-i6/returnn/issues/1196 (batch-42f/06): Horovod built without MPI under mpirun (SGE)
HOROVOD_EVERY_RANK_SIZE_1 = """\
Horovod: 0.26.1 /u/zeyer/.local/lib/python3.8/site-packages/horovod/__init__.py
Horovod: 0.26.1 /u/zeyer/.local/lib/python3.8/site-packages/horovod/__init__.py
Horovod initialized. Hostname cluster-cn-286, pid 12116, rank 0 / size 1, local rank 0 / local size 1.
Horovod initialized. Hostname cluster-cn-286, pid 12115, rank 0 / size 1, local rank 0 / local size 1.
+------- PROLOGUE SCRIPT -----------------------------------------------
|
| Job ID ...........: 7138672
| Started at .......: Tue Nov  1 12:55:33 CET 2022
| Execution host ...: cluster-cn-286
| Cluster queue ....: 8-GPU-2080
| Script ...........: /var/spool/sge/cluster-cn-286/job_scripts/7138672
"""
# source: https://github.com/easybuilders/easybuild-easyconfigs/issues/14801 (batch-42f/02): OSU's CUDA alltoall on an Open MPI without CUDA
OPEN_MPI_COPIES_DEVICE_BUFFER = """\
==== backtrace (tid:2888500) ====
 0 0x000000000002a160 ucs_debug_print_backtrace()  /tmp/jenkins/build/UCX/1.10.0/GCCcore-10.3.0/ucx-1.10.0/src/ucs/debug/debug.c:656
 1 0x0000000000012b20 .annobin_sigaction.c()  sigaction.c:0
 2 0x000000000016065c __memmove_avx_unaligned_erms()  :0
 3 0x0000000000052aeb non_overlap_copy_content_same_ddt()  opal_datatype_copy.c:0
 4 0x00000000000874b9 ompi_datatype_sndrcv()  ???:0
 5 0x00000000000e2d84 ompi_coll_base_alltoall_intra_pairwise()  ???:0
 6 0x000000000000646c ompi_coll_tuned_alltoall_intra_dec_fixed()  ???:0
 7 0x0000000000089a4f MPI_Alltoall()  ???:0
 8 0x0000000000402d40 main()  ???:0
 9 0x0000000000023493 __libc_start_main()  ???:0
10 0x000000000040318e _start()  ???:0
=================================
[gcn30:2888500] *** Process received signal ***
[gcn30:2888500] Signal: Segmentation fault (11)
[gcn30:2888500] Signal code:  (-6)
"""
# source: https://github.com/open-mpi/ompi/issues/7064 (batch-42f/05): osu_bw D D with the smcuda BTL left out
OPEN_MPI_PACKS_DEVICE_BUFFER = """\
mpirun -bind-to numa -map-by node -np 2 ./osu_bw D D
# OSU MPI-CUDA Bandwidth Test v5.6.2
# Send Buffer on DEVICE (D) and Receive Buffer on DEVICE (D)
# Size      Bandwidth (MB/s)
[nid04276:26561] *** Process received signal ***
[nid04276:26561] Signal: Segmentation fault (11)
[nid04276:26561] Signal code: Invalid permissions (2)
[nid04276:26561] Failing at address: 0x3114e00000
[nid04276:26561] [ 0] /lib64/libpthread.so.0(+0x10c10)[0x2aaaaca97c10]
[nid04276:26561] [ 1] /lib64/libc.so.6(+0x12c98a)[0x2aaaacdd098a]
[nid04276:26561] [ 2] /scratch/snx3000/mkrotkie/software/openmpi/4.0.2-noucx/lib/libopen-pal.so.40(opal_convertor_pack+0x1ab)[0x2aaaad99c72b]
[nid04276:26561] [ 3] /scratch/snx3000/mkrotkie/software/openmpi/4.0.2-noucx/lib/openmpi/mca_btl_ugni.so(mca_btl_ugni_sendi+0x145)[0x2aaad1899535]
[nid04276:26561] [ 4] /scratch/snx3000/mkrotkie/software/openmpi/4.0.2-noucx/lib/openmpi/mca_pml_ob1.so(+0xb56f)[0x2aaad1f4c56f]
[nid04276:26561] [ 5] /scratch/snx3000/mkrotkie/software/openmpi/4.0.2-noucx/lib/openmpi/mca_pml_ob1.so(mca_pml_ob1_isend+0x4bf)[0x2aaad1f4d19f]
"""
# source: https://github.com/PaddlePaddle/PaddleSeg/issues/939 (batch-42h/03): Paddle in Docker, NCCL failing with EAGAIN
PADDLE_NCCL_SHM_ADVICE = """\
CUDA_VISIBLE_DEVICES=0,1 python -u -m paddle.distributed.launch train.py --config configs/mscale_ocr_cityscapes_autolabel_mapillary.yml --use_vdl --save_dir saved_model/mscale_ocr_cityscapes_autolabel_mapillary --save_interval 2000 --num_workers 2 --do_eval
OSError: (External)  Nccl error, invalid data type, detail: Resource temporarily unavailable
Please try one of the following solutions:
1. export NCCL_SHM_DISABLE=1;
2. export NCCL_P2P_LEVEL=SYS;
3. Increase shared memory by setting the -shm-size option when starting docker container, e.g., setting  -shm-size=2g.
  (at /paddle/paddle/fluid/operators/collective/broadcast_op.cu.cc:65)
  [operator < broadcast > error]
terminate called without an active exception
--------------------------------------
C++ Traceback (most recent call last):
--------------------------------------
0   paddle::framework::SignalHandle(char const*, int)
1   paddle::platform::GetCurrentTraceBackString[abi:cxx11]()
----------------------
Error Message Summary:
----------------------
FatalError: `Process abort signal` is detected by the operating system.
  [TimeInfo: *** Aborted at 1617366731 (unix time) try "date -d @1617366731" if you are using GNU date ***]
  [SignalInfo: *** SIGABRT (@0x6941) received by PID 26945 (TID 0x7fbd52c03700) from PID 26945 ***]
"""
# source: https://github.com/ModalMinds/MM-EUREKA/issues/54 (batch-42g/04): MASTER_ADDR empty in the worker's script
RAY_START_EMPTY_HEAD = """\
+ sleep 30
+ ray start --address=:6379 --num-gpus 8 --block
Local node IP: 127.0.0.1
[2025-07-23 10:05:49,679 W 51000 51000] gcs_rpc_client.h:151: Failed to connect to GCS at address :6379 within 5 seconds.
[2025-07-23 10:06:19,681 W 51000 51000] gcs_client.cc:183: Failed to get cluster ID from GCS server: TimedOut: Timed out while waiting for GCS to become available.
"""
# source: https://github.com/volcano-sh/volcano/issues/1321 (batch-42e/01): Volcano's host file handed to -H
HOROVODRUN_HOSTS_WITHOUT_SLOTS = """\
> Traceback (most recent call last):
  File "/usr/local/bin/horovodrun", line 21, in <module>
    run.run()
  File "/usr/local/lib/python3.6/dist-packages/horovod/run/run.py", line 611, in run
    raise ValueError('Invalid host input, please make sure it has '
ValueError: Invalid host input, please make sure it has format as : worker-0:2,worker-1:2.
"""

# source: https://github.com/facebookresearch/fairseq/issues/915 (batch-42h/04): fairseq-train spawning its own workers
# under torch.distributed.launch (the lines end in the shell's `\`, kept)
FAIRSEQ_SPAWNS_UNDER_LAUNCH = r"""python -m torch.distributed.launch --nproc_per_node=4 \
    --nnodes=1 --node_rank=0 --master_addr=localhost\
    --master_port=1234 \
    $(which fairseq-train) data-bin/iwslt14.tokenized.de-en \
    --lr 0.25 --clip-norm 0.1 --dropout 0.2 --max-tokens 4000 \
    --arch fconv_iwslt_de_en --save-dir checkpoints/fconv --distributed-world-size 4
| distributed init (rank 3): env://
| distributed init (rank 1): env://
| distributed init (rank 0): env://
| distributed init (rank 7): env://
| initialized host pci-SYS-4028GR-TR as rank 7
"""

def _first(text: str):
    return diagnose_text(text)[0]


def test_a_jobs_program_the_loader_cannot_start_for_a_missing_library_is_that_library_named():
    first = _first(LOADER_LACKS_LIBMPI)
    assert first.cause == "import_error" and "libmpi.so.40" in first.fix and "LD_LIBRARY_PATH" in first.fix, first


def test_an_mpi_daemon_or_the_drivers_library_missing_is_not_the_jobs_own_library():
    daemon = LOADER_LACKS_LIBMPI.replace("./build/all_reduce_perf", "/opt/openmpi/bin/orted")
    driver = LOADER_LACKS_LIBMPI.replace("libmpi.so.40", "libcuda.so.1")
    assert _first(daemon).cause != "import_error" and _first(driver).cause != "import_error"


def test_every_process_of_nccl_tests_being_rank_0_is_a_world_per_process():
    first = _first(NCCL_TESTS_EVERY_RANK_0)
    assert first.cause == "mpi_pmi_missing" and "MPI=1" in first.fix, first


def test_nccl_tests_own_table_of_ranks_0_and_1_stays_one_world_even_pasted_twice():
    # nccl_topo_file/b8-nccl-1008.log's two lines (one process driving two GPUs), as a thread pastes two runs
    table = ("#  Rank  0 Group  0 Pid 648288 on a100-4x-machines-23fsd-2-dev device  0 [0x00] NVIDIA A100 80GB PCIe\n"
             "#  Rank  1 Group  0 Pid 648288 on a100-4x-machines-23fsd-2-dev device  1 [0x00] NVIDIA A100 80GB PCIe\n")
    assert _first(table + table).cause != "mpi_pmi_missing"


def test_every_horovod_process_being_rank_0_of_size_1_is_a_world_per_process():
    first = _first(HOROVOD_EVERY_RANK_SIZE_1)
    assert first.cause == "mpi_pmi_missing" and "HOROVOD_WITH_MPI=1" in first.fix, first
    two = HOROVOD_EVERY_RANK_SIZE_1.replace("rank 0 / size 1", "rank 0 / size 2", 1).replace(
        "rank 0 / size 1", "rank 1 / size 2")
    assert _first(two).cause != "mpi_pmi_missing"


def test_open_mpi_faulting_in_its_own_copy_or_pack_of_a_buffer_is_a_gpu_buffer_it_took_for_host_memory():
    for text in (OPEN_MPI_COPIES_DEVICE_BUFFER, OPEN_MPI_PACKS_DEVICE_BUFFER):
        first = _first(text)
        assert first.cause == "mpi_gpu_support_missing" and "smcuda" in first.fix, first


def test_a_copy_faulting_under_a_programs_own_frame_stays_a_segfault():
    own = OPEN_MPI_COPIES_DEVICE_BUFFER.replace("non_overlap_copy_content_same_ddt()", "fill_halo_buffers()")
    assert _first(own).cause == "segfault"


def test_paddles_nccl_error_advising_a_larger_shm_size_is_the_containers_shared_memory():
    assert _first(PADDLE_NCCL_SHM_ADVICE).cause == "shm_too_small"


def test_an_address_with_no_host_before_its_port_is_the_empty_variable_not_the_network():
    first = _first(RAY_START_EMPTY_HEAD)
    assert first.cause == "launcher_args" and "MASTER_ADDR" in first.fix, first


@settings(max_examples=examples(60), deadline=None)
@given(st.one_of(st.ip_addresses(v=4).map(str), st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z]{2,6})?", fullmatch=True)))
def test_an_address_with_its_host_is_never_read_as_an_empty_one(host):
    named = RAY_START_EMPTY_HEAD.replace("=:6379", f"={host}:6379").replace("address :6379", f"address {host}:6379")
    assert _first(named).cause != "launcher_args"


def test_horovodrun_refusing_hosts_without_their_slots_is_the_launch_command():
    assert _first(HOROVODRUN_HOSTS_WITHOUT_SLOTS).cause == "launcher_args"


def test_a_rank_numbered_past_the_world_its_launch_declares_is_the_launch_starting_too_many():
    first = _first(FAIRSEQ_SPAWNS_UNDER_LAUNCH)
    assert first.cause == "launcher_args" and "--distributed-no-spawn" in first.fix, first


@settings(max_examples=examples(60), deadline=None)
@given(st.integers(1, 8), st.integers(1, 4), st.data())
def test_ranks_below_the_world_a_launch_declares_say_nothing_about_it(nproc, nnodes, data):
    ranks = data.draw(st.lists(st.integers(0, nproc * nnodes - 1), min_size=1, max_size=8))
    text = (f"torchrun --nproc_per_node={nproc} --nnodes={nnodes} train.py\n"
            + "".join(f"| distributed init (rank {r}): env://\n" for r in ranks))
    assert all(f.cause != "launcher_args" for f in diagnose_text(text))


def test_an_elastic_node_range_declares_its_largest_world():
    text = "torchrun --nnodes=1:2 --nproc_per_node=4 train.py\n[rank6]: RuntimeError: boom\n"
    assert all(f.cause != "launcher_args" for f in diagnose_text(text))
    assert diagnose_text(text.replace("[rank6]", "[rank8]"))[0].cause == "launcher_args"
