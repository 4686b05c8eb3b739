"""Known causes in other programs' words: the same message families as rules.py's rows, as Open MPI, Ray,
vLLM, DeepSpeed, DDP, XLA, NCCL's allocator and the shells print them (issue 51: the first scores missed
logs whose wording no rule expected). rules.py adds each cause's signals here to its own row.

Same form as rules.py (see its docstring). Every signal names a class of message, with a public source in
tests/unit/test_diagnose_setup.py or test_diagnose_batches1011.py.
"""
from __future__ import annotations

from clusterctl.diagnose import fixes as F
from clusterctl.diagnose.signals import S
from clusterctl.diagnose.rules_addresses import (BRIDGE_CONTAINER, BRIDGE_GATEWAY, CONNECT_FAILED,
                                                  CONTAINER_BRIDGE_NCCL, CONTAINER_ID_HOST_NCCL, LINK_LOCAL,
                                                  NET_FAILED, OFF_HOST_UNROUTED)

LAUNCHERS = r"torchrun|deepspeed|accelerate|horovodrun|pdsh|srun|ray|mpirun|mpiexec"
# the daemons an MPI launcher starts on each node over ssh (Open MPI's orted / PRRTE's prted, MPICH's hydra proxy)
DAEMONS = r"orted|orterun|prted|prterun|hydra_pmi_proxy|pmi_proxy"

# a launcher whose program is itself a launcher (torchrun running `-m llamafactory.cli`, which starts torchrun
# again; torchrun under torchrun; accelerate launch under torchrun): every worker starts its own agent and
# rendezvous store on the same MASTER_PORT, so all but one fail to bind it; the command line may wrap (`\`)
NESTED_LAUNCH = (r"(?:^|[\s/;&|])(?:torchrun|-m\s+torch\.distributed\.(?:run|launch)|accelerate\s+launch)\s[^\n]*?"
                 r"(?:\\\n[^\n]*?)*?\s(?:-m\s+(?:llamafactory\.cli|torch\.distributed\.(?:run|launch))"
                 r"|\S*llamafactory-cli|(?:\S*/)?torchrun|accelerate\s+launch)\s")
PORT_TAKEN = r"Address already in use|EADDRINUSE|errno: 98\b|os error 98|\[Errno 98\]"

# a process killed by a signal, and what tells who sent it (rules.py's oom_killed and killed_by_signal rows)
SIGKILL_BY_LAUNCHER = r"closing signal SIGKILL|Sending process \d+ closing"
# A record that the OOM killer (kernel, memory cgroup, container runtime, Ray's memory monitor) did it.
OOM_RECORD = (r"Out of memory: Kill|invoked oom-killer|\boom[-_]kill|OOMKilled|Memory cgroup out of memory"
              r"|out-of-memory handler|Out Of Memory\b"
              r"|killed due to (?:the node running low on memory|memory pressure)")
# (after batch 14) the host running short of memory, in a program's own words (the CUDA driver's `fatal : Memory
# allocation failure`, C++'s bad_alloc, ENOMEM, Python's MemoryError, numpy's array allocation): with a SIGKILL in
# the same log, the OOM killer is the likely sender even without its record; killed_by_signal stays the runner-up
# (not a bare `Cannot allocate memory`: RDMA's memory registration says it when the memlock limit is low, ib_config)
HOST_MEMORY_SHORT = (r"Memory allocation failure|std::bad_alloc|\bMemoryError\b|\[Errno 12\]"
                     r"|(?:fork|mmap|malloc|posix_memalign)\W{0,3}(?:failed\W{0,3})?Cannot allocate memory"
                     r"|Unable to allocate [\d.]+ [KMGT]i?B for an array"
                     r"|(?:host|system|CPU) (?:memory|RAM) (?:is )?(?:exhausted|full|insufficient)")
# a record of the OOM kill, or the host short of memory: a SIGKILL in such a log is the OOM killer's
KILL_EXPLAINED = f"{OOM_RECORD}|{HOST_MEMORY_SHORT}"
EXIT_MINUS_9 = r"(?:exitcode|exit code|return code|exit status|returned non-zero exit status)\s*[:=]?\s*-9\b"
EXIT_137 = r"(?:exit(?:ed)? (?:with )?(?:exit )?code|exit status|Exit Code:?|exit_code)\s*[:=(]?\s*137\b|\bcode 137\b"
SIGNAL_9 = r"Signal 9 \(SIGKILL\)|signal 9: SIGKILL|Signals\.SIGKILL|got signal: 9\b|SIGKILL\)"
SHELL_KILLED = r"is killed by signal: Killed|^(?:\S+: )?Killed\s*$|\bline \d+: +\d+ Killed\b|: task \d+: Killed\b"
# (after batch 33) a task of a Slurm step that failed on its own before srun cancelled the rest: MPI's abort, a
# task's non-zero exit code (a task cancelled by srun reads `Killed` or a signal instead)
STEP_TASK_FAILED = r"MPI_ABORT was invoked|MPI_ERRORS_ARE_FATAL|: task \d+: Exited with exit code [1-9]"

OTHER_WORDS = {
    "cuda_oom": (
        # XLA's (JAX, TF, torch-xla) accelerator allocator; NCCL's own allocations
        S(r"RESOURCE_EXHAUSTED: Out of memory (?:while trying to allocate|allocating)"
          r"|XlaRuntimeError: RESOURCE_EXHAUSTED: .{0,40}\bmemory", .88),
        S(r"Failed to CUDA (?:calloc|malloc|host alloc)(?: async)? \d+ bytes", .8),
        # (after batch 20) the TPU compiler's own words for a program over its core's HBM, and TensorFlow's for a
        # tensor the device allocator cannot place: the accelerator's memory, whatever its kind
        S(r"Ran out of memory in memory space (?:hbm|vmem)|Exceeded hbm capacity by"
          r"|ResourceExhaustedError: OOM when allocating tensor|OOM when allocating tensor with shape", .88),
    ),
    "duplicate_gpu": (
        # (after batch 19) CUDA's error 46 by number (cudaErrorDevicesUnavailable: a GPU in exclusive-process mode
        # another process holds), as NAMD/Charm++ print it: "Return value 46 from 'cudaStreamCreate(...)'"
        S(r"(?:[Rr]eturn value|returned|[Ee]rror|code)\s*[=:]?\s*46\b[^\n]{0,40}\bcuda\w*", .75),
        # a GPU another process holds (exclusive-process compute mode): a stale rank or two ranks on one GPU
        S(r"CUDA-capable device\(s\) is/are busy or unavailable|cudaErrorDevicesUnavailable"
          r"|CUDA_ERROR_DEVICE_UNAVAILABLE", .75),
        # HCCL: the device's own NIC port (socket type 0) taken: two processes on one device
        S(r"socket type\[0\], listen on ip\[[^\]]+\] and specific port\[\d+\] fail", .75),
        # a device an earlier run's process still holds, in the runtime's own hint (CANN's HCCP on Ascend)
        S(r"(?:last|previous|earlier) (?:training )?process (?:is|may be) (?:still )?running", .75),
    ),
    "gpu_ordinal": (
        # (after batch 29) PaddlePaddle's words for a device index past the GPUs this machine has
        S(r"Invalid CUDAPlace\(\d+\), must inside \[0, \d+\)", .93),
        # torch's lazy-init assert on a device index beyond the GPUs it sees
        S(r"device >= 0 && device < num_gpus INTERNAL ASSERT FAILED", .9),
        # a trainer asked for more GPUs than the machine (or its allocation) shows, in Lightning's words
        S(r"You requested (?:GPUs|gpus|devices|accelerators)\s*:?\s*\[[\d, ]+\]|But your machine only has\s*:?\s*\[", .85),
    ),
    "import_error": (
        # (after batch 28) a loader's own "file not found" for a shared object a package ships (fbgemm_gpu's
        # `File fbgemm_gpu_py.so not found`): the package's build is missing or for another torch
        S(r"(?:^|[\s:\]])File [\w.+-]+\.so(?:\.[\d.]+)? not found\b", .7),
        # a framework that cannot load the collective library itself (not installed beside it)
        S(r"Unable to load (?:the )?(?:NCCL|RCCL|HCCL) library|(?:Failed to|Could not|Cannot) load (?:the )?lib(?:nccl|rccl)"
          r"(?:\.so[\d.]*)?\b", .75),
        # (after batch 13) pip finding no build of a package for this platform or Python (linux-aarch64, a new
        # CPython): the package the job imports is then missing or another version
        S(r"No matching distribution found for (?P<package>\S+)|Could not find a version that satisfies the "
          r"requirement (?P<package2>\S+)", .7, fix=F.PIP_NO_DISTRIBUTION),
        # (after batch 42) a job's own program that the dynamic loader cannot start for a library missing on the node
        # (nccl-tests' binary and libmpi under mpirun); not an MPI daemon's (launcher_missing), nor the driver's
        S(r": error while loading shared libraries: (?P<library>lib[\w+-]+\.so[\d.]*): cannot open shared object file",
          .8, unless=rf"\b(?:{DAEMONS}): error|libcuda\.|libnvidia-ml", fix=F.SHARED_LIBRARY_MISSING),
    ),
    "launcher_missing": (
        # (after batch 33) Slurm's step daemon unable to start the task's program: it is not on that node's PATH
        S(r"slurmstepd\S*: error: execve\(\): (?P<program>[^:\s]{1,80}): No such file or directory", .85),
        # any launcher's program missing from PATH, in bash's or sh's words
        S(rf"\b(?:{LAUNCHERS}): (?:command )?not found", .85),
        # the launch chain's helpers (mpi-operator's kubectl exec agent, MPI's compiler wrappers), in dash's
        # `script: LINE: /path/prog: not found` form or a build's own question
        S(r"(?:^|\s|/)(?:kubectl|orted|prted|mpicxx|mpicc|hydra_pmi_proxy): (?:command )?not found"
          r"|\bis (?:kubectl|mpicxx|mpicc|mpirun) in \$PATH\b", .8),
        # pdsh/ssh running the launching node's interpreter path on a node that lacks it; (after batch 14) any program of
        # the launch chain so, the MPI launchers' remote daemons included (`bash: /usr/local/bin/orted: No such file or
        # directory`: mpirun's ssh landed where Open MPI is not installed at the launching host's prefix), and zsh's form
        S(rf"(?:bash|sh|zsh): (?:line \d+: )?(?P<remote_path>/\S*/(?:python[\d.]*|{LAUNCHERS}|{DAEMONS})): No such "
          r"file or directory|zsh: no such file or directory: (?P<remote_path2>/\S*/(?:python[\d.]*|"
          rf"{LAUNCHERS}|{DAEMONS}))\s*$", .75),
        # ...a launch daemon's path quoted bare (an MPI daemon is never a job's own file)
        S(rf"(?:^|[\s\"'])(?P<remote_path>/\S*/(?:{DAEMONS})): No such file or directory", .7),
        # (after batches 10-12) the same: the launching host's working directory missing on the node (pdsh's `cd`)
        S(r"bash: (?:line \d+: )?cd: (?P<remote_path>/\S+): No such file or directory", .1,
          requires=r"pdsh|\bssh\b|mpirun|deepspeed"),
        # an MPI launcher's remote daemon that cannot load its libraries in the non-interactive login's environment
        S(r"\b(?:orted|prted|hydra_pmi_proxy): error while loading shared libraries: (?P<remote_lib>\S+?):", .1),
    ),
    "launcher_args": (
        # (after batch 37) Open MPI's launcher refusing root (mpirun/prterun in a container that runs as root)
        S(r"(?:mpirun|prterun|orterun|mpiexec) has detected an attempt to run as root", .9, fix=F.MPI_AS_ROOT),
        # (after batch 19) a launch helper's own refusal of its arguments (detectron2-style `launch`, nerfstudio):
        # an automatic rendezvous URL across machines; several GPUs given as one device string
        S(r"dist_url=auto (?:is )?not supported (?:for|in) multi-machine jobs", .9),
        S(r"Invalid device string: '(?:cuda|gpu):\d+,\d+", .88),
        # a framework refusing to start without the launcher that sets its environment (MindSpore, Horovod, ...)
        S(r"(?:without using|Please use|must be (?:launched|started|run) (?:with|by|through)) '?(?:mpirun|mpiexec|torchrun"
          r"|srun|horovodrun|deepspeed|accelerate launch)\b'?", .75),
        # (after batch 36) the same refusal in other words: LLaMA-Factory's `Please launch distributed training with
        # `llamafactory-cli` or `torchrun`.`, "should be launched using ..."
        S(r"(?:please|must|should|need to) (?:be )?(?:launch|start|run)(?:ed)?\b[^\n]{0,40}?\b(?:with|by|using|through"
          r"|via) [`'\"]?(?:[\w-]+-cli\b|torchrun|deepspeed|accelerate launch|mpirun|mpiexec|srun|horovodrun"
          r"|python -m torch\.distributed)", .8),
        # the job compares the world it was built for with the ranks the launch started (an engine, a checkpoint)
        S(r"world[ _]size \(?\d+\)? ?(?:!=|does not match|doesn't match|is not equal to|mismatch).{0,40}"
          r"world[ _]size", .75),
        # (after batch 40) NCCL given a rank at or past the world size it was told: the launch started more processes
        # than the world size it passes (or numbered them from another base)
        S(r"NCCL WARN Invalid rank requested : (?P<rank>\d+)/(?P<world_size>\d+)", .85, fix=F.WORLD_SIZE_SHORT),
        # the scheduler's task layout against the devices the framework asks per node (Lightning under Slurm)
        S(r"tasks? per node\b.{0,60}(?:does not match|doesn't match|mismatch)|ntasks-per-node\S*.{0,20}"
          r"(?:does not match|doesn't match)", .8),
        # srun could not start the step's tasks at all (its MPI plugin type, --mpi=pmix where pmi2 works)
        # (a container plugin that failed to start the step's container owns it: container_start_failed)
        S(r"srun: error: task \d+ launch failed|aborted before step completely launched", .55,
          unless_log=r"spank|pyxis|enroot|container start failed|container creation failed"),
        # a launcher handed an empty master address (a hostfile it could not parse, an unset variable)
        S(r"--master_addr=(?:\s|$)|Using IP address of\s{2,}for node", .7),
        # (after batch 42) ...or an address whose host is empty before its port (`ray start --address=:6379`, then
        # `Failed to connect to GCS at address :6379`): unreachable only because nothing named the head
        S(r"(?:--(?:address|master[_-]addr|rdzv[_-]endpoint)[= ]|\bat address |tcp://):\d{2,5}\b", .85,
          fix=F.EMPTY_HEAD_ADDRESS),
        # (after batch 42) horovodrun refusing a host list without its slots (`-H worker-0,worker-1` for `worker-0:2`)
        S(r"Invalid host input, please make sure it has format as", .9),
        # (after batch 12) a host list's `host:slots` form handed to ssh as a host name (an MPI launcher's -H /
        # hostfile syntax given where plain host names are expected, or a default of localhost:N)
        S(r"[Cc]ould not resolve hostname (?P<hostslots>[\w.-]+:\d+)\b", .9),
        # (after batches 10-12) the rendezvous port taken under a nested launch: the outer launcher's workers
        # each start the inner launcher's store (port_in_use follows: its fix does not help here)
        S(f"(?P<nested>{PORT_TAKEN})", .95, requires=NESTED_LAUNCH),
        # (after batch 24) the script run without the launcher that sets its environment, in Python's own words
        # for a missing os.environ key (torch's env:// says "environment variable RANK expected, but not set")
        S(r"KeyError: '(?P<args>RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT)'", .8),
    ),
    "gpu_arch_unsupported": (
        # (after batch 25, a cause of its own after batch 32) a GPU newer than the NCCL build: its kernels ask for more
        # shared memory than the device has (NCCL 2.25 on sm_120; NVIDIA's fix: 2.26.2); labelled `nccl_too_old` in
        # batch 25, `gpu_arch_unsupported` in batches 26 and 32: one class, the majority's label
        S(r"ncclMaxSharedMem \d+ exceeds device/fn maxSharedMem \d+", .8),
        # (after batch 19) Kokkos built for another arch than the GPU's (Kokkos_ARCH_VOLTA72 on a V100)
        S(r"Kokkos::Cuda::initialize ERROR: likely mismatch of architecture", .9),
        # ROCm's "no kernel image": no code object for the device's arch or its XNACK/SRAMECC mode
        S(r"hipErrorNoBinaryForGpu|Unable to find code object for all current devices", .9),
        # a number format the GPU's architecture lacks (bf16 before Ampere, fp8 before Hopper/Ada)
        S(r"(?:doesn't|does not|don't|do not) support (?:bf16|bfloat16|fp8)\b"
          r"|(?:bf16|bfloat16|fp8|FP8)\b.{0,60}(?:requires?|needs?|only (?:be )?supported on|is only available on)"
          r".{0,40}(?:Ampere|Hopper|Ada|A100|H100|compute capability|sm_?\d+)", .8),
    ),
    "collective_mismatch": (
        # HCCL's comparison of the two ends' collective (op, count, tag)
        S(r"arguments for collective communication are inconsistent between ranks|\[ParameterConflict\]", .85),
        # DDP's check that every rank built the same model (params or their shapes differ across ranks)
        S(r"DDP expects same model across all ranks|appears not to match (?:sizes|strides) of the same param in "
          r"process \d+", .75),
        # (after batch 13) torch's desync report naming a rank one collective behind the others (it finished #N and
        # never joined #N+1 while they waited in it): ranks out of step; the watchdog's timeout is its consequence
        S(r"finished collective #\d+, but didn't join collective #\d+", .75),
    ),
    "version_mismatch": (
        # HCCL's version check between the two ends of a link; NCCL's rings that ranks built differently
        S(r"versions? (?:are|is) inconsistent|local_version \[?\S+?\]?,? remote_version", .85),
        S(r"ring \d+ does not (?:loop back to start|contain rank)", .7),
    ),
    "nic_mismatch": (
        # (after batch 33) any transport connecting to an address that routes nowhere beyond its own host or link
        S(rf"(?:\bconnect(?:ing)?\b|dest_addr=)[^\n]{{0,60}}?(?:{OFF_HOST_UNROUTED})", .82),
        # (after batch 28) a rank in a container off the host's network whose connections to its peers fail
        S(CONTAINER_BRIDGE_NCCL, .7, requires=NET_FAILED),
        S(CONTAINER_ID_HOST_NCCL, .55, requires=NET_FAILED),
        # the socket interface named in the environment does not exist here (HCCL's words)
        S(r"set ifname to \[[^\]]*\] by \w+, but not found|SOCKET_IFNAME\S*.{0,60}not found in the environment", .9),
        # (after batch 18) Open MPI's TCP transport matching a peer's connection to none of its interfaces: the
        # ranks publish addresses (a container's or a second network's) that do not route between the hosts
        S(r"btl: tcp: Match incoming connection from .{0,80} failed", .85),
        # NCCL using or connecting to a link-local address: an interface that routes nowhere beyond its link
        S(rf"Using (?:\[0\])?[\w.-]+:(?:{LINK_LOCAL})", .8),
        S(rf"Connect to (?:{LINK_LOCAL}|{BRIDGE_GATEWAY}|{BRIDGE_CONTAINER}<\d+> failed)"
          rf"|connect\(\) to (?:{LINK_LOCAL}|{BRIDGE_GATEWAY}|{BRIDGE_CONTAINER}) failed", .8),
        # (after batch 22) Open MPI's TCP transport answered by the wrong process: hosts that share an address (every
        # docker0 is 172.17.0.1, every virbr0 192.168.122.1) reach themselves; and NCCL's bootstrap (sockets over the
        # chosen interface) failing in its socket calls, traced by the return codes of NCCL_DEBUG=INFO
        S(r"recv_connect_ack\]? received unexpected process identifier", .8),
        S(r"bootstrap\.cc:\d+ -> 2\b", .5, requires=r"socket\.cc:\d+ -> 2\b"),
        # UCX (Open MPI's pml) unable to reach a peer's worker address: no interface the two hosts share
        S(r"Failed to receive UCX worker address|Failed to resolve UCX endpoint", .7),
        # (after batch 12) Open MPI's TCP transport failing between nodes: on multi-homed hosts (docker0, veth,
        # a second NIC) it tries an interface that routes nowhere; the runner-up to its own firewall hint
        S(r"unable to complete a TCP connection\s*(?:to another process)?", .55),
        # a network failure at NCCL's setup while the launch pins the socket interface: the pinned name is the
        # lead suspect (an interface that does not route between the nodes)
        S(r"NCCL_SOCKET_IFNAME=(?P<iface>[\w.,^=-]+)", .6,
          requires=r"remote process exited or there was a network error|ncclsystemerror|unhandled system error"),
        # (after batches 10-12) a bare NCCL system error: an interface that does not route between the nodes is as
        # common a cause in the first-scored batches as a small /dev/shm (NCCL picking docker0/veth/a second NIC);
        # the weakest of the three transports, below an NCCL too old for its GPUs where the error names its version
        S(r"unhandled system error|ncclSystemError", .21),
        # (after batch 14) no local interface on the peer's network: NCCL's own words for it, and a bind to an address
        # that is none of this node's interfaces (EADDRNOTAVAIL: a container behind Docker's bridge given the host's
        # address); the ranks' addresses of different families (gloo comparing an IPv4 with an IPv6 peer: 2 vs 10)
        S(r"No interface found in the same subnet as remote address", .88),
        S(r"(?:Call to bind|bind\(\)|failed to bind)\b.{0,80}(?:Cannot assign requested address|errno:? 99\b)", .7),
        S(r"ss_family == \w+\.ss_family|address famil(?:y|ies) (?:mismatch|differ)", .8),
    ),
    "platform_backend_unsupported": (
        # (after batch 38) TensorFlow's NCCL collective with no kernel registered for it: a build without NCCL
        # (Windows, a CPU build), the same class as torch's `Distributed package doesn't have NCCL built in`
        S(r"No OpKernel was registered to support Op '_?Nccl\w+'", .9),
        # (after batch 31) the framework's build has no NCCL process group at all (a Windows or CPU build of Paddle)
        S(r"has no attribute '(?:ProcessGroupNCCL|_NCCL\w*)'", .8),
        # (after batch 43) the framework saying its own build lacks what the job uses: Paddle's CPU package imported
        # for a GPU run, MXNet's `compile with USE_DIST_KVSTORE=1 to use dist_device_sync`
        S(r"You are using paddlepaddle cpu version|\bcompile with USE_\w+=(?:1|ON) to use\b", .85,
          fix=F.FRAMEWORK_BUILD_LACKS),
        # (after batch 14) a distributed run on a Windows host, where the Windows paths (a traceback's frames) and the
        # distributed setup (DDP, init_process_group, NCCL) are on different lines: Windows builds of torch have no
        # NCCL; weaker than any cause the log names itself
        # (one alternative per root, so that each has a literal for the pre-filter: no search of every line)
        S(r"\b[A-Z]:\\Users\\|\b[A-Z]:\\Program Files|\b[A-Z]:\\ProgramData\\|\b[A-Z]:\\Python\d*\\"
          r"|\b[A-Z]:\\Anaconda|\b[A-Z]:\\Miniconda", .5,
          requires=r"init_process_group|torch\.distributed|\bddp\b|DistributedDataParallel|\bnccl\b|\bgloo\b|torchrun"
                   r"|paddle\.distributed|processgroupnccl"),
    ),
    "hostname_unresolvable": (
        # (after batch 33) the rendezvous address given is a path, not a host: a launcher that reads the master's
        # address from a remote shell's output took a line its startup files printed (`/root/cuda11.8.bashrc`)
        S(r"(?:--master[_-]addr[= ]|\bMASTER_ADDR=|--rdzv[_-]endpoint[= ])['\"]?(?P<addr>[/~][^\s'\"]*)", .8),
        # the C library's resolver failing in MPICH's (and other C programs') words
        S(r"gethostbyname(?:\(\))? failed|gethostbyname\S*: (?:Unknown host|Host name lookup failure)", .8),
        # (after batch 17) MPICH's Hydra proxy: a host name it cannot resolve (an ssh failure beside it is its echo)
        S(r"unable to get host address for (?P<host>[\w.-]+)", .93),
        # (after batch 18) a peer's name its connection layer cannot look up (CaffeOnSpark's socket.cpp)
        S(r"No peer by name \[(?P<host>[\w.-]+)\]", .8),
    ),
    "rdzv_unreachable": (
        # a coordinator a worker cannot reach: JAX/XLA's coordination service, Ray's head (GCS / its redis)
        S(r"CoordinationService/RegisterTask", .75, requires=r"DEADLINE_EXCEEDED|UNAVAILABLE|Deadline Exceeded"),
        S(r"Could not establish connection to (?:redis|Redis|GCS)|Failed to connect to (?:Redis|GCS)\b", .75),
    ),
    "port_in_use": (
        S(r"listen on ip\[[^\]]+\] and specific port\[\d+\] fail|port is being used by other process", .6),
        # (after batch 18) accelerate's own check before it launches
        # (the port quoted in backticks since accelerate 0.2x: a value's quotes are not its wording; after batch 34)
        S(r"Tried to launch distributed communication on port [`'\"]?(?P<port>\d+)[`'\"]?,? but another process is "
          r"utilizing it", .95),
    ),
    "driver_too_old": (
        # (after batch 18) torch looking up an NVML function the host driver's libnvidia-ml lacks (a driver older
        # than the torch in the image expects: `Can't find nvmlDeviceGetNvLinkRemoteDeviceType ... undefined symbol`)
        S(r"Can't find nvml\w+: \S*libnvidia-ml\S*: undefined symbol", .9),
        # (after batch 34) a program comparing the driver's CUDA version with the one it needs, in numbers
        # (PhysX's CudaContextManager: `CUDA driver version is 11020, expected at least 11040`)
        S(r"driver version (?:is|was|found:?) (?P<found_cuda>\d{4,6}|\d+\.\d+),? (?:but |while )?(?:expected|required|"
          r"requires|need(?:s|ed)?) (?:at least|>=?) ?\d", .85),
    ),
    "fabricmanager": (
        # NCCL's NVLink SHARP multicast failing, in its own words
        S(r"error in the Fabric Manager or NVSwitches|NVLink SHARP \(NVLS\) Multicast", .85, fix=F.NVLS),
    ),
    "gpu_xid": (
        # (after batch 30) the driver's own word that a GPU must be reset before use (NVRM's NV_ERR_RESET_REQUIRED,
        # nvidia-smi's `GPU requires reset`): the node's GPU, as an Xid
        S(r"\[NV_ERR_RESET_REQUIRED\]|Reset required \[NV_ERR|\bGPU (?:requires|needs) (?:a )?reset\b", .85),
        # (after batch 14) NCCL's NVLS multicast failing: the fabric manager first, but NCCL's own hint names the
        # NVSwitches too, and a node whose NVLink got into a bad state fails the same way (reset the GPUs): the runner-up
        S(r"NVLink SHARP \(NVLS\) Multicast|transport/nvls\.cc:\d+ NCCL WARN|nvlsAllocateMem", .5),
    ),
    "ecc_error": (
        # (after batch 13) the Xids of GPU memory errors (48 double-bit ECC, 63/64 row remapping or page retirement,
        # 92 a high single-bit rate) and the row remapper's own words: the GPU's memory, a reset applies the remap;
        # gpu_xid (any Xid) stays the runner-up
        S(r"NVRM: Xid \(PCI:[^)]*\): (?:48|63|64|92)\b", .95),
        S(r"Row Remapper:|New row marked for remapping|Dynamic Page Retirement|DBE \(Double Bit Error\)", .85),
        # nvidia-smi -q's sections: the pending flag is on its own line under `Remapped Rows` / `Retired Pages`
        S(r"^\s*Pending(?: Page Blacklist)?\s*:\s*Yes\b", .75, requires=r"Remapped Rows|Retired Pages"),
    ),
    "p2p_unsupported": (
        # (after batch 19) Open MPI's CUDA IPC between two ranks' GPUs failing (smcuda's cuIpc*MemHandle)
        S(r"The call to cuIpc(?:Get|Open)MemHandle failed", .85),
        # Accelerate's check of consumer GPUs, and the like: no P2P between these GPUs
        S(r"(?:doesn't|does not|do not|don't|cannot|can't) support\b.{0,60}\b(?:P2P|peer[- ]to[- ]peer)\b", .85),
    ),
    "ib_config": (
        # the fabric plugin's memory registration out of locked memory (the container's memlock limit)
        S(r"(?:NET/OFI Unable to register memory|Unable to register MR).{0,80}Cannot allocate memory", .75),
        # (after batch 17) verbs or mlx5's direct verbs out of locked memory, and UCX/verbs asking for a higher
        # `ulimit -l`: a container's memlock limit (Docker's 64 MB, dockerd's own 8 MB inherited)
        S(r"(?:ibv|mlx5dv?)_\w+\([^)]{0,80}\) failed: Cannot allocate memory|max locked memory \(ulimit -l\)", .9,
          fix=F.RDMA_RESOURCES),
        # (after batch 36) Open MPI's and verbs' words for a completion queue or queue pair the device refused
        # (`Failed to create a completion queue (CQ):` ... `Error: Cannot allocate memory`): not host RAM
        S(r"Failed to create a (?:completion queue|queue pair)|\bRequested CQE\b|ibv_create_(?:cq|qp)\w* failed", .7,
          fix=F.RDMA_RESOURCES),
        # (after batch 12) libibverbs finding an RDMA device but no userspace provider for it (libmlx5 / rdma-core
        # missing from the image or container)
        # (a provider that fails to load for another device, `couldn't load driver 'libipathverbs'`, is benign)
        S(r"libibverbs: Warning: no userspace device-specific driver found", .6, fix=F.RDMA_USERSPACE),
        # (after batch 31) Open MPI 4+'s verbs transport (openib) leaving InfiniBand ports unused by policy, or failing
        # to open the device: the job runs over another transport or not at all; UCX is the one meant for IB
        S(r"infiniband ports on a device\s*(?:are )?not used by default|btl_openib_allow_ib", .6, fix=F.OPENIB_PORTS),
        S(r"There was an error initializing an OpenFabrics device", .55),
        # (after batch 37) a fabric provider's own ENOMEM (libfabric's EFA, verbs, UCX): the locked memory its
        # buffers are pinned in, not host RAM
        S(r"(?:Libfabric|\bEFA\b|\bfi_\w+|\bUCX\b|\bucp_\w+|\bverbs\b)[^\n]{0,60}(?:\(-12\)|\bENOMEM\b|Cannot allocate "
          r"memory)", .8, fix=F.RDMA_RESOURCES),
    ),
    "nccl_too_old": (
        # (after batches 10-12) an NCCL older than 2.8 (2020: torch 1.7's) failing at setup with a bare system or
        # internal error: it predates the GPUs and NVLink/NVSwitch topologies it now meets (RTX 30, A100 80GB
        # nodes); a runner-up behind the transports a bare system error points at, which name no version
        S(r"(?:unhandled system error|internal error|ncclSystemError|ncclInternalError).{0,80}"
          r"NCCL version (?P<version>2\.[0-7]\.\d+)", .22),
        # (after batch 13) a reduction op the loaded NCCL does not know (ncclAvg came with 2.10, PreMulSum with 2.11): the
        # caller was built against newer NCCL headers, as with an unknown data type
        S(r"invalid reduction operation \d+", .75),
    ),
    "rank_hang": (
        # (after batch 13) torch's monitored_barrier naming the ranks that never came (ProcessGroupGloo.cpp's
        # monitoredBarrier: `Rank 1 failed to pass ...`, with wait_all_ranks `Ranks 1, 2 failed to pass ...`)
        S(r"Ranks? (?P<rank>\d+)(?:, \d+)* failed to pass monitoredBarrier in \d+ ms", .88),
    ),
    "extension_build_failed": (
        # (after batch 13) a framework's compiled ops built without their CUDA part (mmcv/mmdet, detectron2-style
        # `nms is not compiled with GPU support`), or a fused CUDA extension that is not there (Megatron's
        # apex kernels): the build, not the run, is what to redo. Not torch's own `Torch not compiled with
        # CUDA enabled` (a CPU wheel of torch)
        S(r"(?<!Torch )\b(?:is |are )?[Nn]ot compiled with (?:GPU|CUDA) support", .8),
        S(r"custom CUDA extension \S+ module is not found", .8),
        # (after batch 17) a compiled CUDA extension's own module missing (apex built without --cuda_ext:
        # `No module named 'fused_layer_norm_cuda'`, `amp_C`): the build left it out, the import only finds that
        S(r"No module named '?(?:[\w.]*\.)?(?:\w+_cuda\w*|amp_C)'?", .93),
        # a JIT build started and never loaded (the log ends inside it, or its error was cut)
        S(r"Building extension module (?P<extension>[\w.-]+)\.\.\.|-DTORCH_EXTENSION_NAME=(?P<extension2>\w+)", .45,
          unless_log=r"loading extension module"),
        # torch's cpp_extension loading a module its build should have left, not there (Megatron's fused kernels)
        S(r"in _import_module_from_library", .85, requires=r"cannot open shared object file"),
        # (after batch 31) the compiler's own error inside torch's headers or an op's sources (a GCC older than torch
        # needs: torch's `#error "You're trying to build PyTorch with a too old version of GCC"`), and Triton's JIT
        # build of its C helper (`compile_module_from_src`, a C compiler or Python.h missing on the node)
        S(r"torch/include/\S+:\d+(?::\d+)?: (?:fatal )?error:|/csrc/\S+\.(?:cu|cuh|cpp|cc|h):\d+(?::\d+)?: "
          r"(?:fatal )?error:|You're trying to build PyTorch with a too old version of GCC", .8),
        S(r"triton/runtime/build\.py\S*, line \d+, in _build", .75, requires=r"calledprocesserror"),
    ),
    "docker_no_gpu_runtime": (
        # (after batch 17) a GPU process in a container without NVIDIA's runtime: NVML's library never injected
        # (k8s-device-plugin's `could not load NVML library`: the default runtime is not nvidia)
        S(r"could not load NVML library|Failed to open libnvidia-ml\.so", .8),  # k8s' words; NCCL's (after batch 35)
        # (after batch 20) the driver's user-space library not visible to the process: Triton's own assertion
        # (it finds libcuda through `ldconfig -p`), the loader's; in a container, the NVIDIA runtime left it out
        S(r"libcuda\.so cannot found|libcuda\.so(?:\.1)?: cannot open shared object file"
          r"|Failed to find libcuda\.so", .9),
    ),
    "nccl_topo_file": (
        # (after batch 13) NCCL's own topology discovery overflowing its XML (NCCL_TOPO_XML_MAX_NODES) on a machine
        # with many PCI devices: a precomputed NCCL_TOPO_FILE for the machine is the fix
        S(r"NCCL WARN Error : too many XML nodes \(max \d+\)", .7),
    ),
    "nccl_socket_error": (
        # Open MPI's TCP transport refused between the nodes (its own hint: a firewall)
        S(r"unable to complete a TCP connection\s*(?:to another process)?", .75),
        # (after batch 28) NCCL's connect failing where its interface list holds a virtual or link-local interface:
        # still the network's, but behind that interface (nic_mismatch)
        S(CONNECT_FAILED, .5),
    ),
    "node_unreachable": (
        # (after batch 19) the scheduler's own word that a node of the job failed (Slurm's NODE_FAIL, PBS/Torque's
        # `job preempted (node failure)`): the node, not the job
        S(r"DUE TO NODE FAIL(?:URE)?\b|\(node failure\)|JobState=NODE_FAIL|Reason=NodeFail", .95),
        # (after batch 20) Open MPI's launcher losing a daemon that had started (ORTE's errmgr help text, PRRTE's
        # twin): its node died or dropped off the network; where ssh never started the daemons (ssh's own
        # words, "unable to reliably start") ssh_failed leads
        S(r"(?:ORTE|PRTE) has lost communication with a remote daemon", .55,
          unless_log=r"unable to reliably start|\bssh: |Permission denied \(|Host key verification failed"
                     r"|orted: command not found|prted: command not found"),
        # (after batch 24) Slurm's controller losing a node's slurmd (ping_nodes.c "Nodes %s not responding", then
        # "..., setting DOWN"): the node dropped off the network or hung
        S(r"\bNodes? [\w\[\],.-]+ not responding\b", .8),
        # (after batch 31) mid-run (NCCL's watchdog, after the communicator worked), the peer's side gone: NCCL's
        # `remote process exited` or its socket closed by the peer. Its process or node ended first; this log is
        # the survivor's (a consequence: any root the log names leads)
        S(r"remote process exited or there was a network error|socketProgress: Connection closed by remote peer", .5,
          consequence=True, requires=r"watchdog"),
    ),
    "permission_denied": (
        # (after batch 20) enroot mounting a user's directory into the container refused (root squashed on NFS, a
        # mode): the mount's own error, which pyxis prints before its generic "couldn't start container"
        S(r"enroot-mount: failed to mount: [^\n]*: Permission denied", .86),
        # (after batch 24) the same under any wrapper: coreutils refused a directory or file it must create or
        # change (`mkdir: cannot create directory '...': Permission denied`, as enroot's scripts run it); not a
        # login session's /run/user/<uid>, absent from batch jobs: a runtime path left at its default (a config)
        S(r"\b(?:mkdir|cp|mv|touch|install|ln|chmod|chown): cannot [^\n]*?: Permission denied", .86,
          unless_log=r"cannot create directory '?/run/user/"),
    ),
    "container_start_failed": (
        # (after batch 20) pyxis' own setup on the node (its runtime directory) failing: the step's container never
        # started (Slurm's "spank: required plugin spank_pyxis.so: ... failed" follows every pyxis failure: no signal)
        S(r"pyxis: couldn't (?:mkdir|create|chown|open) ", .72),
    ),
    "killed_by_signal": (
        # (after batch 33) a Slurm step cancelled after a task of it failed on its own (MPI's abort, a task's non-zero
        # exit): srun cancelling the rest is what followed it (rules.py's own row leaves such a log to this one)
        S(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT", .35, requires=STEP_TASK_FAILED, unless_log=OOM_RECORD,
          consequence=True),
    ),
    "shm_too_small": (
        # (after batch 33) oneCCL unable to open libfabric's shared-memory provider: a container's small /dev/shm
        S(r"can't create providers for name shm\b|\bshm provider (?:is )?(?:not available|unavailable|failed)", .6),
        # (after batch 42) PaddlePaddle's NCCL error when errno is ENOSPC/EAGAIN, advising a larger --shm-size
        S(r"Increase shared memory by setting the -+shm-size option", .75),
    ),
    "nccl_timeout_slow_rank": (
        # (after batch 33) a rank's traceback stopped in the barrier of `main_process_first` (transformers, accelerate):
        # it waited there while the main process prepared the data alone, longer than the process group's timeout
        S(r"in (?:local_)?main_process_first\b|in wait_for_everyone\b", .55, requires=r"\bbarrier\b"),
    ),
}
