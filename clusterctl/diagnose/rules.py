"""The diagnosis rules: one table, one row per cause, each with a family of weighted signals.

A signal is evidence for its cause, not a verdict: `S(pattern, weight)` says "a line matching
`pattern` supports this cause with strength `weight` (0..1)". The engine combines the distinct
signals of a cause (noisy-OR, so independent evidence adds up), weighs lines of the rank that
failed first up and lines that only report a lost peer down, and ranks the causes.

- `pattern` is a regex searched case-insensitively in one log line (or a line joined with its
  wrapped continuation); named groups become values the fix can quote.
- `requires`: another regex that must match somewhere in the log; `unless`: a regex that must
  not match on the same line, `unless_log` anywhere in the log (a more specific cause owns it).
- `consequence=True` marks evidence that usually follows another rank's failure (a collective
  timeout, a peer that vanished): it is discounted when an unexplained error exists elsewhere.
- `fix` is a template: `{name}`, `{name|fallback}`, and `[...]` dropped when a value inside is
  unknown (see textmatch.render_fix). `summary` is the README's "what you see" column.

Exit-code semantics live here too, as signals: -9/137/SIGKILL support killed_by_signal (and
oom_killed only weakly: a SIGKILL is the OOM killer's tool, but also an operator's, a scheduler's or
a preempting cloud's; oom_killed leads only with a record of the OOM kill: the kernel's `Out of
memory: Killed process`, `oom-kill:`, a cgroup's oom_kill events, `OOMKilled: true`), -11/139/SIGSEGV
segfault, SIGBUS shared memory, -6/134/SIGABRT (a C++ abort, often NCCL's watchdog) weakly a timeout.
Signals describe a failure class (a message family across versions), not one log's wording: docs/diagnosis.md.
"""
from __future__ import annotations

from dataclasses import replace

from clusterctl.diagnose.textmatch import (CASCADE_PATTERNS, CONTEXT_PATTERNS, PEER_LOST_PATTERNS, SUSPICIOUS,
                                           UNKNOWN_FIX, compiled, render_fix, required_literals, template_values)
from clusterctl.diagnose import fixes as F
from clusterctl.diagnose.signals import Rule, S, Signal
from clusterctl.diagnose.rules_setup import (ENROOT_HOOK, MPI_GPU_UNSUPPORTED, RSH_AGENT_MISSING, SETUP_RULES,
                                              SLURM_REFUSED, MPI_HOST_COPY_OF_DEVICE)
from clusterctl.diagnose.rules_code import CODE_RULES, LAUNCHER_DAEMON_CRASH
from clusterctl.diagnose.rules_topology import TOPOLOGY_RULES
from clusterctl.diagnose.rules_addresses import CONNECT_FAILED, NCCL_NOT_ROUTING, NOT_ROUTED, OFF_HOST_UNROUTED
from clusterctl.diagnose.rules_words import (EXIT_137, EXIT_MINUS_9, HOST_MEMORY_SHORT,  # noqa: F401
                                             KILL_EXPLAINED, NESTED_LAUNCH, OOM_RECORD, OTHER_WORDS,
                                             PORT_TAKEN, SHELL_KILLED, SIGKILL_BY_LAUNCHER, SIGNAL_9, STEP_TASK_FAILED)

__all__ = ["Signal", "Rule", "RULES", "CAUSES", "RULE_OF", "UNKNOWN_FIX", "CASCADE_PATTERNS", "PEER_LOST_PATTERNS",
           "SUSPICIOUS", "CONTEXT_PATTERNS", "render_fix", "template_values", "required_literals"]

# Ray's notice for a worker that vanished lists the OOM killer's SIGKILL first, then `ray stop --force`, SIGSEGV:
# a kill, not a segfault; the OOM killer leads (its first cause, and what its threads found: batch 17).
RAY_WORKER_DIED = (r"Worker unexpectedly exits with a connection error code \d+"
                   r"|A worker died or was killed while executing a task by an unexpected system error")
RAY_POSSIBLE_CAUSES = r"potential root causes|due to SIGSEGV or other unexpected errors"
# Python multiprocessing's semaphores live in /dev/shm: ENOSPC while creating one is a full /dev/shm.
# NCCL's own report of a failed CUDA call or transport setup (a WARN line) anywhere in the log
NCCL_FAILED = r"NCCL WARN (?:Cuda failure|Call to \w+ failed|\w+ failed|.{0,40}\bfailed\b)"
SEMLOCK = r"_multiprocessing\.SemLock|SemLock\("
GLIBC_TOO_OLD = r"version `?(?P<symbol>(?:GLIBC|GLIBCXX|CXXABI)_[\d.]+)'? not found"
NOT_SHM = r"/dev/shm|\bshm|NCCL|fallocate|torch_\d+|shared memory"
NAME_UNRESOLVED = r"gai error|Name or service not known|Temporary failure in name resolution|nodename nor servname"
PRIVILEGED_PORT = r"(?:master[-_]port|MASTER_PORT)[= ]+(?:\$RANDOM\b|[0-9]{1,3}\b)"

# CUDA 35: the runtime found no driver new enough, or none at all (no libcuda: a container without the GPU runtime)
INSUFFICIENT_DRIVER = r"CUDA driver version is insufficient for CUDA runtime version|cudaErrorInsufficientDriver"

RULES: tuple[Rule, ...] = (
    Rule("oom_killed", "dmesg `Out of memory: Killed process`, `oom-kill event(s)`, `OOMKilled` (a record of the kill)",
         F.OOM_KILLED, (
             S(r"Out of memory: Kill(?:ed)? process|invoked oom-killer|\boom-kill:|Memory cgroup out of memory", .97),
             S(r"\bOOMKilled\b|Reason:\s+OOMKilled|OOMKilled=true|\"OOMKilled\": true", .95),
             S(r"oom[-_ ]kill(?:ed)? events?|oom_kill event|task \d+: Out Of Memory"
               r"|killed by the cgroup out-of-memory", .95),
             S(r"killed due to (?:the node running low on memory|memory pressure)"
               r"|exceeds the memory usage threshold", .95),
             S(r"Workers? \(tasks / actors\) killed due to memory pressure", .95),
             # a SIGKILL alone: the OOM killer is one possible sender, named after killed_by_signal
             S(f"{EXIT_MINUS_9}|{EXIT_137}|{SIGNAL_9}|{SHELL_KILLED}", .3, unless=SIGKILL_BY_LAUNCHER),
             S(r"CPU memory usage: \d{5,}", .3),
             S(RAY_WORKER_DIED, .5, unless_log=OOM_RECORD),
             # torch's own host allocator refused (no kill yet): the host short of memory, in its words
             S(r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)", .75, fix=F.HOST_MEMORY_SHORT),
         )),
    Rule("killed_by_signal",
         "`Signal 9 (SIGKILL)`, exitcode -9 / 137, `Killed`, Slurm `CANCELLED AT ... DUE TO TIME LIMIT` "
         "(no OOM record)",
         F.KILLED_BY_SIGNAL, (
             S(EXIT_MINUS_9, .62, unless=SIGKILL_BY_LAUNCHER, unless_log=KILL_EXPLAINED),
             S(EXIT_137, .6, unless_log=KILL_EXPLAINED),
             S(f"(?:{SIGNAL_9})(?: received by PID (?P<pid>\\d+))?", .58, unless=SIGKILL_BY_LAUNCHER,
               unless_log=KILL_EXPLAINED),
             S(SHELL_KILLED, .6, unless_log=KILL_EXPLAINED),
             # (with the host short of memory, families.py weighs the SIGKILL: the OOM killer first, this next)
             S(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO (?P<reason>TIME LIMIT|PREEMPTION"
               r"|JOB REQUEUE)", .93),
             S(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT", .8, unless_log=rf"{OOM_RECORD}|{STEP_TASK_FAILED}"),
             S(r"this job is preempted|was preempted|\bpreemption notice"
               r"|Spot Instance (?:interruption|terminated)", .8),
             S(r"srun: forcing job termination|Job step aborted: Waiting up to \d+ seconds", .45),
             S(RAY_WORKER_DIED, .3, unless_log=OOM_RECORD),
         )),
    Rule("cuda_oom", "`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...`",
         F.CUDA_OOM, (
             S(r"CUDA out of memory|OutOfMemoryError: CUDA|HIP out of memory", .96),
             S(r"CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED"
               r"|out of memory on device", .9),
             S(r"Tried to allocate [\d.]+ [GMK]iB", .85),
             S(r"CUDA error: out of memory|Cuda failure 'out of memory'", .93),
             S(r"GPU \d+ has a total capac\w* of", .8),
         )),
    Rule("shm_too_small",
         "`NCCL WARN ... No space left on device` on `/dev/shm`, DataLoader `Bus error`, 64 MiB `/dev/shm`",
         F.SHM, (
             # a record of a small /dev/shm (Ray's object store warning, df, docker inspect)
             S(r"/dev/shm (?:has only|is only|size is|of) \d+ ?(?:bytes|[KM]i?B)", .7),
             S(r"posix_fallocate failed\s*:\s*No space left|failed to extend /dev/shm\S*"
               r"|/dev/shm\S*.*No space left", .95),
             S(r"insufficient shared memory \(shm\)|out of shared memory|raise your shared memory limit", .92),
             S(r"unable to (?:write to file|allocate shared memory\(shm\) for file) </torch_", .9),
             S(r"Error while creating shared memory segment|ncclShmOpen", .7, unless=r"Permission denied"),
             S(r"(?:NCCL|shm|shared memory).*No space left on device|No space left on device.*(?:NCCL|shm)", .85),
             # UCX's shared-memory transport failing to allocate: it falls back to the heap and segfaults (ucx#11683)
             S(r"mm_iface failed to allocate receive FIFO|failed to allocate \d+ bytes with mm for", .92),
             S(r"killed by signal: Bus error|Bus error \(core dumped\)|Signal 7 \(SIGBUS\)|exitcode\s*:\s*-7\b", .75),
             S(r"DataLoader worker \(pid\(?s?\)? ?[\d, ]+\) exited unexpectedly", .45),
             S(r"unhandled system error|ncclSystemError", .2),
             S(r"No space left on device|\[Errno 28\]", .85, requires=SEMLOCK),
         )),
    Rule("shm_permission", "`shm_open failed : Permission denied`, `/dev/shm` not writable",
         F.SHM_PERMISSION, (
             S(r"shm_open failed\s*:\s*Permission denied|shared memory segment.*Permission denied", .96),
             S(r"lack of access to /dev/shm|/dev/shm\S*.*(?:Permission denied|Read-only file system)", .93),
             S(r"SemLock\(|_multiprocessing\.SemLock", .3),
             S(r"(?:OSError|PermissionError): \[Errno 13\] Permission denied\s*$", .9, requires=r"SemLock"),
             S(r"unable to open shared memory object .* in read-write mode", .6),
         )),
    Rule("disk_full", "`No space left on device` writing a checkpoint or image layer, `Disk quota exceeded`",
         F.DISK_FULL, (
             S(r"No space left on device|\[Errno 28\]|ENOSPC", .8, unless=NOT_SHM, unless_log=SEMLOCK),
             S(r"failed to register layer.*no space left|ApplyLayer.*no space left", .97),
             S(r"Disk quota exceeded|EDQUOT|quota exceeded", .9),
             S(r"PytorchStreamWriter failed writing file|file write failed|unexpected pos \d+ vs \d+", .85),
             S(r"write\(\): fd \d+ failed with Input/output error", .55),
             S(r"PyTorchFileWriter|File \S+ cannot be opened", .4),
             S(r"zip_file\.write_record|_save\(obj, opened_zipfile", .45),
             S(r"DiskPressure|ephemeral-storage", .55),
         )),
    Rule("gpu_ordinal", "`CUDA error: invalid device ordinal`",
         F.GPU_ORDINAL, (
             S(r"invalid device ordinal|cudaErrorInvalidDevice\b|CUDA_ERROR_INVALID_DEVICE", .96),
             # a traceback cut off inside torch.cuda.set_device: the ordinal is the usual failure there
             S(r"torch\.cuda\.set_device\(", .3),
             # torch's older check of a device index (get_device_properties; DataParallel's device_ids)
             S(r"AssertionError: Invalid device id\b", .85),
             # more ranks than GPUs end the same way (duplicate_gpu's runner-up: a log cannot tell them apart)
             S(r"Duplicate GPU detected", .4),
         )),
    Rule("duplicate_gpu", "`Duplicate GPU detected : rank 1 and rank 0 both on CUDA device`",
         F.DUPLICATE_GPU, (
             S(r"Duplicate GPU detected : rank (?P<rank>\d+) and rank (?P<other>\d+) both on CUDA device (?P<bus>\w+"
               r")", .97),
             S(r"Duplicate GPU detected", .95),
         )),
    Rule("docker_no_gpu_runtime",
         "`could not select device driver \"\" with capabilities: [[gpu]]`, `unknown or invalid runtime name: nvidia`",
         F.DOCKER_NO_GPU_RUNTIME, (
             S(r'could not select device driver "[^"]*" with capabilities: \[\[gpu\]\]', .97),
             S(r"(?:unknown or invalid runtime name|Unknown runtime specified):? ?nvidia", .97),
             # (after batch 39) a container the log shows started by plain `docker run`, with no GPU request, whose CUDA
             # then finds no driver: the runtime never mounted libcuda into it (the driver itself is not too old)
             S(rf"{INSUFFICIENT_DRIVER}|no CUDA-capable device is detected|Found no NVIDIA driver on your system", .97,
               requires=r"\bdocker run\b", unless_log=r"--gpus|--runtime[= ]nvidia|nvidia-docker|nvidia\.com/gpu",
               fix=F.CONTAINER_WITHOUT_GPUS),
             S(r"nvidia-container-cli: (?:initialization error|mount error|detection error)", .9,
               unless=r"stat failed: /dev/nvidia", unless_log=ENROOT_HOOK),
             S(r"libnvidia-ml\.so\.1: cannot open shared object file|load library failed: libnvidia-ml", .85),
             S(r"nvidia-container-runtime(?:-hook)?\S*: (?:no such file|not found|executable file not found)", .85),
             # the process sees no GPU at all: a container started without the NVIDIA runtime / --gpus
             S(r"No CUDA GPUs are available|Found no NVIDIA driver on your system|no CUDA-capable device is detected"
               r"|CUDA driver initialization failed", .6, fix=F.NO_GPU_VISIBLE),
         )),
    Rule("container_lost_gpu", "`Failed to initialize NVML: Unknown Error` inside a running container",
         F.CONTAINER_LOST_GPU, (
             S(r"Failed to initialize NVML: Unknown Error", .9),
             S(r"devices\.list|c 195:\* m\b", .5),
             S(r"daemon-reload", .4, requires=r"NVML"),
         )),
    Rule("driver_too_old", "`The NVIDIA driver on your system is too old`, `unsatisfied condition: cuda>=12.x`",
         F.DRIVER_TOO_OLD, (
             S(r"NVIDIA driver on your system is too old(?: \(found version (?P<found>\d+)\))?", .97),
             S(INSUFFICIENT_DRIVER, .96),
             S(r"requirement error: unsatisfied condition: cuda\s*>="
               r"|please update your driver to a newer version", .96),
             S(r"forward compatibility was attempted on non supported HW|CUDA_ERROR_COMPAT_NOT_SUPPORTED", .85),
         )),
    Rule("fabricmanager", "`CUDA error: system not yet initialized` (802) on NVSwitch systems, fabric manager down",
         F.FABRICMANAGER, (
             S(r"system not yet initialized|cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY", .95),
             S(r"(?:cuda runtime )?error \(?802\)?", .6, requires=r"not yet initialized|fabric|NVSwitch"),
             S(r"\b(?:err|error|failure)\s*[:=]?\s*\(?802\)?(?:\s|$|\W)", .8, requires=r"cuda"),
             S(r"nv-fabricmanager|nvidia-fabricmanager|fabric ?manager", .55),
             S(r"NV_WARN_NOTHING_TO_DO|NVSwitch driver failed", .85),
             S(r"fabric manager .*version \S+ (?:don'?t|doesn'?t"
               r"|does not) match.*driver version (?P<driver>\d+(?:\.\d+)+)", .95),
             S(r"Fabric\s*State\s*:\s*(?:In Progress|Not Started|Failure)", .85),
             # NVLink SHARP (NVLS) buffers live in the NVSwitch fabric the fabric manager programs
             S(r"transport/nvls\.cc:\d+ NCCL WARN Cuda failure|nvlsAllocateMem|NVLS (?:alloc|setup|init)\w* fail", .7,
               fix=F.NVLS),
             S(r"nvidia-fabricmanager\.service failed|nvidia-fabricmanager\.service: (?:Failed|Main process exited"
               r"|Control process exited)", .85),
         )),
    Rule("gpu_xid", "`NVRM: Xid (PCI:...): 79, GPU has fallen off the bus` (48/63/74/79/94/95...)",
         F.GPU_XID, (
             S(r"NVRM: Xid \(PCI:[^)]*\): (?P<xid>\d+)", .92),
             S(r"fallen off the bus|has fallen off", .96),
             S(r"RmInitAdapter failed|rm_init_adapter failed|Cannot attach gpu", .85),
             S(r"GSP Timeout|_kgspLogXid|Timeout after \d+s of waiting for RPC response from GPU", .85),
             S(r"Unable to determine the device handle for GPU|GPU is lost|GPU_IS_LOST|XidCriticalError|Xid \d+", .8),
             S(r"uncorrectable NVLink error|NVLink.*(?:fatal|error detected)", .75),
             S(r"PCIe Bus Error|AER: (?:Uncorrected|Corrected) error", .45),
         )),
    Rule("ecc_error", "`CUDA error: uncorrectable ECC error encountered`, retired pages pending",
         F.ECC_ERROR, (
             S(r"uncorrectable ECC error|ECC_UNCORRECTABLE|cudaErrorECCUncorrectable", .96),
             S(r"double bit ECC|\bDBE\b|Contained ECC error|Uncontained ECC error", .6),
             S(r"(?:Retired Pages|Remapped Rows).*Pending\s*:\s*Yes|Remapping Failure Occurred\s*:\s*Yes", .8),
             S(r"Volatile[\s\S]{0,80}?(?:Double Bit|DRAM Uncorrectable|SRAM Uncorrectable)\s*:\s*[1-9]", .7),
         )),
    Rule("image_pull_failed", "`ErrImagePull` / `ImagePullBackOff`, `pull access denied`, `manifest unknown`",
         F.IMAGE_PULL, (
             S(r"ErrImagePull|ImagePullBackOff|Back-off pulling image|trying and failing to pull image", .95),
             S(r"Failed to pull image|pull access denied|repository does not exist"
               r"|requested access to the resource is denied", .93),
             S(r"manifest (?:unknown|for \S+ not found)|Error reading manifest|name unknown", .85),
             S(r"toomanyrequests|You have reached your pull rate limit", .92),
             S(r"x509: certificate signed by unknown authority|server gave HTTP response to HTTPS client", .75,
               fix=F.REGISTRY_TLS),
             S(r"Unable to find image '[^']+' locally|Error: No such image", .5),
             S(r"unauthorized: authentication required|no basic auth credentials", .85),
         )),
    Rule("import_error",
         "`ModuleNotFoundError: No module named ...`, "
         "`ImportError: ... undefined symbol` (module missing or different on a node)",
         F.IMPORT_ERROR, (
             # a warning that names a missing optional module (torch's "Failed to initialize NumPy")
             # is not what failed
             # (after batch 36) not a platform probe's DEBUG line (vLLM's `TPU platform is not available because: No
             # module named 'libtpu'`): only a module the job needs failing its import
             S(r"ModuleNotFoundError: No module named|No module named '?[\w.]+'?", .9,
               unless=r"Warning\b|\bnot available because|\bDEBUG\b"),
             S(r"ImportError: .*undefined symbol|undefined symbol: _Z\w+", .9, unless=r"symbol: nccl"),
             S(r"ImportError: (?:cannot import name|DLL load failed|lib\S+\.so[\d.]*: cannot open)", .88,
               unless=r"libcuda\."),  # the driver's library not there: the GPU runtime's (docker_no_gpu_runtime)
             # a library loaded by name at run time rather than imported (Paddle's dynload of libnccl.so); not NCCL's
             # optional plugins (INFO), a program's own loader (launcher_missing's), the GPU runtime's libraries
             S(r"lib[\w+-]+\.so[\d.]*: cannot open shared object file", .75,
               unless=r"libnvidia-ml|libcuda\.so|torch_extensions| INFO |Plugin load|error while loading shared"),
             # two builds of one library family loaded together (libcublas of one CUDA, libcublasLt of another)
             S(r"symbol \w+ version \S+ not defined in file \S+ with link time reference", .85),
             S(r"^ImportError:", .6, unless=GLIBC_TOO_OLD),
         )),
    Rule("library_too_old",
         "``version `GLIBCXX_3.4.30' not found``, `GLIBC_2.29`, `CXXABI_1.3.8` "
         "(a system library older than the binary)",
         F.LIBRARY_TOO_OLD, (
             S(GLIBC_TOO_OLD, .95),
             S(r"(?:libstdc\+\+|libc|libm)\.so\.6: version \S+ not found", .9),
         )),
    Rule("permission_denied", "`PermissionError: [Errno 13] Permission denied: '/data'`",
         F.PERMISSION_DENIED, (
             S(r"PermissionError: \[Errno 13\]"
               r"|\[Errno 13\] Permission denied", .85, unless_log=r"SemLock|shm_open|/dev/shm"),
             S(r"permission denied while trying to connect to the Docker daemon socket", .95, fix=F.DOCKER_SOCKET),
             S(r"open\([^)]*\): Permission denied|: Permission denied\b", .6,
               unless=r"shm_open|/dev/shm|Permission denied \(|please try again"),  # ssh's own (ssh_failed)
             S(r"RuntimeError: Permission denied|Operation not permitted|\bEACCES\b", .45),
         )),
    Rule("launcher_args",
         "`error: unrecognized arguments: --local-rank=0`, `torchrun: error: ...`, a port the user cannot bind",
         F.LAUNCHER_ARGS, (
             S(r"unrecognized arguments: [-–]+local[-_]rank|Override 'local-rank' not found", .96),
             S(r"error: unrecognized arguments: (?P<args>.+)"
               r"|error: the following arguments are required: (?P<args2>.+)", .88),
             S(r"torchrun: error: (?P<args>.+)|launch\.py: error:", .88),
             S(r"--master[-_]port[= ]0\b|environment variable (?P<args>\w+) expected, but not set", .85),
             S(r"Permission denied", .9, requires=PRIVILEGED_PORT),
             S(PRIVILEGED_PORT, .35),
             # the launcher's own host list is wrong or missing (DeepSpeed's hostfile, mpirun's slots)
             S(r"Unable to find hostfile|proceed with training with local resources only", .7),
             S(r"not enough slots available in the system", .7, fix=F.MPI_SLOTS),
         )),
    Rule("launcher_missing",
         "`bash: orted: command not found`, `mpirun: command not found`, `mpirun is not installed` (clusterctl's): "
         "job.launcher's program absent on a node",
         F.LAUNCHER_MISSING, (
             S(r"\b(?:mpirun|orted) is not installed", .93),
             S(r"\b(?:orted|orterun|prted|mpirun|mpiexec)(?:\.openmpi)?: (?:command )?not found", .9),
             # (after batch 39) Open MPI's launch agent (ssh, else rsh) absent: an image without an SSH client
             S(RSH_AGENT_MISSING, .9, fix=F.MPI_RSH_AGENT),
             S(r"A daemon \(pid \d+\) died unexpectedly with status 127", .7),
         )),
    Rule("sighup_session_closed",
         "`Received 1 death signal, shutting down workers` / `got signal: 1` when the SSH session closes",
         F.SIGHUP, (
             S(r"got signal: 1\b|Received (?:1|Signals\.SIGHUP) death signal", .93),
             S(r"closing signal SIGHUP|SignalException.*SIGHUP|\bSIGHUP\b", .85),
         )),
    Rule("port_in_use", "`Address already in use` (errno 98) on the rendezvous port",
         F.PORT_IN_USE, (
             S(r"failed to bind to \S*:(?P<port>\d+) \(errno: 98|port: (?P<port2>\d+), useIpv6: \S+ code: -98", .96,
               unless_log=NESTED_LAUNCH),
             S(PORT_TAKEN, .93, unless_log=NESTED_LAUNCH),
             # under a nested launch the port is taken by the job's own inner launcher: launcher_args leads
             S(PORT_TAKEN, .5, requires=NESTED_LAUNCH),
         )),
    Rule("hostname_unresolvable",
         "`The IPv6 network addresses of (None, 29500) cannot be retrieved`, `Name or service not known`",
         F.HOSTNAME, (
             S(r"network addresses of \((?P<addr>None), (?P<port>\d+)\) cannot be retrieved", .92),
             S(r"network addresses of \((?P<addr>(?!localhost,)[^,]+), (?P<port>\d+)\) cannot be retrieved", .7),
             S(r"network addresses of \(localhost, \d+\) cannot be retrieved", .3),
             S(r"gaierror|Name or service not known|Temporary failure in name resolution|nodename nor servname", .8,
               unless=r"IPv6 network addresses of|resolve hostname [\w.-]+:\d+\b"),  # host:slots: launcher_args
             S(r"[Cc]ould not resolve (?:host|hostname)|getaddrinfo\S* failed|Unknown host", .75,
               unless=r"resolve hostname [\w.-]+:\d+\b"),
         )),
    Rule("rdzv_unreachable",
         "workers time out or are refused on `MASTER:29500` (`client socket has timed out`, "
         "`RendezvousConnectionError`)",
         F.RDZV, (
             S(r"client socket has timed out after \S+ while trying to connect to \(?(?P<addr>[^,\s)]+)(?:, "
               r"|:)(?P<port>\d+)", .9, unless=OFF_HOST_UNROUTED),  # an address no peer routes to: nic_mismatch
             # ...unless the reason it gives is a name that does not resolve or an invalid address (hostname's)
             S(r"client socket has failed to connect to (?:any network address of )?\(?\[?(?P<addr>[^\]\s,)]+)", .82,
               unless=rf"system error: 100\d\d|errno: 22 - Invalid argument|{NAME_UNRESOLVED}"),
             S(r"RendezvousConnectionError|connection to the C10d store has failed|RendezvousTimeoutError", .85,
               unless=NAME_UNRESOLVED),
             S(r"connect\(\) timed out|DistStoreError: .*(?:Timed out|timeout)|Socket Timeout", .6),
             S(r"Timed out initializing process group in store based barrier", .5),
             S(r"No route to host|Network is unreachable", .45, unless=r"NCCL|socket\.c"),
             S(r"Connection refused", .35, unless=r"NCCL|socket\.c"),
         )),
    Rule("nic_mismatch", "NCCL/Gloo on `docker0` or `lo`, hostname on 127.0.1.1, `no socket interface found`",
         F.NIC_MISMATCH, (
             S(r"no (?:NCCL_SOCKET_IFNAME )?socket interface found|Bootstrap : no socket interface", .95),
             S(r"ncclSocketInit: connecting to address .*is neither AF_INET"
               r"|Unable to find address for: (?P<iface>[^\s.]+)", .93),
             S(r"Using the loopback\s+address as fallback|remote=\[127\.0\.[01]\.1\]|local=\[127\.0\.[01]\.1\]", .85),
             S(r"Connect to 127\.0\.[01]\.1<\d+> failed|connect \[127\.0\.[01]\.1\]:\d+", .85),
             # gloo's own "no such interface" (GLOO_SOCKET_IFNAME or the hostname names nothing on this node)
             S(r"gloo/transport/tcp/device\.cc:\d+\] (?:ifa|rp) != nullptr", .9),
             # NCCL's connect failing with ENETUNREACH: this node has no route to the address the peer published
             # (an interface the nodes do not share), not a peer that refused or timed out
             S(r"Connect to \S+ failed ?: ?Network is unreachable", .75),
             S(r"(?:Bootstrap|NET/Socket) : Using (?:\[\d+\])?(?P<iface>docker\d*|lo|virbr\d*|veth\w*"
               r"|br-\w+)[:\s]", .6),
             S(r"Using \[\d+\][\w.-]+:[\d.]+<\d+> \[\d+\](?:veth|docker|virbr)\w*:", .7),
             S(r"Socket creation failed : Address family not supported", .7),
             S(r"NCCL_SOCKET_IFNAME[:=]\s*=", .5),
             # gloo's full mesh of its ranks not connecting: on a multi-NIC node the address it chose (GLOO_SOCKET_IFNAME)
             S(r"Gloo connectFullMesh failed", .6),
             # (after batch 39) Ray asked for a placement on `node:ADDR`, an address no Ray node has: the driver took
             # another interface's address than the one Ray registered the node under (vLLM's get_ip())
             S(r"No available node types can fulfill resource request \{'node:", .7, fix=F.RAY_NODE_ADDRESS),
         )),
    Rule("nccl_socket_error",
         "NCCL `unhandled system error` with socket evidence: `socketStartConnect: Connect to ... failed`, "
         "`No route to host`",
         F.NCCL_SOCKET, (
             S(r"socket(?:Start|Poll)?Connect: Connect to \S+ (?:failed|returned)|NET/Socket : Connect to", .85,
               unless=NOT_ROUTED),
             S(r"(?:NCCL )?WARN (?:Net : )?Connect to \S+ failed : (?:No route|Connection refused"
               r"|Connection timed out)", .85, unless=NOT_ROUTED),
             S(CONNECT_FAILED, .8, unless_log=NCCL_NOT_ROUTING),  # else weaker (rules_words)
             S(r"Software caused connection abort", .6),
             S(r"unhandled system error|ncclSystemError", .25),
             S(r"unhandled system error", .35, requires=r"NET/Socket|Using network Socket|socket\.c"),
             S(r"socketProgress: Connection closed by remote peer|Socket recv failed", .3, consequence=True),
         )),
    Rule("ib_config",
         "NCCL `unhandled system error` with InfiniBand/RoCE evidence: `NET/IB : Got completion ... error 12`, "
         "`ibv_create_qp failed`",
         F.IB_CONFIG, (
             S(r"NET/IBP? ?: ?Got completion (?:from peer \S+ )?with (?:error |status=)(?P<status>\d+)", .93),
             S(r"[Tt]ransport retry count(?:er)? exceeded", .9),
             # an RDMA completion with an error status in other libraries' words (HCCL's RoCE CQE, verbs' enums)
             S(r"\berror[ _]cqe\b|\bCQE\b.{0,40}\berror|IBV_WC_(?!SUCCESS)[A-Z_]+_ERR", .8),
             S(r"(?:Call to )?ibv_\w+(?:\(\))? failed|NET/IB : (?:\S+ )?(?:Got async event|async fatal event)", .85),
             S(r"NET/IB : Unable to open device", .6),
             # NCCL looked for an HCA and found none: the container lacks /dev/infiniband, or no IB stack
             S(r"NET/IB : No device found", .25),
             # ...but with an IB/RDMA plugin loaded or IB asked for, the setup expects InfiniBand
             S(r"NET/IB : No device found", .6, requires=r"P2P plugin IBext|RDMA Plugin|NCCL_IB_HCA|NCCL_NET=IB"),
             S(r"unhandled system error|ncclSystemError", .2),
             S(r"unhandled system error", .35, requires=r"NET/IB|Using network IB|ibv_"),
         )),
    Rule("nccl_too_old", "`undefined symbol: ncclCommRegister` (an older libnccl shadows torch's)",
         F.NCCL_TOO_OLD, (
             S(r"undefined(?:\s|%20)+symbol:?(?:\s|%20)*(?P<symbol>nccl\w+)", .96),
             S(r"NCCL version (?P<version>[\d.]+) is too old|requires NCCL (?:version )?>?=? ?(?P<need>[\d.]+)", .85),
             # an NCCL 1.x in use (nccl-tests' banner, NCCL's own), or a data type the loaded NCCL does not know:
             # the caller was built against newer NCCL headers than the library it runs with
             S(r"compiled with NCCL (?P<version>1\.\d+)|NCCL version (?P<old>1\.\d+[\d.]*)\b", .8),
             S(r"nccl\w+ failed: invalid data type|\bncclInvalidType\b", .75),
         )),
    Rule("version_mismatch", "NCCL `Message truncated : received N bytes instead of M`, NCCL/torch differ across nodes",
         F.VERSION_MISMATCH, (
             S(r"[Mm]essage truncated ?: ?(?:received|receiving) (?P<got>\d+) bytes instead of (?P<want>\d+)", .88),
             S(r"NCCL error: version mismatch|NCCL versions? differ|version mismatch between", .9),
             # the IB transport's form of the same truncation: the peer posted a different size
             S(r"local size \d+ remote size \d+", .85),
         )),
    Rule("platform_backend_unsupported", "`Distributed package doesn't have NCCL built in` (Windows/macOS/CPU wheel)",
         F.PLATFORM, (
             S(r"Distributed package doesn't have NCCL built in|NCCL support is not compiled"
               r"|NCCL is not available", .97),
             S(r"use_libuv was requested but PyTorch was build without libuv support", .97),
             S(r"ProcessGroupNCCL is only supported with GPUs|Backend nccl is not available", .93),
             S(r"Redirects are currently not supported in Windows or MacOs", .45),
             S(r"system error: 100(?:49|61|60)\b|WinError \d+|\bWSAE\w+", .7),
         )),
    Rule("nccl_timeout_slow_rank", "`Watchdog caught collective operation timeout` (a rank busy or gone)",
         F.NCCL_TIMEOUT, (
             S(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
               r".*?Timeout\(ms\)=(?P<timeout_ms>\d+)\) ran for (?P<ran_ms>\d+) milliseconds", .85, consequence=True),
             S(r"Watchdog caught collective operation timeout|collective operation timeout", .8, consequence=True),
             # gloo's collective timeout (the rank waited on a peer that did not come: CPU jobs, the rehearsal)
             S(r"Timed out waiting \d+ ?ms for (?:send|recv) operation to complete", .7, consequence=True),
             S(r"NCCL communicator was aborted on rank \d+|Some NCCL operations have failed or timed out", .6,
               consequence=True),
             S(r"Signal 6 \(SIGABRT\)|exitcode\s*:\s*-6\b|exit code 134\b", .25, requires=r"Watchdog|WorkNCCL|NCCL",
               consequence=True),
         )),
    Rule("rank_hang", "ranks alive but stuck: the watchdog or heartbeat monitor reports no progress",
         F.RANK_HANG, (
             S(r"watchdog (?:thread )?(?:got stuck|hang)|Heartbeat monitor timed out|heartbeat timeout", .85),
         )),
    Rule("segfault", "`Segmentation fault`, exitcode -11 / 139, `Signal 11 (SIGSEGV)`",
         F.SEGFAULT, (
             S(r"Segmentation fault|SIGSEGV|signal 11\b|Signal 11 \(SIGSEGV\)|!+ Segfault encountered !+", .88,
               unless=f"{RAY_POSSIBLE_CAUSES}|{LAUNCHER_DAEMON_CRASH}",
               unless_log=f"{NCCL_FAILED}|{MPI_GPU_UNSUPPORTED}|{RSH_AGENT_MISSING}|{MPI_HOST_COPY_OF_DEVICE}"),
             # ...after NCCL reported a failure of its own, the crash is what followed it (teardown of a failed comm)
             S(r"Segmentation fault|SIGSEGV|signal 11\b|Signal 11 \(SIGSEGV\)", .5, unless=RAY_POSSIBLE_CAUSES,
               requires=NCCL_FAILED, consequence=True),
             S(r"(?:exitcode|exit code|return code|exit status)\s*[:=]?\s*(?:-11|139)\b|\bcode 139\b", .85),
         )),
    Rule("node_unreachable", "a node stops answering mid-run (no log of its own)", F.NODE_UNREACHABLE, ()),
) + TOPOLOGY_RULES + SETUP_RULES + CODE_RULES
RULES = tuple(replace(rule, signals=rule.signals + OTHER_WORDS.get(rule.cause, ())) for rule in RULES)
RULE_OF = {rule.cause: rule for rule in RULES}
CAUSES = tuple(rule.cause for rule in RULES) + ("unknown",)
