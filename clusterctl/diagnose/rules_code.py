"""Rules for failures of the code a job runs, or of its configuration, rather than of the cluster (issue 51, before
batch 34: over batches 24-33, about 25 `other:` labels named job_code_error or library_bug; both joined the
collectors' vocabulary before batch 34 froze).

- config_divisibility: the job's sizes that do not divide (the seeds' Wan2.1 heads by the world size, a model's width
  by its heads, a batch over the ranks, an engine built for another world size): each shape its own fix, since what
  divides what decides what to change.
- job_code_error: the job's own code or input fails on a rank and would fail alike on any healthy node (an index
  out of range, a shape, dtype or device mismatch, an unpicklable object, a collective given a tensor its backend
  cannot take). Its signals are messages only such a fault prints. Beyond them, `code_fault_of` names an exception
  that nothing else explains `job_code_error` when its type is a program's own (an IndexError, a KeyError...): the
  log then says what failed and where, which `unknown` did not.
- library_bug: a library or tool failing in its own code, a bug or regression of that release fixed by another
  one: its own words (PyTorch's `INTERNAL ASSERT FAILED ... please report a bug to PyTorch`), a C/C++ library's own
  assertion, a launcher's own daemon crashing, a CUDA call NCCL's kernel enqueue (or a library's runtime check)
  made refused for its arguments, peer access between two GPUs enabled a second time, UCX's wireup contradicting
  itself, a host command run with an option this node's build lacks, an IPv6 endpoint written without brackets.

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

# host commands libraries run to learn the node's addresses or layout
HOST_COMMANDS = r"hostname|ip|ifconfig|nproc|lscpu|numactl|getent|ss"
# an IPv6 address written into an endpoint without its brackets (`tcp://2605:...:2190:21001`, not
# `tcp://[2605:...]:21001`): three colons or more after the scheme, which no IPv4 address or host name has
UNBRACKETED_IPV6_URL = r"\b(?:tcp|zmq|http)://[0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){3,8}\b"
# the MPI launchers' node daemons (rules_words.DAEMONS) and Slurm's step daemon
LAUNCHER_DAEMON_CRASH = (rf"Segmentation fault\b.{{0,200}}/(?:{DAEMONS}|slurmstepd)\b"
                         rf"|\b(?:{DAEMONS}|slurmstepd)\b.{{0,80}}(?:Segmentation fault|SIGSEGV)")

# a size that does not divide another, and the world or parallel sizes a line may name as one of them
DIVIDES = (r"is not divisible by|cannot be divided evenly|(?:must|should) be divisible by"
           r"|(?:is not|must be|should be) an? (?:integer |exact )?multiple of")
WORLD_SIZES = (r"world[_ ]?size|\bworld\b|(?:tensor|pipeline|sequence|context|model)[_ ]?(?:model[_ ]?)?parallel"
               r"|\b[tpm]p[_ ]?size|ulysses|\bring[_ ]?size|(?:number of |num_)(?:gpus|ranks|devices|processes|nodes)"
               r"|\bnproc")

CODE_RULES = (
    Rule("config_divisibility",
         "`ulysses_size should be equal to the world size`, `num_heads=40 cannot be divided evenly by 14`",
         F.DIVISIBILITY, (
             S(r"num_heads=(?P<heads>\d+)\W+cannot be divided evenly by\W+\S*?ulysses_size=(?P<size>\d+)", .97),
             S(r"(?:num_heads|attention heads) \((?P<heads>\d+)\) must be divisible by [\w ]+ \((?P<size>\d+)\)", .97),
             S(r"(?P<heads>\d+) is not divisible by (?P<size>\d+)|cannot be divided evenly|must be divisible by"
               r"|should be divisible by", .9, fix=F.DIVISIBILITY_EITHER),
             S(r"(?:ulysses|ring|sequence[ _]parallel)\w* ?\w* ?(?:should|must) (?:be equal to"
               r"|equal) the world size", .96),
             S(r"numerator % denominator", .5),
             # the job's own divisibility assertion as the traceback quotes it, a split that must be equal, a
             # parallel layout that does not fit the world (`np.arange(world_size).reshape(...)` failing)
             S(r"assert\s+[\w.()\[\], *+-]+%\s*[\w.()\[\], *+-]+==\s*0\b|only support equal chunk", .75,
               fix=F.DIVISIBILITY_EITHER),
             S(r"cannot reshape array of size \d+ into shape", .7, requires=r"world_size|parallel"),
             # (after batch 40) a simulation code's domain decomposition with no layout for the ranks it was given
             # (GROMACS' mdrun): the same sizes that do not fit, told in its own words
             S(r"no domain decomposition for (?P<size>\d+) (?:ranks|processes|MPI ranks)", .85,
               fix=F.DIVISIBILITY_EITHER),
             S(r"must be (?:a )?whole number|is not (?:a )?whole number|(?:must|should) be an? (?:integer |exact )?"
               r"multiple of|is not an? (?:integer |exact )?multiple of", .8, fix=F.DIVISIBILITY_EITHER),
             # (after batch 29) the runtime's world size checked against the layout a model or engine was built for
             # (TensorRT-LLM's `mpiSize == tp * pp`, `Engine world size (1) != Runtime world size (8)`; launcher_args
             # before, when one labeller had read it as the launch's fault)
             S(r"Assertion failed: (?:mpiSize|worldSize|world_size) == tp \* pp"
               r"|(?:Engine|Model|Checkpoint) world size \(\d+\) != Runtime world size \(\d+\)", .85,
               fix=F.DIVISIBILITY_BUILT_FOR),
             # DeepSpeed's batch check: the global batch must be micro batch x accumulation x world size
             S(r"train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size", .8,
               fix=F.DIVISIBILITY_BATCH),
             # a checkpoint sharded for another model-parallel size than the ranks started
             S(r"checkpoint for MP=\d+ but world size is \d+", .85, fix=F.DIVISIBILITY_BUILT_FOR),
             # a per-GPU micro batch that came out as 0: the global batch is smaller than the ranks it is split over
             S(r"[Mm]icro batch size per gpu: 0 has to be greater than 0", .85, fix=F.DIVISIBILITY_BATCH),
             # (after issue 51's real-job test) what divides what, named on the line: the model's own width by its
             # heads (transformers' `embed_dim` must be divisible by num_heads), or a world or parallel size
             S(rf"(?:embed_dim|hidden[_ ]size|n_embd|d_model|model dim\w*)\W[^\n]{{0,80}}?(?:{DIVIDES})", .93,
               unless=WORLD_SIZES, fix=F.DIVISIBILITY_MODEL),
             S(rf"(?:{WORLD_SIZES})[^\n]{{0,80}}?(?:{DIVIDES})|(?:{DIVIDES})[^\n]{{0,80}}?(?:{WORLD_SIZES})", .92),
         )),
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
             # (after batch 37) an engine's or a runtime's input check: a tensor of another shape than the one built
             # for (TensorRT-LLM's `Tensor 'x' has invalid shape (1, 1024), expected (-1, 4096)`, TensorRT's
             # `Static dimension mismatch`, ONNX Runtime's `Got invalid dimensions for input`)
             S(r"has (?:an )?invalid shape \([\d, -]*\),? expected \(|Static dimension mismatch"
               r"|Got invalid dimensions for input", .65),
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
             # (after batch 38) a library enabling peer access between two GPUs a second time (CUDA refuses the
             # repeat): its own bookkeeping, not the machine's P2P support
             S(r"PEER_ACCESS_ALREADY_ENABLED|cudaErrorPeerAccessAlreadyEnabled|peer access is already enabled", .6),
             S(r"^Cuda failure (?:\d+ )?'(?:invalid argument|invalid resource handle)'", .4,
               unless_log=r"nvls|/dev/shm|\bshm\b"),
             # (after batch 40) the same refusal through a library's own runtime check at a line of its kernel source
             # (SGLang's `Runtime check failed at .../custom_all_reduce.cuh:37: CUDA error: invalid argument`), and
             # UCX printing the endpoint configuration it found contradicting itself (wireup's `old:`/`new:` lanes)
             S(r"(?:Runtime )?check failed at \S+\.(?:cuh|cu|cc|cpp|h|hpp):\d+: CUDA error: (?:invalid argument"
               r"|invalid resource handle)", .55, unless_log=r"nvls|/dev/shm|\bshm\b"),
             S(r"wireup\.c:\d+\s+UCX\s+ERROR\s+(?:old|new): ", .6),
             # (after batch 39) a library running a host command with an option this node's build of it lacks
             # (DeepSpeed's `hostname -I` where hostname is not GNU's: macOS, inetutils): the usage error, or the
             # command's exit status for one (64 EX_USAGE, 2 GNU's)
             S(rf"^(?:{HOST_COMMANDS}): (?:invalid|unrecognized) option\b"
               rf"|Command '\[?'?(?:{HOST_COMMANDS}) [^'\n]*'\]?' returned non-zero exit status (?:64|2)\b", .6,
               fix=F.LIBRARY_HOST_COMMAND),
             # ...an IPv6 address written into an endpoint without its brackets (`tcp://2605:...:2190:21001`): the
             # library's formatting, whose last group then reads as the port
             S(UNBRACKETED_IPV6_URL, .7, fix=F.LIBRARY_IPV6_URL),
         )),
)


def code_fault_of(exception_type: str, message: str) -> Optional[str]:
    """`job_code_error` for an exception nothing else explains whose type is a program's own, else None."""
    if exception_type in CODE_EXCEPTIONS and not NOT_CODE.search(message):
        return "job_code_error"
    return None
