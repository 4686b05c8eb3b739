"""The fix of each cause, in inventory terms where possible: templates for rules.RULES.

`{name}` is a value captured by the signal or read from the logs/node diagnostics (host, rank,
nproc, gpus, driver, shm_size, ...), `{name|fallback}` falls back to the text after `|`, and a
`[...]` holding placeholders is dropped when one of them is unknown (textmatch.render_fix).
"""

OOM_KILLED = ("{rank_name|a rank} was killed by the OOM killer (the kernel, a container or cgroup memory limit)"
              "[ on {host}]: free host RAM (fewer DataLoader workers, no other jobs), lower the per-rank memory in "
              "job.args (e.g. --frame_num, offload flags) or run fewer ranks per node (job.nproc_per_node); under "
              "Kubernetes/Slurm raise the memory limit or --mem")
KILLED_BY_SIGNAL = ("{rank_name|a rank} was killed by a signal (SIGKILL)[ on {host}][: Slurm cancelled it ({reason})]"
                    " and nothing recorded why; the sender may be the OOM killer whose record is not readable here "
                    "(look for `Out of memory: Killed process {pid|<pid>}` in the node's `dmesg`, `oom_kill` in the "
                    "cgroup's memory.events, `OOMKilled` in `docker inspect`; `clusterctl collect-logs` gathers "
                    "them), an operator's `kill -9`, or a scheduler's time limit or preemption (give the job more "
                    "time, checkpoint and resume); if it is memory, lower the per-rank memory or run fewer ranks "
                    "per node (job.nproc_per_node)")
LIBRARY_TOO_OLD = ("a system library in container.image[ ({symbol})] is older than what torch or an extension was "
                   "built against (libstdc++/glibc of an older base OS, or the host's libraries through "
                   "LD_LIBRARY_PATH): use an image with a newer base OS or conda's libstdcxx-ng, keep host library "
                   "paths out of job.env/container.env, or install builds made for the image's glibc")
CUDA_OOM = ("{rank_name|a rank} ran out of GPU memory[ on {host}]: lower the per-rank load in job.args (batch size, "
            "--frame_num, resolution, offload flags such as --offload_model), set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in job.env, or spread the model over more GPUs")
SHM = ("the container's /dev/shm[ ({shm_size})] is too small for NCCL/DataLoader shared memory: set "
       "container.shm_size: 16g (or container.ipc: host) in the inventory, then `clusterctl up`")
SHM_PERMISSION = ("/dev/shm in the container is not writable by the rank's user: use container.ipc: host or "
                  "container.shm_size: 16g in the inventory, and make /dev/shm mode 1777 (don't run ranks as a user "
                  "without write access to it)")
DISK_FULL = ("the filesystem being written[ on {host}] is full (checkpoint directory, job.outputs or Docker's data "
             "root): free space or point job.outputs/the checkpoint path at a larger volume; for image layers "
             "`docker system prune` or move /var/lib/docker")
GPU_ORDINAL = ("job.nproc_per_node[ ({nproc})] exceeds the {gpus_phrase|GPUs} this node exposes: set "
               "nproc_per_node: auto[ or {gpus}] (or expose more GPUs with container.gpus / hosts[].gpus); where "
               "the ranks per node fit, the script picks its GPU by the global rank or a fixed id: use LOCAL_RANK "
               "(torch.cuda.set_device(int(os.environ[\"LOCAL_RANK\"])))")
DUPLICATE_GPU = ("two ranks landed on the same GPU[ (bus {bus})]: stale ranks of an earlier run still hold the GPUs, "
                 "or the script ignores LOCAL_RANK: run `clusterctl down` then `clusterctl up` to clear stale "
                 "processes, keep nproc_per_node: auto, and don't override CUDA_VISIBLE_DEVICES in job.env")
DOCKER_NO_GPU_RUNTIME = ("the Docker daemon on[ {host|this host}] has no NVIDIA runtime: install "
                         "nvidia-container-toolkit, run `nvidia-ctk runtime configure --runtime=docker` and restart "
                         "docker, then `clusterctl up` (or set container.gpus: none for CPU-only jobs)")
CONTAINER_LOST_GPU = ("the running container lost access to its GPUs (a `systemctl daemon-reload` reset its device "
                      "cgroup): `clusterctl down` then `clusterctl up` to recreate it, and on[ {host|the host}] run "
                      "`nvidia-ctk system create-dev-char-symlinks --create-all` (or use the cgroupfs driver) so it "
                      "does not happen again")
DRIVER_TOO_OLD = ("the NVIDIA driver on[ {host|this host}][ (CUDA {found_cuda})] is older than the CUDA that "
                  "container.image was built for: upgrade the host driver, or use an image built for the driver's "
                  "CUDA version")
FABRICMANAGER = ("the NVSwitch fabric is not ready on[ {host|this node}]: install nvidia-fabricmanager matching the "
                 "driver version exactly[ ({driver})], `systemctl enable --now nvidia-fabricmanager`, then rerun "
                 "`clusterctl up` (on GPUs without NVSwitch, disable the fabric manager instead)")
# (after batch 36: NVLS failing inside a container, the fix that worked NCCL_NVLS_ENABLE=0) NCCL's NVLink SHARP
# multicast needs the fabric manager and the node's multicast support; training runs without it
NVLS = ("NCCL's NVLink SHARP (NVLS) multicast failed to set up[ on {host}]: the node or its container cannot use it "
        "(the fabric manager or IMEX not running, the multicast objects not allowed in the container, NVLink in a bad "
        "state): set NCCL_NVLS_ENABLE=0 in job.env to train without it (ring and tree over NVLink stay), or check "
        "`nvidia-smi -q | grep -i -A2 fabric` and nvidia-fabricmanager on that node")
# (after batch 36) verbs refusing a queue or a memory registration its size or the locked-memory limit does not allow
RDMA_RESOURCES = ("the RDMA device refused a queue or a memory registration[ on {host}] (`Cannot allocate memory` "
                  "there is locked memory or the device's queue limits, not host RAM): raise the locked-memory limit "
                  "(`ulimit -l unlimited`, Docker `--ulimit memlock=-1`, limits.conf), or, when the library asks "
                  "for more than the device allows (a fixed CQ size), upgrade that MPI/UCX release or exclude its "
                  "component; NCCL_IB_DISABLE=1 falls back to TCP")
# (after the fix audit of 2026-12-01: a cause's fix must fit the shape its signal names) the shapes whose fix differs
DOCKER_SOCKET = ("the SSH user[ on {host}] may not use the Docker daemon's socket: add it to the docker group "
                 "(`usermod -aG docker USER`, then a new login) or connect as a user that may, then `clusterctl up`")
REGISTRY_TLS = ("the node's Docker does not trust the registry[ on {host}]: put the registry's CA in "
                "/etc/docker/certs.d/REGISTRY/ca.crt, or, for a plain-HTTP registry, list it under insecure-registries "
                "in /etc/docker/daemon.json and restart docker; then `clusterctl up`")
NO_GPU_VISIBLE = ("the rank sees no GPU at all[ on {host}]: in a container, the NVIDIA runtime or the GPU request is "
                  "missing (install nvidia-container-toolkit, `nvidia-ctk runtime configure --runtime=docker`, "
                  "container.gpus); on the host, the driver is not loaded (`nvidia-smi` fails) or CUDA_VISIBLE_DEVICES "
                  "in job.env is empty or names no GPU")
HOST_MEMORY_SHORT = ("the host ran short of memory[ on {host}] (an allocation failed: ENOMEM, bad_alloc, MemoryError), "
                     "though the log records no kill: free host RAM (fewer DataLoader workers, no other jobs), lower "
                     "the per-rank host memory in job.args or run fewer ranks per node (job.nproc_per_node); under a "
                     "container or cgroup limit, raise it")
ILLEGAL_INSTRUCTION = ("a rank died on an illegal instruction (SIGILL)[ on {host}]: a binary, wheel or extension in "
                       "container.image was built for a newer CPU (AVX-512, AMX) or another architecture than this "
                       "node's, or for a GPU arch it lacks: use builds for the node's CPU (`lscpu` flags) and GPU, or "
                       "rebuild the extension on that node")
ENROOT_NO_GPU_RUNTIME = ("the node[ {host}] lacks the NVIDIA container CLI that enroot's GPU hook "
                         "(hooks.d/98-nvidia.sh) runs: install libnvidia-container-tools (nvidia-container-cli, from "
                         "nvidia-container-toolkit's repository) on every node, or start the job without GPUs")
CONTAINER_DAEMON_DOWN = ("the container daemon (docker, containerd or the NVIDIA container service) failed[ on "
                         "{host}]: `systemctl status docker` and `journalctl -u docker` say why; an "
                         "/etc/docker/daemon.json edited for the NVIDIA runtime that is not valid JSON, or names a "
                         "runtime path that does not exist, is the common one (`dockerd --validate`); fix it, "
                         "restart docker, then `clusterctl up`")
MPI_SINGLETONS = ("every process started alone, each rank 0 of 1: the launcher is not of the MPI the program is linked "
                  "with (an Open MPI mpirun starting an MPICH-built program, or the reverse), or it passes no process-"
                  "management interface that library reads: launch with that MPI's own mpirun (`ldd PROGRAM | grep -i "
                  "mpi` against `which mpirun`), or `srun --mpi=pmix` / `--mpi=pmi2` as the library expects; mpi4py "
                  "rebuilt against the launcher's MPI; a program built without MPI at all (nccl-tests without MPI=1, "
                  "Horovod without HOROVOD_WITH_MPI=1: `horovodrun --check-build`) is one world per process whatever "
                  "starts it: rebuild it with MPI")
MPI_AS_ROOT = ("Open MPI refuses to start as root (a container's default user): run the job as a non-root user, or "
               "let it with `mpirun --allow-run-as-root` or OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in "
               "job.env")
MPI_SLOTS = ("the MPI launch asked for more processes than the hosts' slots: give -np at most hosts x "
             "job.nproc_per_node, list the slots in the hostfile (`host slots=N`), or pass --oversubscribe where "
             "sharing GPUs is meant")
RDMA_USERSPACE = ("libibverbs found an RDMA device but no userspace provider for it[ on {host}]: install rdma-core's "
                  "providers (libmlx5, ibverbs-providers) in container.image, or NCCL_IB_DISABLE=1 to fall back to TCP")
OPENIB_PORTS = ("Open MPI's openib transport leaves InfiniBand ports unused by default: run with the UCX PML "
                "(`--mca pml ucx`) or allow them (`--mca btl_openib_allow_ib 1`)")
PIP_NO_DISTRIBUTION = ("pip found no release of a package[ ({package})] for this Python and platform, or no reachable "
                       "package index: pin a version that exists for the image's Python, point pip at a reachable "
                       "index or mirror, or bake the package into container.image")
GPU_XID = ("a GPU[ on {host}] reported a hardware/driver fault[ (Xid {xid})]: take the node out of the inventory "
           "(or hosts[].gpus without that GPU), reset or reboot it, and replace the GPU if the Xid repeats "
           "(79: fell off the bus, 48/94/95: ECC, 74: NVLink, 119: GSP)")
ECC_ERROR = ("a GPU[ on {host}] hit an uncorrectable ECC memory error: exclude it (hosts[].gpus) or drain the node, "
             "reset the GPU (`nvidia-smi -r`) or reboot to retire the page, and replace it if "
             "`nvidia-smi -q -d ECC,PAGE_RETIREMENT` keeps counting")
INSUFFICIENT_RESOURCES = ("the scheduler found no node with the requested free GPUs/memory/CPU: lower the request "
                          "(job.nproc_per_node, memory limit), free resources held by other jobs, or check that the "
                          "GPU device plugin advertises nvidia.com/gpu")
IMAGE_PULL = ("a node cannot pull container.image: check the image name and tag, `docker login` on every node (or "
              "container.registry_auth), and that the nodes reach the registry; `clusterctl up` pulls it again")
SHARED_LIBRARY_MISSING = ("the job's program cannot start[ on {host}]: the dynamic loader finds no {library} there: "
                          "install that library on every node (or run the image that has it) and pass its directory "
                          "to the ranks the launcher starts (`mpirun -x LD_LIBRARY_PATH`, job.env): a non-interactive "
                          "login does not read the profile that sets it; `ldd PROGRAM` on that node lists what it lacks")
EMPTY_HEAD_ADDRESS = ("the launch was given an address with no host before its port: the variable meant to hold the "
                      "head's address (MASTER_ADDR, the head node's IP) was empty when the command was built: set it "
                      "on every node before the command (under Slurm `scontrol show hostnames \"$SLURM_JOB_NODELIST\" "
                      "| head -n1`) or write the head's address; clusterctl sets MASTER_ADDR to the first node itself")
IMPORT_ERROR = ("a Python module is missing or built for another torch/CUDA on[ {host|a node}]: run the same "
                "container.image everywhere (`clusterctl up` re-pulls), or install the package version that matches "
                "torch in the image")
PERMISSION_DENIED = ("the rank's user may not write a path it needs[ on {host}]: point job.outputs / the output "
                     "directory at a writable volume, fix the ownership of the mounted directory "
                     "(container.volumes), or run the container as its owner")
LAUNCHER_ARGS = ("the launch command is wrong[ ({args})][: `{hostslots}` is a host list's host:slots form handed to ssh "
                 "as a host name (an Open MPI too old for that -H/hostfile syntax, or a host list written for another "
                 "launcher): upgrade Open MPI or give plain host names with their slots as that launcher expects]"
                 "[: a launcher runs another launcher ({nested} on the rendezvous port: each worker of the outer one "
                 "starts the inner one's store): start the inner launcher alone (llamafactory-cli / accelerate launch "
                 "start torchrun themselves) or the training script directly under torchrun]: fix job.command/job.args "
                 "in the inventory (clusterctl runs torchrun itself, passes LOCAL_RANK in the environment, sets "
                 "MASTER_ADDR/MASTER_PORT; keep rendezvous.port between 1024 and 65535)")
LAUNCHER_MISSING = ("a program the launch runs is missing on[ {host|a node}][: `{remote_path}` exists on the launching "
                    "host, not there (pdsh/ssh/mpirun run the launching host's paths on every node: the code directory "
                    "and the Python environment at the same paths everywhere, a shared filesystem or one image)]"
                    "[: its remote daemon cannot load `{remote_lib}` in a non-interactive login (set PATH/"
                    "LD_LIBRARY_PATH in the startup file non-interactive shells read on every node, or pass them with "
                    "mpirun --prefix / -x LD_LIBRARY_PATH)]; where it is job.launcher's own program, install it in "
                    "container.image on every node (mpirun: `apt-get install openmpi-bin`, which brings orted; "
                    "deepspeed: `pip install deepspeed` beside torch), or set job.launcher: torchrun")
SIGHUP = ("torchrun got SIGHUP because the SSH/terminal session that started it closed: launch with "
          "`clusterctl run` (detached inside the container), or by hand under tmux / `setsid nohup ... &`")
PORT_IN_USE = ("port {port|rendezvous.port} is already taken on the master (a stale torchrun of an earlier run or "
               "another job): run `clusterctl down` to clear stale ranks, or set rendezvous.port to a free port")
HOSTNAME = ("the name[ {addr}] does not resolve on this node: give hosts[].address as an IP in the inventory "
            "(clusterctl passes it as the rendezvous address) or add the name to /etc/hosts on every host")
RDZV = ("the workers cannot reach the rendezvous at[ {addr}:{port}]: open TCP[ {port}] on the master "
        "(firewall/security group), and make rendezvous.master (default: the first host) an address the "
        "other hosts route to")
NIC_MISMATCH = ("NCCL/Gloo picked a NIC that does not route between the nodes[ ({iface})]: set hosts[].nic in the "
                "inventory to the interface carrying the node address (clusterctl exports NCCL_SOCKET_IFNAME and "
                "GLOO_SOCKET_IFNAME from it; for MPI/UCX also UCX_NET_DEVICES or `--mca btl_tcp_if_include`), never "
                "lo/docker0, and make each hostname resolve to that address, not 127.0.1.1")
NCCL_SOCKET = ("NCCL's TCP connections between the nodes fail (refused, no route, aborted): allow all TCP ports "
               "between the hosts (NCCL listens on random ports; a firewall that opens only rendezvous.port is not "
               "enough) and pin hosts[].nic to the interface that routes between them")
IB_CONFIG = ("InfiniBand/RoCE between the nodes is down or misconfigured[ (completion status {status})]: check that "
             "`ibstat` shows the ports Active/LinkUp on both nodes, set NCCL_IB_HCA and (RoCE) NCCL_IB_GID_INDEX=3 "
             "in job.env, give the container /dev/infiniband and unlimited memlock, or NCCL_IB_DISABLE=1 to fall "
             "back to TCP")
DIVISIBILITY = ("the world size[ {size}] does not divide the model's heads[ {heads}]: use a world size of "
                "{near_divisors|a divisor of num_heads} and pass it as \"{{world_size}}\" in job.args (set "
                "job.world_size_divides to num_heads and let clusterctl pick)")
# (after issue 51's real-job test: hf_trainer.py with `--width 66` was told to change its world size) the same
# cause's other shapes, each a signal's own fix: what divides what decides what to change
DIVISIBILITY_EITHER = ("the job's sizes do not divide evenly[ ({heads} by {size})]: when the divisor is the world size "
                       "or a parallel size (tensor, pipeline, sequence parallel), use a world size of "
                       "{near_divisors|a divisor of it} and pass it as \"{{world_size}}\" in job.args (set "
                       "job.world_size_divides and let clusterctl pick); when both are the model's or the data's own "
                       "(a width and its heads, a length and its chunks), change that value in job.args or the "
                       "model's config: every node fails alike, it is not the cluster")
DIVISIBILITY_MODEL = ("the model's own configuration does not divide evenly[ ({heads} by {size})] (its width by its "
                      "attention heads, whatever the world size): change that value in job.args or the model's "
                      "config; every node fails alike, it is not the cluster")
DIVISIBILITY_BATCH = ("the batch sizes do not add up over the ranks: the global batch must be the micro batch per "
                      "GPU x gradient accumulation x the world size[ ({world_size} ranks)]: set train_batch_size to that "
                      "product (or \"auto\" in the DeepSpeed config), or change the micro batch in job.args")
DIVISIBILITY_BUILT_FOR = ("the model, engine or checkpoint was built for another number of ranks than the run "
                          "started[ ({world_size})]: start as many ranks as it was built for (tensor x pipeline "
                          "parallel = hosts x job.nproc_per_node), or rebuild or reshard it for this world size")
NCCL_TOO_OLD = ("an older libnccl[ (missing {symbol})] shadows the NCCL that torch was built with: remove the system "
                "libnccl from LD_LIBRARY_PATH (job.env/container.env) or install the nvidia-nccl wheel torch expects "
                "in container.image")
VERSION_MISMATCH = ("ranks disagree on what they exchange (different NCCL/torch builds or NCCL_* settings on "
                    "different nodes, or ranks calling different collectives)[ ({versions})]: run the same "
                    "container.image (same digest) and job.env on every host (`clusterctl up` re-pulls), then check "
                    "that every rank issues the same collectives")
PLATFORM = ("this torch build or OS has no NCCL/libuv (Windows, macOS or a CPU-only wheel): run the ranks on "
            "Linux GPU hosts with a CUDA build of torch in container.image (or use the gloo backend with "
            "USE_LIBUV=0 in job.env)")
FRAMEWORK_BUILD_LACKS = ("the framework build the job imports lacks what it uses (a CPU-only package, a build without its "
                         "distributed store): install the GPU/distributed build in container.image and remove any other "
                         "package of the framework that shadows it (`pip list` shows both), or rebuild with the flag the "
                         "message names")
NCCL_TIMEOUT = ("a collective[ ({op})] waited[ {timeout_ms} ms] for a rank that was busy (long load/save/eval on one "
                "rank) or had died: look for the first rank that failed; otherwise raise the timeout "
                "(init_process_group(timeout=...)) or take the long work off the collective path")
RANK_HANG = ("ranks are alive but stuck in a collective: `clusterctl stacks` to see where each rank waits, then look "
             "for the outlier rank (or set job.stall_timeout to stop such runs)")
SEGFAULT = ("{rank_name|a rank} crashed in native code (SIGSEGV): the compiled extensions, torch and CUDA in "
            "container.image do not match or a library is broken; rebuild/reinstall the extensions for the image's "
            "torch, and rerun with PYTHONFAULTHANDLER=1 in job.env for a native backtrace")
NODE_UNREACHABLE = ("check the node's network and power; clusterctl stopped the other nodes, and the node stops "
                    "its own ranks when its lease expires")
COLLECTIVE_MISMATCH = ("ranks are out of step on their collectives[ ({op})]: one rank called a different collective, "
                       "shape or dtype, or skipped one (a rank-dependent branch, an uneven last batch, a conditional "
                       "barrier or all_gather); rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL in job.env (and the flight "
                       "recorder: `clusterctl stacks`) to name the op and the rank, then make every rank issue the "
                       "same collectives in the same order")
DUPLICATE_HOST = ("two nodes look like one host to NCCL (the same hostname or host hash: cloned machines, containers "
                  "started with one --hostname, one /etc/machine-id): give each node a unique hostname (clusterctl's "
                  "container hostname is the host's), or set NCCL_HOSTID per node in hosts[].env")
P2P_UNSUPPORTED = ("the GPUs[ on {host|this node}] cannot reach each other peer-to-peer (PCIe ACS or the IOMMU "
                   "blocks P2P, a consumer GPU, a VM without P2P): set NCCL_P2P_DISABLE=1 in job.env (slower, "
                   "through host memory), or disable ACS on the PCIe switches / boot with iommu=pt; "
                   "`nvidia-smi topo -p2p r` shows which pairs work")
GPU_ARCH_UNSUPPORTED = ("a library in container.image was built without code for this GPU's architecture[ ({arch})] "
                        "(a torch/NCCL/extension older than the GPU, or TORCH_CUDA_ARCH_LIST without it): use an "
                        "image whose torch and CUDA support the GPU (e.g. CUDA 12.8+ for Blackwell), rebuild "
                        "extensions with the arch in TORCH_CUDA_ARCH_LIST")
SSH_FAILED = ("the launcher could not open a password-less SSH session to[ {target|a node}] (no key in its "
              "~/.ssh/authorized_keys for the launching user, an unknown or changed host key, or sshd not "
              "listening): launch with `clusterctl run`, which opens its own SSH sessions from the inventory "
              "(hosts[].user, the key clusterctl is given); by hand, `ssh-copy-id` to every node (the launching "
              "node itself included) and accept each host key once")
NCCL_TOPO_FILE = ("NCCL_TOPO_FILE / NCCL_GRAPH_FILE[ ({topo_file})] describe another machine than this node (a cloud "
                  "image's topology file for another VM size, or one copied from other hardware): unset them in "
                  "job.env/container.env so NCCL detects the topology, or point them at the file for this VM size")
NET_PLUGIN_INCOMPATIBLE = ("NCCL's network plugin and the fabric library under it do not fit the NCCL in container.image "
                           "(AWS: aws-ofi-nccl with a libfabric from an EFA installer older than 1.29 and NCCL 2.19+): "
                           "use the EFA installer's libfabric and plugin made for the image's NCCL, or set "
                           "FI_EFA_SET_CUDA_SYNC_MEMOPS=0 in job.env; keep one image on every node")
EXTENSION_BUILD_FAILED = ("a C++/CUDA extension[ ({extension})] failed to compile at run time[ on {host}] (DeepSpeed's "
                          "ops and other libraries' kernels build on first use): container.image lacks a working "
                          "toolchain for it (c++ and ninja, an nvcc of torch's CUDA version with CUDA_HOME set, the "
                          "CUDA and Python headers); prebuild the ops into the image (e.g. DS_BUILD_OPS=1 pip install "
                          "deepspeed, or the library's prebuilt wheel) or install that toolchain, and keep one image "
                          "on every node; the first compiler error above the traceback names what is missing")
CONTAINER_START_FAILED = ("the node's container runtime (enroot/pyxis, Apptainer/Singularity, runc and its OCI hooks) "
                          "could not create the container[ on {host}]; its own error line names the part: a hook (the "
                          "NVIDIA hook's /dev/nvidia* device nodes missing when the driver state is broken, a hook "
                          "the image's libc cannot run), a container directory left by a requeued job (`File already "
                          "exists`: a unique --container-name, or remove the leftover pyxis_* directory), a mount the "
                          "unprivileged install cannot do (install its setuid part); fix that on the node or drain it, "
                          "and run on the others")
DRIVER_LIBRARY_MISMATCH = ("the NVIDIA kernel module loaded on[ {host|this node}] is not the version of the driver's "
                           "user libraries[ ({library})]: the driver was upgraded (often by unattended-upgrades) "
                           "while the old module stayed loaded; reboot the node (or unload and reload the nvidia "
                           "modules once no process uses a GPU), then `apt-mark hold` the driver packages so it "
                           "does not happen under a running job")

DDP_UNUSED_PARAMETERS = ("DistributedDataParallel's reducer and the model's graph disagree[ on {rank_name|a rank}]: "
                         "some parameters took no part in the loss (a frozen or unused branch, a conditional head), "
                         "or one was marked ready twice (reentrant activation checkpointing, a module called twice): "
                         "freeze what is not trained (requires_grad=False) or wrap with "
                         "DistributedDataParallel(..., find_unused_parameters=True) (Accelerate: "
                         "DistributedDataParallelKwargs; Lightning: strategy='ddp_find_unused_parameters_true'); for "
                         "checkpointing use_reentrant=False or static_graph=True; TORCH_DISTRIBUTED_DEBUG=DETAIL in "
                         "job.env names the parameters")
SLURM_GRES_CONFIG = ("the Slurm GPU configuration of[ {host|a node}] does not match the node (gres.conf's File= "
                     "names a /dev/nvidia* that is not there, Cores= in a form this Slurm rejects, AutoDetect=nvml "
                     "in a slurmd built without NVML), so slurmd fails or the node drains with fewer GPUs than "
                     "configured: on that node fix gres.conf (or slurm.conf's Gres=) to the GPUs `nvidia-smi -L` "
                     "lists, restart slurmd and `scontrol update nodename=<node> state=resume`; until then Slurm "
                     "keeps it drained (a job that names it: sbatch --exclude=<node>)")
SLURM_REQUEST_INVALID = ("Slurm refused the allocation's request as this site configures it: clusterctl asks for GPUs "
                         "with `--gpus-per-node` (scheduler.gpus_per_node), which needs SelectType=select/cons_tres "
                         "and a `gpu` GRES in gres.conf; where the site wants a typed GRES or another form, leave "
                         "scheduler.gpus_per_node out and give the site's own in scheduler.extra_args (e.g. "
                         "`--gres=gpu:a100:8`; `sinfo -o '%P %G'` lists each partition's GRES); a partition, feature "
                         "or account the error names: the one `sinfo` / `sacctmgr show assoc user=$USER` lists")

JOB_CODE_ERROR = ("the job's own code or its input failed[ on {rank_name|a rank}][ on {host}], not the cluster: "
                  "an index out of range (a CUDA `device-side assert` is one: a label or token id beyond the "
                  "model's size), a shape, dtype or device mismatch, an object that cannot be pickled, a tensor a "
                  "collective's backend cannot take (a CPU tensor on an NCCL-only group, a non-contiguous one), a "
                  "library used in a mode it does not support; fix the code or data at the traceback's innermost "
                  "frame of the job (CUDA_LAUNCH_BLOCKING=1 in job.env points a device-side assert at its line); "
                  "any healthy node fails alike, so a run that heals itself ends here instead of moving to a spare")
LIBRARY_BUG = ("a library or tool failed in its own code[ on {rank_name|a rank}][ on {host}]: its own assertion, a "
               "crash of its own daemon or a CUDA call it made refused, a bug or regression of the release in "
               "container.image on this path[ (the log's NCCL is {nccl_version})]; search its tracker for the quoted "
               "line, then pin the release its maintainers name as fixed (or the last one that worked) in the image, "
               "on every node; retrying on another node fails alike")
# (after batch 38) library_bug named for a tool's own error that nothing else names (engine._release_bug): the
# same next step as LIBRARY_BUG's, without claiming what the log does not show
LIBRARY_BUG_UNNAMED = ("a library's or a tool's own error that no known cause explains: search that project's tracker "
                       "for the quoted line, then pin the release its maintainers name as fixed (or the last that "
                       "worked) in container.image on every node")
# (after batch 38) an MPI or its UCX handed GPU buffers without the GPU support they were built or loaded with
MPI_GPU_SUPPORT = ("the MPI library (or its UCX) is not GPU-aware, yet the job hands it GPU buffers: use an Open MPI "
                   "built with CUDA (`ompi_info --parsable --all | grep mpi_built_with_cuda_support:value` says true) "
                   "over a UCX built with CUDA (`ucx_info -v` shows --with-cuda) and UCX_TLS keeping cuda_copy (and "
                   "cuda_ipc) and Open MPI's smcuda BTL left in its btl list (a site's openmpi-mca-params.conf may "
                   "drop it); on Cray MPICH load craype-accel-nvidia* before building so the GTL library is "
                   "linked; or MPICH_GPU_SUPPORT_ENABLED=0 / OMPI_MCA_opal_cuda_support=0 with the buffers copied to "
                   "host memory first")
MPI_PMI_MISSING = ("the MPI program was started by srun directly, but its MPI library and Slurm share no process-"
                   "management interface (an Open MPI built without --with-pmix / --with-pmi, or a Slurm without the "
                   "mpi plugin asked for): run it with the plugin both have (`srun --mpi=pmix`, or `--mpi=pmi2`; "
                   "`srun --mpi=list` names Slurm's), launch it with the MPI's own mpirun inside the allocation, or "
                   "use an MPI built against the site's PMIx (the site's MPI module)")

# (after batch 39)
MPI_RSH_AGENT = ("Open MPI's mpirun found no ssh (nor rsh) to start its daemons with[ on {host}]: install an SSH "
                 "client (openssh-client) in container.image on every node, or point OMPI_MCA_plm_rsh_agent at one "
                 "that exists; the segfault that may follow is mpirun's own teardown")
SSHD_IN_CONTAINER = ("the SSH server in the container cannot start a session (no privilege-separation chroot: the "
                     "container lacks CAP_SYS_CHROOT, or the image has no /run/sshd): add SYS_CHROOT to the "
                     "container's capabilities (`--cap-add SYS_CHROOT`, a pod's securityContext.capabilities.add) and "
                     "create /run/sshd in the image, or launch without SSH (`clusterctl run` starts each node's ranks "
                     "itself)")
SSH_KEY_PERMISSIONS = ("an SSH key is readable by others (mounted 0644 from a Secret or a volume), so ssh ignores it and "
                       "sshd, with no host key left, exits: make private keys 0600 and owned by the user (a Secret's "
                       "defaultMode: 0600, `chmod 600` in the image's entrypoint)")
WORLD_SIZE_SHORT = ("a rank[ ({rank})] was started at or past the world size it was given[ ({world_size})]: the launch "
                    "starts more processes than the world size it passes (WORLD_SIZE = nodes x processes per node, "
                    "each rank below it): set the world size from the launcher's own count (torchrun sets WORLD_SIZE; "
                    "`clusterctl run` computes it from the inventory) and number the nodes from 0; or the program "
                    "starts its own per-GPU workers under a launcher that already started one per GPU (fairseq under "
                    "torch.distributed.launch without --distributed-no-spawn): let only one of them start workers")
FABRIC_PROVIDER = ("libfabric picked a provider that cannot drive this node's NIC (PSM3 wants an Intel Ethernet/Omni-"
                   "Path NIC; in a container or on other hardware it finds none): name the provider for the fabric "
                   "in job.env (FI_PROVIDER=tcp, verbs or efa; PSM3_DEVICES=self,shm for one node), or use an MPI "
                   "build for this fabric")
CONTAINER_WITHOUT_GPUS = ("the container was started without a GPU request (plain `docker run`, no `--gpus` / "
                          "`--runtime=nvidia`), so the NVIDIA runtime never mounted the driver's libraries into it and "
                          "CUDA finds no driver: start it with `--gpus all` (clusterctl up does, with container.gpus), "
                          "nvidia-container-toolkit installed and configured on the host")
RAY_NODE_ADDRESS = ("Ray was asked to place work on `node:ADDR`, an address under which no Ray node registered: the "
                    "driver took its address from another interface than the one Ray uses on that node; start Ray "
                    "with `ray start --node-ip-address=ADDR` and give the library the same address (vLLM: "
                    "VLLM_HOST_IP=ADDR) on every node, or pin the interface (hosts[].nic)")
LIBRARY_HOST_COMMAND = ("a library ran a host command with an option this node's build of it lacks (DeepSpeed's "
                        "`hostname -I` where hostname is not GNU's: macOS, inetutils): install the build it expects in "
                        "container.image (Debian/Ubuntu's `hostname` package) or pin a release of the library that no "
                        "longer calls it; retrying on another node of the same image fails alike")
LIBRARY_IPV6_URL = ("a library wrote an IPv6 address into an endpoint without brackets (`tcp://ADDR:PORT` where "
                    "`tcp://[ADDR]:PORT` is meant), so its last group reads as the port: give the library an IPv4 "
                    "address to bind (vLLM: VLLM_HOST_IP; MASTER_ADDR; hosts[].nic on an IPv4 interface) or pin a "
                    "release that brackets IPv6")

# One line per cause for the README's diagnosis table (python -m clusterctl.diagnose.table).
BRIEF = {
    "oom_killed": "less memory per rank (frames, batch, workers), fewer ranks per node, or more RAM / a higher limit",
    "killed_by_signal": "read the node's kernel log / cgroup events for an OOM kill; more time for the job; resume",
    "cuda_oom": "smaller per-rank load (batch, frames, resolution, offload) or more GPUs",
    "shm_too_small": "`container.shm_size: 16g` or `ipc: host`",
    "shm_permission": "a writable /dev/shm: `ipc: host` or `shm_size`, mode 1777",
    "disk_full": "free the volume or move outputs/checkpoints/Docker's data root to a larger one",
    "gpu_ordinal": "nproc_per_node exceeds the GPUs the node exposes (impossible with `auto`)",
    "duplicate_gpu": "stale ranks: `clusterctl up` cleans them; or two ranks/nodes share GPUs",
    "docker_no_gpu_runtime": ("install nvidia-container-toolkit, `nvidia-ctk runtime configure`, restart docker; "
                              "or `gpus: none`"),
    "container_lost_gpu": "recreate the container (`down`/`up`); `nvidia-ctk system create-dev-char-symlinks`",
    "driver_too_old": "upgrade the host driver, or an image built for its CUDA",
    "fabricmanager": "nvidia-fabricmanager of exactly the driver's version, enabled and running",
    "gpu_xid": "drain the node, reset/reboot the GPU, replace it if the Xid repeats",
    "ecc_error": "exclude the GPU (`hosts[].gpus`), reset/reboot, replace if errors persist",
    "insufficient_resources": "lower the request or free GPUs/memory; check the device plugin",
    "image_pull_failed": "the image name/tag, `docker login` on every node, registry reachability",
    "import_error": "one image everywhere (`up` re-pulls); packages built for the image's torch",
    "library_too_old": "an image with a newer base OS / libstdc++, no host library paths in LD_LIBRARY_PATH",
    "permission_denied": "a writable `job.outputs` / volume owned by the rank's user",
    "launcher_args": "fix job.command/job.args; clusterctl runs torchrun and passes LOCAL_RANK itself",
    "launcher_missing": "install the launcher in the image (openmpi-bin / deepspeed), or job.launcher: torchrun",
    "sighup_session_closed": "clusterctl detaches the launch; `nohup`/`setsid`/tmux by hand",
    "port_in_use": "the holder's pid is named; `up --force` or another `rendezvous.port`",
    "hostname_unresolvable": "clusterctl passes the address explicitly; fix `/etc/hosts` if you launch by hand",
    "rdzv_unreachable": "the firewall rule clusterctl quotes, or the master's address",
    "nic_mismatch": "set per node from the route to the master; `hosts[].nic` pins one",
    "nccl_socket_error": "allow all TCP between the nodes (NCCL's random ports), pin `hosts[].nic`",
    "ib_config": "ports Active (`ibstat`), NCCL_IB_HCA / NCCL_IB_GID_INDEX, or NCCL_IB_DISABLE=1",
    "config_divisibility": "set `world_size_divides`; clusterctl picks the layout",
    "nccl_too_old": "drop the stale libnccl from LD_LIBRARY_PATH; the nvidia-nccl wheel torch expects",
    "version_mismatch": "one image everywhere (`pull: always`), the same NCCL_* env on every node",
    "platform_backend_unsupported": "Linux GPU hosts with a CUDA build of torch (or gloo / USE_LIBUV=0)",
    "nccl_timeout_slow_rank": "the first rank that failed, or a longer timeout for long work",
    "rank_hang": "`clusterctl stacks` names the outlier rank; `job.stall_timeout` stops such runs",
    "segfault": "rebuild extensions for the image's torch/CUDA; PYTHONFAULTHANDLER=1 for a backtrace",
    "node_unreachable": "check its network/power; the others were stopped",
    "collective_mismatch": "TORCH_DISTRIBUTED_DEBUG=DETAIL names the op; every rank the same collectives in order",
    "duplicate_host": "a unique hostname per node, or NCCL_HOSTID per node in `hosts[].env`",
    "p2p_unsupported": "NCCL_P2P_DISABLE=1, or ACS off / iommu=pt on the node",
    "gpu_arch_unsupported": "an image whose torch/CUDA/NCCL support the GPU's arch; rebuild extensions for it",
    "nccl_topo_file": "unset NCCL_TOPO_FILE / NCCL_GRAPH_FILE, or the file for this machine's VM size",
    "net_plugin_incompatible": "the fabric's plugin/libfabric made for the image's NCCL (EFA >= 1.29), one image",
    "container_start_failed": ("the runtime's error names the part (hook, leftover container dir, mount): fix it or "
                               "drain the node"),
    "extension_build_failed": "prebuild the ops into the image (DS_BUILD_OPS=1) or give it c++/ninja/nvcc + CUDA_HOME",
    "ddp_unused_parameters": "freeze unused parameters or find_unused_parameters=True; use_reentrant=False",
    "slurm_gres_config": "gres.conf to the node's GPUs, restart slurmd, resume the node",
    "mpi_pmi_missing": "`srun --mpi=pmix` (`srun --mpi=list`), mpirun inside the allocation, or the site's MPI build",
    "mpi_gpu_support_missing": ("a GPU-aware MPI build (Open MPI with CUDA, UCX_TLS with cuda_copy; Cray's GTL "
                                "linked), or buffers copied to host first"),
    "job_code_error": "the job's code or data at its innermost frame (CUDA_LAUNCH_BLOCKING=1 for a device-side assert)",
    "library_bug": "the library's release named fixed in its tracker (or the last that worked), one image everywhere",
    "ssh_failed": "password-less SSH to every node (`clusterctl run` opens its own sessions from the inventory)",
    "driver_library_mismatch": "reboot the node (or reload the nvidia modules) after a driver upgrade; hold the packages",
    "slurm_request_invalid": ("the site's own GPU/GRES form in scheduler.extra_args (`--gres=gpu:TYPE:N`), without "
                              "scheduler.gpus_per_node; a partition/account `sinfo`/`sacctmgr` lists"),
}
