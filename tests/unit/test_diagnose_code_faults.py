"""job_code_error and library_bug (issue 51, before batch 34): the job's own code failing, and a library stating its
own bug, are named as causes rather than `unknown`. The lines are real public logs, each with its page; they come from
earlier first-scored batches, where their labels were `other:` names outside the vocabulary."""
import pytest

from clusterctl.diagnose import diagnose_text
from clusterctl.diagnose.rules_code import code_fault_of
from clusterctl.node import heal_policy

JOB_CODE = [
    # https://github.com/ByteDance-Seed/Bagel/issues/131 (a CUDA kernel indexing beyond a size on rank 1)
    "/home/pytorch/alinux3/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:93: operator(): block: [14322,0,0], "
    "thread: [123,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.\n"
    "[rank1]:[E606 15:20:10.319952852 ProcessGroupNCCL.cpp:1595] [PG ID 4 PG GUID 10 Rank 1] Process group watchdog "
    "thread terminated with exception: CUDA error: device-side assert triggered\n",
    # https://github.com/Ascend/pytorch/blob/356e12daa42681673f838fd710758fb63705035f/docs/zh/troubleshooting/
    # communication_operator_transfers_Non-contiguous_tensors.md
    "RuntimeError: Tensors must be contiguous\n",
    # https://github.com/sgl-project/sglang/pull/5322 (a CPU tensor broadcast on an NCCL-only group)
    "(TaskRunner pid=117812)     work = group.broadcast([tensor], opts)\n"
    "(TaskRunner pid=117812) RuntimeError: No backend type associated with device type cpu\n",
    # https://github.com/Lightning-AI/pytorch-lightning/issues/7088
    "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the "
    "'spawn' start method\n",
    # https://github.com/unslothai/unsloth/issues/724
    "RuntimeError: Unsloth currently does not work on multi GPU setups - sadly we are a 2 brother team so enabling it "
    "will require much more work, so we have to prioritize. Please understand!\n",
    # https://github.com/huggingface/lerobot/pull/2270 (a ValueError nothing else explains: the unknown path names it)
    "[rank0]: ValueError: You can't train a model that has been loaded with `device_map='auto'` in any distributed "
    "mode. Please rerun your script specifying `--num_processes=1` or by launching with `python {{myscript.py}}`.\n",
]


@pytest.mark.parametrize("text", JOB_CODE)
def test_the_jobs_own_fault_is_job_code_error(text):
    assert diagnose_text(text)[0].cause == "job_code_error"


def test_torchs_internal_assert_is_library_bug_unless_the_line_shows_a_missing_symbol():
    # torch's own wording (c10/util/Exception.h: TORCH_INTERNAL_ASSERT)
    bug = ('RuntimeError: !needs_dynamic_casting<func_t, nargs>::check(iter) INTERNAL ASSERT FAILED at '
           '"../aten/src/ATen/native/cpu/Loops.h":310, please report a bug to PyTorch.\n')
    assert diagnose_text(bug)[0].cause == "library_bug"
    # the same assert around an NVML call the host driver lacks is the driver's (test_diagnose_batch18 has its page)
    driver = ("RuntimeError: r.nvmlDeviceGetNvLinkRemoteDeviceType_ INTERNAL ASSERT FAILED at \"../c10/cuda/driver_api"
              ".cpp\":27, please report a bug to PyTorch. Can't find nvmlDeviceGetNvLinkRemoteDeviceType: /usr/lib/"
              "x86_64-linux-gnu/libnvidia-ml.so.1: undefined symbol: nvmlDeviceGetNvLinkRemoteDeviceType\n")
    assert diagnose_text(driver)[0].cause == "driver_too_old"


@pytest.mark.parametrize("kind, message, named", [
    ("IndexError", "list index out of range", "job_code_error"),
    ("KeyError", "'labels'", "job_code_error"),
    ("AttributeError", "'NoneType' object has no attribute 'dtype'", "job_code_error"),
    # another release than the code expects: not the code's own fault
    ("AttributeError", "module 'torch.distributed' has no attribute 'tensor'", None),
    ("ValueError", "Error initializing torch.distributed using env:// rendezvous: environment variable RANK "
                   "expected, but not set", None),
    ("RuntimeError", "anything at all", None),
    ("FileNotFoundError", "[Errno 2] No such file or directory: '/data/train.bin'", None),
])
def test_which_unexplained_exceptions_are_the_jobs_own(kind, message, named):
    assert code_fault_of(kind, message) == named


def test_a_code_fault_ends_a_run_that_heals_instead_of_moving_it_to_a_spare():
    assert heal_policy.TABLE["job_code_error"] == heal_policy.TABLE["library_bug"] == "job"
