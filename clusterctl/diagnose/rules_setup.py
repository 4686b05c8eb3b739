"""Rules for a node's setup that the first rule tables lacked (issue 51, met in batches 1-3's `other:` labels).

- ssh_failed: the launcher could not open a password-less SSH session to a node (DeepSpeed's/pdsh's
  ssh check, mpirun's rsh agent, `Permission denied (publickey)`, `Host key verification failed`);
- driver_library_mismatch: the NVIDIA kernel module loaded is not the version of the driver's user
  libraries (`Failed to initialize NVML: Driver/library version mismatch`): the driver was upgraded
  under a running system (often by unattended-upgrades) and the node was not rebooted;
- nccl_topo_file: NCCL_TOPO_FILE / NCCL_GRAPH_FILE describe another machine than this one (a cloud image's
  file for another VM size): NCCL's XML import finds devices that are not there;
- net_plugin_incompatible (after batch 6's first score): NCCL's network plugin and the fabric library under it
  do not fit the NCCL in use (aws-ofi-nccl with an EFA installer's libfabric older than NCCL 2.19 needs): its
  memory registration fails with an invalid argument;
- extension_build_failed (round five, met on the rehearsal: DeepSpeed's CPU ops in an image whose `c++` did not
  resolve): a C++/CUDA extension compiled on first use (DeepSpeed's fused_adam/cpu_adam, torch.utils.cpp_extension)
  fails to build: a missing compiler, nvcc, CUDA_HOME or header in the image.
- container_start_failed (after batch 11's first score: 7 `other:` labels over batches 9-11 name it): an HPC
  container runtime (enroot/pyxis, Apptainer, runc and its OCI hooks) cannot create the container on a node: a
  hook failing (the NVIDIA hook on a missing /dev/nvidia* node), a requeued job's leftover container directory,
  a mount an unprivileged install cannot do. Weak on the runtime's generic line, so a specific cause before it
  (a full disk, a permission, a driver too old, no GPU runtime) leads.
- slurm_request_invalid (after batch 17's first score: 4 `other:` labels over batches 14 and 17 name it): Slurm
  refuses the allocation's request itself (a GRES form the site does not take, e.g. `--gpus-per-node` under
  select/cons_res, a partition or account it does not know): the job's fault, the same on every try.
- slurm_gres_config (after batch 28's first score: three of its logs): a node's own Slurm GPU configuration does
  not match the node (gres.conf naming a device file that is not there, a core range this Slurm rejects, NVML
  autodetection in a slurmd built without it): slurmd fails or the node drains; the node's fault, not the job's.
- mpi_pmi_missing (after batch 34's first score: the third `other:` label for it, after batches 31 and 33): an MPI
  program started by the scheduler's launcher directly (`srun ./app`) whose MPI library was built without that
  scheduler's process-management interface (PMI-1/2, PMIx), or a Slurm without the MPI plugin asked for: MPI_Init
  cannot find its peers. The job's setup, the same on every node.
- mpi_gpu_support_missing (after batch 38's first score: the fourth `other:` label for it, over batches 32, 35 and
  38): an MPI library or its UCX handed GPU buffers without the GPU support it was built or loaded with (Open MPI
  without CUDA, Cray MPICH without its GTL library, UCX_TLS without cuda_copy). The job's image, every node alike.
- insufficient_resources (here since batch 37: a scheduler's, a cloud's or Ray's capacity short of the request).

Same form as rules.py (see its docstring); families.py adds their shape-level evidence.
"""
from __future__ import annotations

from clusterctl.diagnose import fixes as F
from clusterctl.diagnose.signals import Rule, S

# Slurm's reasons for refusing the request itself, not for lacking capacity now (slurm_request_invalid)
SLURM_REFUSED = (r"Requested node configuration is not available|violates accounting/QOS policy"
                 r"|: Invalid (?:generic resource|partition|account|qos|feature)")
# an MPI process's own report that its world is itself alone (lower case, as `requires` searches the lowered log):
# MPICH's cpi example, mpitutorial's hello world, Flux's and TensorRT-LLM's MPI banners, Horovod's `rank 0 / size 1`
MPI_SINGLETON = (r"(?:\b(?:process|proc|rank|task) 0 (?:of|out of) 1\b(?![\d.])|\bmpi initialized with 1 mpi process"
                 r"|\bmpi size: 1, rank: 0\b|\bprocess 0 on \S+ and world size is 1\b|\brank 0 / size 1\b)")
# nccl-tests' device table (`Rank  0 Group  0 Pid 544816 on dgx01 device  0`): one line per rank, so rank 0 twice,
# and no rank 1, is every process alone (lower case, as `requires` searches the lowered log)
NCCL_TESTS_RANK0 = r"\brank\s+0\s+group\s+0\s+pid\s+\d+ on\b"
# an MPI refusing the GPU buffers it was asked to take: Cray MPICH without its GPU transport layer linked, an Open
# MPI asked for CUDA (opal_cuda_support, --mca mpi_cuda_support 1) in a build without it. A segfault after these
# words is their consequence (rules.py's segfault row leaves such a log to them). Open MPI's wraps over two lines
MPI_GPU_UNSUPPORTED = (r"GPU_SUPPORT_ENABLED is requested, but GTL library is not linked"
                       r"|requested CUDA support[\s\S]{0,80}?(?:library|MPI) was not compiled with "
                       r"(?:any )?(?:CUDA )?support"
                       r"|not compiled with (?:any )?CUDA support")
# Open MPI told to launch its remote daemons through an agent (ssh, else rsh) it cannot find: wrapped over two lines;
# a segfault of mpirun after it is its consequence (rules.py's segfault row leaves such a log to launcher_missing)
RSH_AGENT_MISSING = r'MCA parameter "?plm_rsh_agent"? was set to a path\s+that could not be found'
# an MPI's backtrace of a libc copy faulting inside its own pack of a buffer (UCX's ucp_dt_pack, Open MPI's convertor
# and datatype copy; libc's frame may be unnamed): a device buffer it took for host memory
MPI_HOST_COPY_OF_DEVICE = (r"(?:__mem(?:cpy|move)\w*\(\)|libc\.so\.6\(\+0x[0-9a-f]+\))[^\n]*\n[^\n]*"
                           r"\b(?:ucp_dt_pack\(\)|opal_convertor_pack\b|non_overlap_copy_content\w*\(\))")
# a log of pyxis/enroot starting a container (lower case: `requires` and `unless_log` search the lowered log)
ENROOT_HOOK = r"pyxis: |/etc/enroot/hooks\.d/"

SETUP_RULES = (
    Rule("insufficient_resources",
         "`0/8 nodes are available: 8 Insufficient nvidia.com/gpu` (pod Pending), Slurm cannot allocate",
         F.INSUFFICIENT_RESOURCES, (
             S(r"\d+/\d+ nodes are available:.*Insufficient", .96),
             S(r"\bInsufficient (?:nvidia\.com/gpu|memory|cpu|[\w./-]*gpu)\b", .9),
             S(r"FailedScheduling|NodeUnfitPod|Unschedulable", .7),
             S(r"Unable to allocate resources", .85, unless=SLURM_REFUSED),  # a reason not slurm_request_invalid's
             S(r"PodScheduled\s+False", .5),
             # a cloud's quota or capacity refusing the nodes (a Slurm/Kubernetes autoscaler's resume log, the CLI)
             S(r"Quota '?[\w./-]+'? exceeded|'reason': 'quotaExceeded'|InsufficientInstanceCapacity"
               r"|ZONE_RESOURCE_POOL_EXHAUSTED|QuotaExceeded|exceeded quota", .8),
             # Ray's and vLLM's placement: the cluster has fewer free GPUs than the job asks for
             S(r"number of required GPUs exceeds the total number of available GPUs"
               r"|resource request cannot be scheduled right now|cannot be scheduled right now\. It requires \{", .8),
             # (after batch 23) a trainer's own count of the GPUs it sees against those it asks for: the job sees part
             # of the cluster (verl's resource pool, attached to a fresh one-node Ray instead of the running cluster)
             S(r"available GPUs:? \(?[\d.]+\)? is (?:less|fewer) than (?:the )?(?:total )?"
               r"(?:desired|required|requested) GPUs"
               r"|requested \d+ GPUs?,? but only [\d.]+ (?:GPUs? )?(?:is |are )?available", .75),
             # (after batch 24) the clouds' own words for no capacity left for the instance type asked for (EC2's
             # InsufficientInstanceCapacity text, Azure's allocation failure, GCP's exhausted zone)
             S(r"(?:do not|don't) have (?:sufficient|enough) (?:[\w.-]+ )?capacity"
               r"|does not have enough resources available to fulfill the request", .8),
             # (after batch 25, on batch 23's Ray Tune log, which led by a neighbour's resemblance alone) Tune's word
             # for a trial larger than the cluster: it stays PENDING for good
             S(r"You asked for [\d.]+ cpu and [\d.]+ gpu per trial, but the cluster only has", .8),
             # (after batch 37) Tune's own warning that nothing could start, and its status table of trials all PENDING
             # minutes in, none holding a resource (`Resources requested: 0/20 CPUs, 0/1 GPUs`)
             S(r"No trial is running and no new trial has been started within|not having enough resources available "
               r"to start the next trial", .8),
             S(r"Number of trials: \d+/\d+ \(\d+ PENDING\)", .6,
               requires=r"resources requested: 0/[\s\S]{0,400}running for (?!00:00:)"
                        r"|running for (?!00:00:)[\s\S]{0,400}resources requested: 0/"),
         )),
    Rule("ssh_failed", "`Permission denied (publickey)`, `ssh exited with exit code 255`, `not reachable via ssh`",
         F.SSH_FAILED, (
             S(r"Permission denied \((?:publickey|password|gssapi|keyboard)[\w,-]*\)", .9),
             S(r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED", .9),
             # an SSH client library's (paramiko: Fabric, ColossalAI's and other launchers') login refused or key unusable
             S(r"No authentication methods available|not a valid (?:RSA|DSA|EC|OPENSSH) private key file"
               r"|paramiko\.ssh_exception\.\w+|AuthenticationException: Authentication failed", .8),
             S(r"host=(?P<target>\S+) was not reachable via ssh|setup passwordless ssh|passwordless ssh", .9),
             # DeepSpeed's own check before pdsh: `ssh -o PasswordAuthentication=no HOST hostname` exits 255
             S(r"ssh (?:-\S+ )*?-o PasswordAuthentication=no (?:-\S+ \S+ )*?(?P<target>[\w.-]+) hostname\W+returned "
               r"non-zero exit status 255", .88),
             S(r"(?:pdsh@\S+: )?(?P<target>[\w.-]+): ssh exited with exit code 255", .85),
             # (after batch 25) the node or container the launcher logs into has no SSH server to run (an image
             # without openssh-server: MPI Operator's workers, a slim container)
             S(r"(?:/usr/sbin/)?sshd: (?:No such file or directory|command not found|not found)"
               r"|exec: \W?(?:/usr/sbin/)?sshd\W?: (?:executable file )?not found", .85),
             S(r"ssh: connect to host (?P<target>\S+) port \d+: (?:Connection refused|Connection timed out"
               r"|No route to host)|kex_exchange_identification", .75),
             # (after batch 13) a verbose ssh trace (a launcher's `plm_rsh_args -vvv`) whose client finds no key of
             # its own to offer (every identity file `type -1`) and never authenticates: weak, the trace may be cut
             # before its last line
             S(r"\bidentity file \S+ type -1\b", .35,
               unless_log=r"identity file \S+ type \d|Authenticated to|Authentication succeeded|Offering public key"
                          r"|Server accepts key|(?:^|\n)(?:debug1: )?Exit status \d"),
             # Open MPI's rsh agent: its daemons never started on the remote nodes (ssh is the usual reason)
             S(r"ORTE was unable to reliably start one or more daemons|PRTE has lost communication with a remote "
               r"daemon", .45),
             # (after batch 39) the SSH server in a container that cannot set up its privilege-separated child (no
             # CAP_SYS_CHROOT: OpenShift's and restricted pods' default; no /run/sshd in the image): every login fails
             S(r'chroot\("[^"\n]+"\): Operation not permitted|Missing privilege separation directory', .88,
               fix=F.SSHD_IN_CONTAINER),
             # ...and a key the client or server refuses for its permissions (a Secret or volume mounted 0644): the
             # client ignores it, sshd with no host key left exits
             S(r"WARNING: UNPROTECTED PRIVATE KEY FILE|Permissions 0\d{3} for '[^']+' are too open"
               r"|sshd: no hostkeys available", .9, fix=F.SSH_KEY_PERMISSIONS),
         )),
    Rule("driver_library_mismatch",
         "`Failed to initialize NVML: Driver/library version mismatch`, `NVRM: API mismatch` (after a driver upgrade)",
         F.DRIVER_LIBRARY_MISMATCH, (
             S(r"Driver/library version mismatch", .95),
             S(r"API mismatch: the NVIDIA kernel module has version (?P<module>[\d.]+)", .95),
             # the kernel's own words, older and newer drivers alike: "NVRM: API mismatch: the client has the
             # version X, but NVRM: this kernel module has the version Y", "...the client 'nvidia-smi' (pid N)"
             S(r"NVRM: API mismatch: the client\b", .95),
             S(r"NVML library version: (?P<library>[\d.]+)", .5, requires=r"version mismatch"),
             # CUDA 803, cudaErrorSystemDriverMismatch: "a mismatch between the versions of the display driver and
             # the CUDA driver" (CUDA's own words): libcuda and the loaded kernel module disagree (the same upgrade,
             # or a cuda-compat package the driver does not take); driver_too_old stays the runner-up
             S(r"unsupported display driver / cuda driver combination|cudaErrorSystemDriverMismatch"
               r"|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", .6),
         )),
    Rule("nccl_topo_file",
         "`NCCL WARN XML Import Channel : dev 1 not found` with NCCL_TOPO_FILE / NCCL_GRAPH_FILE set",
         F.NCCL_TOPO_FILE, (
             S(r"XML Import Channel\s*:\s*dev \d+ not found", .85),
             S(r"NCCL_(?:TOPO|GRAPH)_FILE set by environment to (?P<topo_file>\S+)", .3),
             # ...and NCCL failing with a system or internal error while it is set (the file is read at init)
             S(r"NCCL_(?:TOPO|GRAPH)_FILE set by environment to (?P<topo_file>\S+)", .6,
               requires=r"unhandled system error|ncclSystemError|internal error|ncclInternalError"),
             S(r"(?:NCCL_TOPO_FILE|NCCL_GRAPH_FILE|topo\.xml|graph\.xml).{0,80}(?:No such file|not found|failed)", .6),
             # NCCL reading a topology XML that lacks what this machine has (xml.h's attribute lookups)
             S(r"graph/xml\.\w+:\d+ NCCL WARN Attribute \S+ of node \S+ not found", .75),
         )),
    Rule("net_plugin_incompatible",
         "`NET/OFI Unable to register memory ... Invalid argument`, libfabric's `unable to set memops for cuda ptr`",
         F.NET_PLUGIN_INCOMPATIBLE, (
             S(r"NET/OFI Unable to register memory .{0,80}Invalid argument", .85),
             S(r"unable to set memops for cuda ptr|cuda_set_sync_memops\(\)\S*<warn>", .8),
             S(r"Unable to register MR: Invalid argument", .7),
             S(r"NET/OFI .{0,80}(?:failed|Unable to|Couldn't)", .45),
             # the plugin present but failing to load against the libraries around it
             S(r"NET/Plugin\s*:\s*(?:[\w.-]*libnccl-net[\w.-]*\.so\s*:|Plugin load returned \d+ *:|Failed to load"
               r"|dlerror\s*=).{0,200}(?:version `?[\w.]+'? not found|undefined symbol|wrong ELF class)", .75),
             # NCCL_NET names a network no loaded plugin provides (the plugin was not found or not loaded)
             S(r"NCCL WARN Error: network (?P<net>[\w ./-]+?) not found", .8),
             # (after batch 39) libfabric's provider (Intel's PSM3, picked by an MPICH or Intel MPI) finding no NIC it can
             # drive: inside a container or on a NIC it does not know, MPI_Init fails (with ENOMEM, not host memory)
             S(r"PSM[23] can't open nic unit|OFI endpoint open failed|OFI addrinfo\(\) failed", .85,
               fix=F.FABRIC_PROVIDER),
         )),
    Rule("container_start_failed",
         "`pyxis: couldn't start container` after `/etc/enroot/hooks.d/... exited with return code 1`, Apptainer's "
         "`FATAL: container creation failed`",
         F.CONTAINER_START_FAILED, (
             # the runtime's own failure, weak: a more specific cause (a disk, a permission, a driver, the GPU
             # runtime) usually shows in the lines before it and leads
             S(r"pyxis: (?:couldn't start container|container start failed)|FATAL:\s+container creation failed"
               r"|error running hook(?: #\d+)?: exit status|hooks\.d/\S+ exited with return code \d+", .5),
             # ...its specific forms: the NVIDIA hook finding a driver device node missing, a leftover container
             S(r"nvidia-container-cli: mount error: stat failed: (?P<device>/dev/nvidia[\w-]*)", .88),
             # (after batch 25) any error of the NVIDIA hook that enroot runs: under pyxis/enroot the GPU runtime is
             # a start hook, and its failing (a toolkit release's cgroup regression) is the start's, not a missing
             # runtime's (Docker's `could not select device driver`)
             S(r"nvidia-container-cli: (?:mount|initialization|detection) error", .86, requires=ENROOT_HOOK),
             S(r"pyxis: ERROR File already exists: \S*pyxis_", .8),
             # pyxis could not run enroot at all: what enroot's log says after it (a directory it may not
             # create, a quota) is the start's step that failed, printed by pyxis as `pyxis:     <line>`
             S(r"pyxis: couldn't (?:execute enroot command|get list of existing containers)", .75),
             # (after batch 17) CDI: the engine's devices named by a spec it cannot find or apply (Podman's
             # `unresolvable CDI devices nvidia.com/gpu=all`, containerd's OCI modification)
             S(r"unresolvable CDI devices?|could not apply required modification to OCI specification", .88),
             # (after batch 12) an unprivileged runtime refused its namespaces (Ubuntu 23.10+'s AppArmor
             # restriction, user.max_user_namespaces=0): Apptainer's and enroot-nsenter's words
             S(r"[Ff]ailed to create (?:user|mount) namespace|Error while waiting event for user namespace mappings"
               r"|Could not write info to setgroups", .85),
             # enroot's own helpers (enroot-nsenter, -switchroot, -mount, -aufs2ovlfs) failing a step of the start
             S(r"\benroot-[a-z0-9]+: (?:failed|error|cannot|could not)", .8),
             # the NVIDIA hook's step inside the new container (a lookup in its rootfs, a capability change that
             # SELinux refuses): the GPU runtime is installed and ran; the container's setup failed
             S(r"nvidia-container-cli(?:\.real)?: (?:container error|permission error)", .8),
         )),
    Rule("extension_build_failed",
         "`RuntimeError: Error building extension 'fused_adam'`, `ninja: build stopped: subcommand failed`",
         F.EXTENSION_BUILD_FAILED, (
             S(r"Error building extension '(?P<extension>[\w.-]+)'", .9),
             # the JIT build's output missing from torch's extension cache: the build failed or was left half done
             S(r"torch_extensions/\S+/(?P<extension>[\w.-]+)\.so: cannot open shared object file", .8),
             S(r"Ninja is required to load C\+\+ extensions", .9),
             S(r"Command '\['ninja', '-v'\]' returned non-zero exit status", .75),
             S(r"ninja: build stopped: subcommand failed", .6),
             # (after batch 14) the build's own failure line, where the log keeps only it and the compiler's command:
             # ninja's `FAILED: <object>` (newer ninja: `FAILED: [code=1] ...`), setuptools' failed compiler command
             S(r"^FAILED: (?:\[code=\d+\] )?(?P<object>\S+\.(?:o|obj|so|pyd))\b", .8),
             S(r"error: command '(?:[^']*(?:/|\\))?(?:nvcc|gcc|g\+\+|c\+\+|cc|clang\+*|x86_64-linux-gnu-g(?:cc|\+\+)"
               r"|hipcc)(?:\.exe)?' failed with exit (?:code|status) \d+", .8),
             # (after batch 12) nvcc refusing an architecture of the build's arch list: the toolkit that builds the
             # op is older than the list asks (TORCH_CUDA_ARCH_LIST), not the GPU at run time
             S(r"nvcc fatal\s*:\s*Unsupported gpu architecture", .9,
               requires=r"ninja|error building extension|cpp_extension|setup\.py"),
             S(r"unsupported GNU version! gcc versions later than \d+ are not supported", .75),
             # a compiler's missing header (cc1plus/nvcc/gcc: the program's name may be read as a pdsh host prefix)
             S(r"fatal error: [\w./-]+\.(?:h|hpp|cuh): No such file or directory", .55),
             # (after batch 28) the build's own check that the CUDA toolkit it would compile with is the one torch was
             # built with (DeepSpeed's op builder, torch.utils.cpp_extension): refused before any compiler runs
             S(r"CUDAMismatchException|assert_no_cuda_mismatch"
               r"|detected CUDA version \([\d.]+\) mismatches the version that was used to compile PyTorch", .85),
         )),
    # (after batch 17) Slurm refusing the request itself: the GPU/GRES options in a form the site does not take
    # (`--gpus-per-node` under select/cons_res, an untyped GRES where types are required, no GRES where one is),
    # a partition, feature or account it does not know. Waiting does not help, unlike a request it cannot fill
    # yet (insufficient_resources)
    Rule("slurm_request_invalid",
         "`Batch job submission failed: Invalid generic resource (gres) specification`, `Requested GRES option "
         "unsupported by configured SelectType plugin`",
         F.SLURM_REQUEST_INVALID, (
             S(r"Invalid generic resource \(gres\) specification|Requested GRES option unsupported", .93),
             # (after batch 25) no node the request could ever fit, a QOS refusing its shape: Slurm's words for a
             # request to change, not capacity to wait for (its FAQ; batches 21 and 25 label them so)
             S(r"Requested node configuration is not available|Job violates accounting/QOS policy", .9),
             S(r"Gres format wrong|No gpu count given|must always specify a type when requesting gpu GRES"
               r"|Cannot find GPU specification|Invalid GPU specification", .9),
             S(r"(?:submission|submit/allocate|create step for job \d+)(?: failed)?: Invalid (?:feature specification"
               r"|partition name specified|account or account/partition combination specified|qos specification)",
               .88),
             # (after batch 19) options Slurm itself finds contradictory, a site filter refusing the job's shape
             S(r"srun: fatal: \S+ is mutually exclusive with|(?:sbatch|salloc|srun): error: \**\s*Error(?: partition "
               r"'[^']+' is not valid for this job|: CPU job setup is not valid)", .85),
             # (after batch 21) a site's submit filter retiring an option form (a GRES form for --gpus, ...)
             S(r"(?:sbatch|salloc|srun): error: (?:Parameter|Option) --[\w-]+\S* (?:is )?no longer (?:acceptable"
               r"|accepted|supported|allowed)"
               r"|(?:sbatch|salloc|srun): error: .{0,80}please (?:switch to|use) --[\w-]+", .85),
         )),
    Rule("mpi_pmi_missing",
         "`The application appears to have been direct launched using \"srun\", but OMPI was not built with SLURM's PMI "
         "support`, `PMI2_Init failed`",
         F.MPI_PMI_MISSING, (
             S(r"direct launched using \"?srun\"?,? but OMPI was not built with SLURM'?s PMI support"
               r"|not built with (?:SLURM|Slurm)'?s PMI(?:x)? support", .95),
             # Open MPI's PMIx client with no PMIx server to talk to (its first line of the same failure)
             S(r"OPAL ERROR: (?:Unreachable|Not initialized|Error) in file pmix\w*_client\.c", .8),
             # MPICH/Cray/Intel MPI's PMI client, Slurm's side lacking the plugin the job asks for
             S(r"\bPMI2?_Init(?:_thread)? (?:failed|returned -?\d+)|PMIx?_Init failed|PMIx_Init\(\) failed"
               r"|srun: error: Couldn't find the specified plugin name for mpi/\w+"
               r"|srun: error: mpi/pmix\w*: \w+", .8),
             # (after batch 36) no error at all: every process says it is rank 0 of a world of 1, as each MPI_Init
             # found no launcher it could read and fell back to a singleton. Twice at least: one such line is a
             # one-process run
             S(MPI_SINGLETON, .8, requires=rf"{MPI_SINGLETON}[\s\S]*{MPI_SINGLETON}", fix=F.MPI_SINGLETONS),
             S(NCCL_TESTS_RANK0, .8, requires=rf"{NCCL_TESTS_RANK0}[\s\S]*{NCCL_TESTS_RANK0}",
               unless_log=r"\brank\s+1\s+group\s+\d+\s+pid\b", fix=F.MPI_SINGLETONS),
             # (after batch 39) Open MPI 5 under srun --mpi=pmi2 / plain srun: no PMIx server, so each task starts as a
             # singleton, said once before the ranks' own `0 of 1`
             S(r"No PMIx server was reachable, but a PMI1/2 was detected|\d+ singletons will be started", .9,
               fix=F.MPI_SINGLETONS),
         )),
    Rule("mpi_gpu_support_missing",
         "`GPU_SUPPORT_ENABLED is requested, but GTL library is not linked`, `The user requested CUDA support ... but "
         "the library was not compiled with any support`",
         F.MPI_GPU_SUPPORT, (
             # the MPI's own refusal (Cray MPICH's GTL, Open MPI's CUDA build), or ompi_info saying it has none
             S(MPI_GPU_UNSUPPORTED, .9),
             S(r"mpi_built_with_cuda_support:value:false", .7),
             # (after batch 40) UCX without CUDA support copying a GPU buffer as if it were host memory: its own pack
             # routine faults in memcpy (`invalid permissions for mapped object`); the segfault is this, not a crash
             S(r"\bucp_dt_pack\(\)", .9, requires=MPI_HOST_COPY_OF_DEVICE),
             # (after batch 42) Open MPI's own pack or datatype copy so (OSU's `D D` over a build whose CUDA BTL is off)
             S(r"\bopal_convertor_pack\b|\bnon_overlap_copy_content\w*\(\)", .85, requires=MPI_HOST_COPY_OF_DEVICE),
             # UCX told which transports to use without cuda_copy, the one that recognises GPU memory, while the job
             # sends device buffers (OSU's `-d cuda`, CuPy, a CUDA-aware MPI test): UCX reads them as host memory
             S(r"UCX_TLS=(?![^\s\"']*cuda)[\w,^]+", .5, requires=r"-d cuda\b|\bcupy\b|cuda-aware|device buffer"),
         )),
    Rule("slurm_gres_config",
         "`gres/gpu count reported lower than configured`, `can't stat gres.conf file /dev/nvidia0`, `invalid GRES "
         "core specification`",
         F.SLURM_GRES_CONFIG, (
             # (`sinfo -R` cuts the reason at 20 characters: "gres/gpu count repor")
             S(r"gres/gpu count (?:reported )?(?:lower|higher|too low) than configured|gres/gpu count repor", .9),
             S(r"can't stat gres\.conf file|Waiting for gres\.conf file|gres\.conf.{0,40}(?:No such file|not found)",
               .9),
             S(r"invalid GRES core specification|_node_config_validate: gres/\w+:", .85),
             # slurmd asked to detect its GPUs through a library it was built without
             S(r"configured to autodetect nvml functionality, but we weren't able to find that lib"
               r"|AutoDetect=nvml.{0,60}(?:not|without)", .85),
             S(r"Reason=gres/\w+ (?:count|GRES)|Invalid GRES (?:record|count) for", .7),
             # (after batch 40) slurmd merging gres.conf with the GPUs it detected and finding they disagree: a GPU
             # line without its File=, detected GPUs no line claims
             S(r"Discarding the following config-only GPU|autodetected GPUs are being ignored", .85),
         )),
)
