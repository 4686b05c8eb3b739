"""Rules for failures of the code a job runs rather than of the cluster (issue 51, before batch 34: over batches
24-33, about 25 `other:` labels named one of the two; both joined the collectors' vocabulary before batch 34 froze).

- job_code_error: the job's own code or input fails on a rank and would fail alike on any healthy node (an index
  out of range, a shape, dtype or device mismatch, an unpicklable object, a collective given a tensor its backend
  cannot take). Its signals are messages only such a fault prints. Beyond them, `code_fault_of` names an exception
  that nothing else explains `job_code_error` when its type is a program's own (an IndexError, a KeyError...): the
  log then says what failed and where, which `unknown` did not.
- library_bug: a library or tool failing in its own code, a bug or regression of that release fixed by another
  one: its own words (PyTorch's `INTERNAL ASSERT FAILED ... please report a bug to PyTorch`), a C/C++ library's own
  assertion, a launcher's own daemon crashing, a CUDA call NCCL's kernel enqueue made refused for its arguments.

Same form as rules.py (see its docstring).
"""
from __future__ import annotations

import re
from typing import Optional

from clusterctl.diagnose import fixes as F
from clusterctl.diagnose.rules_words import DAEMONS
from clusterctl.diagnose.signals import Rule, S

# Exception types a program raises about itself: its indexes, keys, types, values and assertions. Not OSError and
# its kind (a file or host missing on one node is the node's), not RuntimeError (libraries raise it for anything).
CODE_EXCEPTIONS = frozenset({
    "IndexError", "KeyError", "TypeError", "AttributeError", "NameError", "UnboundLocalError", "ValueError",
    "AssertionError", "ZeroDivisionError", "NotImplementedError", "RecursionError", "SyntaxError",
    "IndentationError", "PicklingError", "UnpicklingError", "JSONDecodeError",
})
# ...except where its words are a version's, an environment's or the machine's: `module 'torch' has no attribute`
# (another release than the code expects), an environment variable a launcher should have set, a device, driver or
# toolkit that does not support what was asked (after batch 34: an AssertionError saying the GPU lacks CUDA multicast)
NOT_CODE = re.compile(r"module '[\w.]+' has no attribute|environment variable \w+ expected|env:// rendezvous"
                      r"|\b(?:device|driver|toolkit|GPU|hardware|platform)s?\b.{0,60}(?:does not|doesn't|do not|not) "
                      r"support", re.IGNORECASE)

# the MPI launchers' node daemons (rules_words.DAEMONS) and Slurm's step daemon
LAUNCHER_DAEMON_CRASH = (rf"Segmentation fault\b.{{0,200}}/(?:{DAEMONS}|slurmstepd)\b"
                         rf"|\b(?:{DAEMONS}|slurmstepd)\b.{{0,80}}(?:Segmentation fault|SIGSEGV)")

CODE_RULES = (
    Rule("job_code_error",
         "`IndexError`/`KeyError`/`TypeError` raised by the job's code, a CUDA `device-side assert triggered`, "
         "`mat1 and mat2 shapes cannot be multiplied`, `No backend type associated with device type cpu`",
         F.JOB_CODE_ERROR, (
             # a CUDA kernel's own assertion (an index beyond a size): PyTorch prints block/thread, then the assert
             S(r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion `", .8),
             S(r"device-side assert(?:ion)? triggered", .7),
             # shapes, dtypes and devices that do not fit the model
             S(r"shapes cannot be multiplied|Expected all tensors to be on the same device|expected scalar type \w+ "
               r"but found \w+|Sizes of tensors must match|must match the size of tensor \w+|size mismatch for "
               r"[\w.]+: copying a param with shape", .7),
             # a collective handed a tensor its backend cannot take
             S(r"No backend type associated with device type|Tensors must be (?:CUDA and dense|contiguous)", .7),
             # autograd used against its rules, objects that cannot cross a process boundary, CUDA before a fork
             S(r"Trying to backward through the graph a second time|has been modified by an inplace operation"
               r"|element 0 of tensors does not require grad", .7),
             S(r"Can't pickle |cannot pickle '|is not picklable|Cannot re-initialize CUDA in forked subprocess", .65),
             # a library saying the job uses it in a mode it does not take (one GPU only, no distributed mode)
             S(r"(?:does not|doesn't|cannot|can't|can not) (?:currently )?(?:work|be used|train|run)\b.{0,60}? "
               r"(?:on|in|with) (?:multi[- ]?GPU|multiple GPUs|any distributed mode|distributed (?:mode|training"
               r"|setups?))", .6),
         )),
    Rule("library_bug",
         "`INTERNAL ASSERT FAILED at ... please report a bug to PyTorch`, a library's own words that it hit its bug",
         F.LIBRARY_BUG, (
             # one signal for the two phrasings (PyTorch prints both on one line). Weak beside a cause the same
             # line shows: torch's assert around a driver call that found no symbol is the driver's, not torch's
             S(r"INTERNAL ASSERT FAILED|please report (?:a|this|it as a) bug|this is (?:likely |probably )?a bug in "
               r"(?:PyTorch|NCCL|vLLM|DeepSpeed|Megatron|the library)", .5,
               unless=r"undefined symbol|Can't find \w+|cannot open shared object"),
             # (after batch 34) a C/C++ library's own invariant failing in its source: MPICH's MPIR_Assert (`Assertion
             # failed in file src/mpid/ch4/src/init_comm.c at line 72`), glibc's assert() (`file.c:N: func: Assertion
             # `expr' failed.`, closed by a quote; a CUDA kernel's assert, closed by a backtick, is the job's index)
             S(r"Assertion failed in file \S+\.(?:c|cc|cpp|cxx|cu|h) at line \d+"
               r"|\S+\.(?:c|cc|cpp|cxx|h|hpp):\d+: [^:`]{1,200}: Assertion `[^`']{1,300}' failed", .55),
             # a launcher's own daemon crashing (Open MPI's orted/prted, MPICH's hydra proxy, slurmstepd): the
             # launcher's bug or another build of it on that node, not the job's code
             S(LAUNCHER_DAEMON_CRASH, .9),
             # (after batch 35: three logs over batches 34-35, each a NCCL release's bug fixed by another release) a
             # CUDA call inside NCCL's own kernel enqueue refused for its arguments; NVLS buffers (nvls.cc: the fabric
             # manager's) and a too small /dev/shm fail with the same words elsewhere and keep their causes
             S(r"enqueue\.cc:\d+ NCCL WARN Cuda failure (?:\d+ )?'(?:invalid argument|invalid resource handle)'", .6),
             S(r"^Cuda failure (?:\d+ )?'(?:invalid argument|invalid resource handle)'", .4,
               unless_log=r"nvls|/dev/shm|\bshm\b"),
         )),
)


def code_fault_of(exception_type: str, message: str) -> Optional[str]:
    """`job_code_error` for an exception nothing else explains whose type is a program's own, else None."""
    if exception_type in CODE_EXCEPTIONS and not NOT_CODE.search(message):
        return "job_code_error"
    return None
