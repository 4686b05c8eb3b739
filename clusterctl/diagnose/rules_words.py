"""Known causes in other programs' words: the same message families as rules.py's rows, as Open MPI, Ray,
vLLM, DeepSpeed, DDP, XLA, NCCL's allocator and the shells print them (issue 51: the first scores missed
logs whose wording no rule expected). rules.py adds each cause's signals here to its own row.

Same form as rules.py (see its docstring). Every signal names a class of message, with a public source in
tests/unit/test_diagnose_setup.py.
"""
from __future__ import annotations

from clusterctl.diagnose.signals import S

LAUNCHERS = r"torchrun|deepspeed|accelerate|horovodrun|pdsh|srun|ray|mpirun|mpiexec"

OTHER_WORDS = {
    "cuda_oom": (
        # XLA's (JAX, TF, torch-xla) accelerator allocator; NCCL's own allocations
        S(r"RESOURCE_EXHAUSTED: Out of memory (?:while trying to allocate|allocating)"
          r"|XlaRuntimeError: RESOURCE_EXHAUSTED: .{0,40}\bmemory", .88),
        S(r"Failed to CUDA (?:calloc|malloc|host alloc)(?: async)? \d+ bytes", .8),
    ),
    "duplicate_gpu": (
        # a GPU another process holds (exclusive-process compute mode): a stale rank or two ranks on one GPU
        S(r"CUDA-capable device\(s\) is/are busy or unavailable|cudaErrorDevicesUnavailable"
          r"|CUDA_ERROR_DEVICE_UNAVAILABLE", .75),
    ),
    "gpu_ordinal": (
        # torch's lazy-init assert on a device index beyond the GPUs it sees
        S(r"device >= 0 && device < num_gpus INTERNAL ASSERT FAILED", .9),
    ),
    "launcher_missing": (
        # any launcher's program missing from PATH, in bash's or sh's words
        S(rf"\b(?:{LAUNCHERS}): (?:command )?not found", .85),
    ),
    "insufficient_resources": (
        # Ray's and vLLM's placement: the cluster has fewer free GPUs than the job asks for
        S(r"number of required GPUs exceeds the total number of available GPUs"
          r"|resource request cannot be scheduled right now|cannot be scheduled right now\. It requires \{", .8),
    ),
    "config_divisibility": (
        # DeepSpeed's batch check: the global batch must be micro batch x accumulation x world size
        S(r"train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size", .8),
    ),
    "collective_mismatch": (
        # DDP's check that every rank built the same model (params or their shapes differ across ranks)
        S(r"DDP expects same model across all ranks|appears not to match (?:sizes|strides) of the same param in "
          r"process \d+", .75),
    ),
    "nccl_socket_error": (
        # Open MPI's TCP transport refused between the nodes (its own hint: a firewall)
        S(r"unable to complete a TCP connection\s*(?:to another process)?", .75),
    ),
}
