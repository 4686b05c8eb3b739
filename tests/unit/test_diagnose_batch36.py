"""Message classes met in the misses of issue 51's batch 36 after its first score (bench/first_scores/batch-36.md):
each test names the class, with the real lines that met it and, where one was found, another thread's (their pages
in `# source` comments), or a property over the class's forms."""
from __future__ import annotations

from clusterctl_helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterctl.diagnose import diagnose_text

# source: https://github.com/hiyouga/LlamaFactory/issues/6766 (batch-36h/03): `python src/train.py` on several GPUs
LAUNCH_WITH_TORCHRUN = """\
  File "/mnt/remote-data/zby/LLaMA-Factory-main/src/llamafactory/hparams/parser.py", line 222, in get_train_args
    raise ValueError("Please launch distributed training with `llamafactory-cli` or `torchrun`.")
ValueError: Please launch distributed training with `llamafactory-cli` or `torchrun`.
"""


def test_a_program_asking_to_be_launched_by_a_launcher_is_launcher_args_not_its_own_code():
    first = diagnose_text(LAUNCH_WITH_TORCHRUN)[0]
    assert first.cause == "launcher_args", first


@settings(max_examples=examples(80), deadline=None)
@given(st.sampled_from(["Please launch", "Please start", "This script must be launched", "You need to run",
                        "Training should be started"]),
       st.sampled_from(["", " distributed training", " the job", " this script"]),
       st.sampled_from(["with", "using", "via", "through"]),
       st.sampled_from(["`torchrun`", "'deepspeed'", "`accelerate launch`", "mpirun", "`llamafactory-cli`",
                        "`python -m torch.distributed.run`"]))
def test_the_refusal_in_its_forms_names_launcher_args(verb, what, preposition, launcher):
    line = f"ValueError: {verb}{what} {preposition} {launcher}."
    assert diagnose_text(line)[0].cause == "launcher_args", line


# source: https://github.com/vllm-project/vllm/issues/15853 (another thread than batch-36j/02's): vLLM's platform
# probe at DEBUG level, then nothing failing
PLATFORM_PROBES = """\
DEBUG 04-01 20:02:09 [__init__.py:35] Checking if TPU platform is available.
DEBUG 04-01 20:02:09 [__init__.py:45] TPU platform is not available because: No module named 'libtpu'
DEBUG 04-01 20:02:09 [__init__.py:53] Checking if CUDA platform is available.
DEBUG 04-01 20:02:09 [__init__.py:73] Confirmed CUDA platform is available.
DEBUG 04-01 20:02:09 [__init__.py:115] ROCm platform is not available because: No module named 'amdsmi'
DEBUG 04-01 20:02:09 [__init__.py:151] XPU platform is not available because: No module named 'intel_extension_for_pytorch'
"""


def test_a_platform_probes_missing_module_at_debug_level_is_no_import_error():
    assert "import_error" not in [f.cause for f in diagnose_text(PLATFORM_PROBES)]


def test_a_module_the_job_needs_is_still_an_import_error():
    assert diagnose_text("ModuleNotFoundError: No module named 'flash_attn'")[0].cause == "import_error"


# source: https://github.com/open-mpi/ompi-release/pull/921 (a comment; another thread than batch-36f/06's
# openucx/ucx#551): Open MPI's oob/ud asking verbs for a completion queue larger than the device allows
COMPLETION_QUEUE_REFUSED = """\
Failed to create a completion queue (CQ):

Hostname: mpi2
Requested CQE: 16384
Error:    Cannot allocate memory

Check the CQE attribute.
"""


def test_a_completion_queue_the_device_refuses_is_rdma_resources_not_host_memory():
    first = diagnose_text(COMPLETION_QUEUE_REFUSED)[0]
    assert first.cause == "ib_config", first
    assert "locked-memory limit" in first.fix and "not host RAM" in first.fix


# source: https://github.com/pytorch/pytorch/issues/150852 (another thread than batch-36g/05's): NCCL's NVLS setup
# failing at init
NVLS_SETUP_FAILED = """\
[2025-04-08 08:39:46] devgpu263:589012:591652 [0] transport/nvls.cc:254 NCCL WARN Cuda failure 1 'invalid argument'
devgpu263:589012:591652 [0] NCCL INFO transport/nvls.cc:409 -> 1
devgpu263:589012:591652 [0] NCCL INFO init.cc:1141 -> 1
devgpu263:589012:591652 [0] NCCL INFO init.cc:1409 -> 1
devgpu263:589012:591652 [0] NCCL INFO group.cc:75 -> 1 [Async thread]
"""


def test_nvls_failing_to_set_up_keeps_the_fabric_and_says_how_to_train_without_it():
    first = diagnose_text(NVLS_SETUP_FAILED)[0]
    assert first.cause == "fabricmanager", first
    assert "NCCL_NVLS_ENABLE=0" in first.fix, first.fix


# source: https://github.com/jtriley/StarCluster/issues/533 (an Open MPI mpirun starting an MPICH2-built program)
HELLO_SINGLETONS = """\
mpirun -np 2 -host master,node001 b
Hello world from master running process 0 of 1
Hello world from node001 running process 0 of 1
"""
# source: https://github.com/pmodels/mpich/issues/712 (MPICH's cpi example, each process its own world)
CPI_SINGLETONS = """\
process id 0 is master
pi is approximately 3.1416009869231254, Error is 0.0000083333333323
Process 0 on myhost and world size is 1
process id 0 is master
Process 0 on myhost and world size is 1
"""
# source: https://github.com/flux-framework/flux-core/issues/5375 (batch-35b/02: Cray MPICH under Flux, no PMI)
FLUX_SINGLETONS = """\
0.815s: flux-shell[0]: DEBUG: 0: tasks [0-15] on cores 48-63
MPI initialized with 1 MPI processes
MPI initialized with 1 MPI processes
MPI initialized with 1 MPI processes
"""


def test_processes_that_each_say_they_are_rank_0_of_1_are_an_mpi_launch_their_library_cannot_read():
    for log in (HELLO_SINGLETONS, CPI_SINGLETONS, FLUX_SINGLETONS):
        first = diagnose_text(log)[0]
        assert first.cause == "mpi_pmi_missing", (log, first)
        assert "each rank 0 of 1" in first.fix and "mpirun" in first.fix


def test_one_process_saying_it_is_alone_is_a_one_process_run_not_a_launch_fault():
    findings = diagnose_text(HELLO_SINGLETONS.splitlines(keepends=True)[1])
    assert all(f.cause != "mpi_pmi_missing" for f in findings), findings
