"""Message classes met in the misses of issue 51's batch 37 after its first score (bench/first_scores/batch-37.md):
each test names the class, with the real lines that met it and, where one was found, another thread's (their pages
in `# source` comments), or a property over the class's forms."""
from __future__ import annotations

from clusterctl_helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterctl.diagnose import diagnose_text

# source: https://github.com/horovod/horovod/issues/1878 (batch-37e/05): mpirun in a container that runs as root
MPIRUN_AS_ROOT = """\
--------------------------------------------------------------------------
mpirun has detected an attempt to run as root.
Running as root is *strongly* discouraged as any mistake (e.g., in
defining TMPDIR) or bug can result in catastrophic damage to the OS
file system, leaving your system in an unusable state.

We strongly suggest that you run mpirun as a non-root user.

You can override this protection by adding the --allow-run-as-root option
"""


def test_open_mpi_refusing_root_is_launcher_args_with_the_flag_that_allows_it():
    first = diagnose_text(MPIRUN_AS_ROOT)[0]
    assert first.cause == "launcher_args", first
    assert "--allow-run-as-root" in first.fix and "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" in first.fix


@given(st.sampled_from(["mpirun", "prterun", "orterun", "mpiexec"]))
def test_the_refusal_by_each_of_open_mpis_launchers(launcher):
    line = f"{launcher} has detected an attempt to run as root.\n"
    assert diagnose_text(line)[0].cause == "launcher_args", line


# source: https://github.com/awslabs/awsome-distributed-ai/issues/647 (batch-37g/02): the locked-memory limit 65536
EFA_ENOMEM = """\
Libfabric EFA provider has encountered an internal error:

Libfabric error: (-12) Cannot allocate memory
EFA internal error: (4112) Failure to post internal receive buffers

Your application will now abort().
"""
# source: https://github.com/openucx/ucx/issues/8684 (another thread): UCX naming the limit itself
UCX_MEMLOCK = ("[1668693503.473099] [ampere:1188443:0]          ib_log.c:246  UCX  ERROR mlx5_0: ibv_create_cq() failed: "
               "Cannot allocate memory. Please set max locked memory (ulimit -l) to 'unlimited' (current: 64 kbytes)\n")


def test_a_fabric_providers_enomem_is_the_locked_memory_limit_not_host_ram():
    for log in (EFA_ENOMEM, UCX_MEMLOCK):
        first = diagnose_text(log)[0]
        assert first.cause == "ib_config", (log, first)
        assert "ulimit -l unlimited" in first.fix and "memlock=-1" in first.fix, first.fix


# source: https://github.com/ray-project/ray/issues/29940 (batch-37h/05): a TorchTrainer asking 8 GPUs of a 1-GPU node
TUNE_PENDING = """\
== Status ==
Current time: 2022-11-02 10:05:51 (running for 00:08:20.53)
Memory usage on this node: 15.5/31.2 GiB
Using FIFO scheduling algorithm.
Resources requested: 0/20 CPUs, 0/1 GPUs, 0.0/12.14 GiB heap, 0.0/6.07 GiB objects (0.0/1.0 accelerator_type:G)
Result logdir: /home/ai/ray_results/TorchTrainer_2022-11-02_09-57-30
Number of trials: 1/1 (1 PENDING)
+--------------------------+----------+-------+
| Trial name               | status   | loc   |
|--------------------------+----------+-------|
| TorchTrainer_c40be_00000 | PENDING  |       |
+--------------------------+----------+-------+
"""


def test_trials_all_pending_minutes_in_holding_nothing_are_insufficient_resources():
    assert diagnose_text(TUNE_PENDING)[0].cause == "insufficient_resources"


def test_the_first_status_of_a_tune_run_with_its_trial_still_pending_is_not():
    first_status = TUNE_PENDING.replace("running for 00:08:20.53", "running for 00:00:00.14")
    assert all(f.cause != "insufficient_resources" for f in diagnose_text(first_status))


@given(st.sampled_from(["60", "600", "3600"]))
def test_tunes_own_warning_that_no_trial_could_start(seconds):
    line = (f"WARNING insufficient_resources_manager.py:128 -- No trial is running and no new trial has been started "
            f"within the last {seconds} seconds. This could be due to the cluster not having enough resources "
            "available to start the next trial.\n")
    assert diagnose_text(line)[0].cause == "insufficient_resources", line


# source: https://github.com/NVIDIA/TensorRT-LLM/issues/1596 (batch-37h/06): an engine built with a multimodal option
TRT_SHAPE = """\
[TensorRT-LLM][WARNING] prompt_embedding_table: expected dim[1] = 4096, provided dim[1] = 1024
    main(args)
  File "/app/tensorrt-llm/examples/run.py", line 426, in main
    outputs = runner.generate(
RuntimeError: [TensorRT-LLM][ERROR] Assertion failed: Tensor 'prompt_embedding_table' has invalid shape (1, 1024), expected (-1, 4096) (/app/tensorrt-llm/cpp/tensorrt_llm/runtime/tllmRuntime.cpp:150)
"""


def test_an_engines_input_of_another_shape_than_built_for_is_the_jobs_own():
    assert diagnose_text(TRT_SHAPE)[0].cause == "job_code_error"


@settings(max_examples=examples(40), deadline=None)
@given(st.sampled_from(["input_ids", "prompt_embedding_table", "x"]),
       st.tuples(st.integers(1, 4096), st.integers(1, 4096)), st.tuples(st.integers(-1, 4096), st.integers(1, 4096)))
def test_the_shape_check_in_its_forms(name, got, expected):
    line = (f"RuntimeError: Tensor '{name}' has invalid shape ({got[0]}, {got[1]}), "
            f"expected ({expected[0]}, {expected[1]})\n")
    assert diagnose_text(line)[0].cause == "job_code_error", line
