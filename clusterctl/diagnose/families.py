"""Evidence families: which causes each kind of typed evidence (evidence.py) supports, and how strongly.

The rule table (rules.py) holds the families' signatures, worded messages; this module weighs the
*shape* of the evidence, so an unseen wording of a known family still lands in its family: any
`cudaErrorNoKernelImageForDevice` spelling is a GPU arch the build lacks, any NCCL WARN from its IB
transport is InfiniBand, any exit by SIGBUS is shared memory, any registry error on a pull is the
image. Each record becomes engine events (matching.Event) under a family key, so the engine's
noisy-OR counts one family once however many lines repeat it, and adds distinct families up.

A weight here is lower than a signature's for the same cause (a shape is less specific than a
message): where a rule matched, the family only confirms; where none did, the family decides.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from clusterctl.diagnose import evidence as ev
from clusterctl.diagnose import fixes as F

# cudaError enum -> (cause, weight), several where the enum is ambiguous
CUDA_FAMILIES = {
    "cudaErrorMemoryAllocation": (("cuda_oom", .8),),
    "cudaErrorInsufficientDriver": (("driver_too_old", .85),),
    "cudaErrorSystemDriverMismatch": (("driver_too_old", .75),),
    "cudaErrorCompatNotSupportedOnDevice": (("driver_too_old", .75),),
    "cudaErrorUnsupportedPtxVersion": (("driver_too_old", .7),),
    "cudaErrorNoDevice": (("docker_no_gpu_runtime", .45), ("container_lost_gpu", .3)),
    "cudaErrorInvalidDevice": (("gpu_ordinal", .85),),
    "cudaErrorNoKernelImageForDevice": (("gpu_arch_unsupported", .85),),
    "cudaErrorInvalidDeviceFunction": (("gpu_arch_unsupported", .5),),
    "cudaErrorECCUncorrectable": (("ecc_error", .85),),
    "cudaErrorNvlinkUncorrectable": (("gpu_xid", .7),),
    "cudaErrorPeerAccessUnsupported": (("p2p_unsupported", .85),),
    "cudaErrorPeerAccessNotEnabled": (("p2p_unsupported", .5),),
    "cudaErrorIllegalAddress": (("segfault", .3), ("gpu_xid", .25)),
    "cudaErrorLaunchFailure": (("gpu_xid", .35), ("segfault", .25)),
    "cudaErrorSystemNotReady": (("fabricmanager", .85),),
    "cudaErrorDevicesUnavailable": (("duplicate_gpu", .45),),
    "cudaErrorAssert": (("job_code_error", .7),),  # a device-side assert: a kernel indexed beyond a size
    "cudaErrorInitializationError": (("container_lost_gpu", .3), ("driver_too_old", .25)),
}
# An NCCL WARN/ERROR from this subsystem -> (cause, weight)
NCCL_SUBSYSTEMS = {
    "net_ib": (("ib_config", .6),),
    "shm": (("shm_too_small", .55),),
    "p2p": (("p2p_unsupported", .5),),
    "nvls": (("fabricmanager", .45),),
    "socket": (("nccl_socket_error", .5),),
    "bootstrap": (("nccl_socket_error", .4), ("nic_mismatch", .2)),
}
# NCCL's error class, when nothing more specific says which transport failed
NCCL_CLASSES = {
    # "system" is left to the rules: their transport evidence (socket, IB, shm) decides it
    # NCCL asks for internal errors to be reported as bugs: the fix is usually a newer NCCL
    "internal": (("nccl_too_old", .35), ("version_mismatch", .2)),
    "invalid_usage": (("duplicate_gpu", .25), ("collective_mismatch", .2)),
}
SIGNAL_FAMILIES = {
    9: (("killed_by_signal", .5), ("oom_killed", .25)),
    11: (("segfault", .7),),
    7: (("shm_too_small", .55),),
    1: (("sighup_session_closed", .6),),
    6: (("nccl_timeout_slow_rank", .15),),
    4: (("gpu_arch_unsupported", .35), ("library_too_old", .2)),  # SIGILL: an instruction this CPU/GPU lacks
}
EXIT_CODES = {127: (("launcher_missing", .3),)}
EXCEPTION_FAMILIES = {
    "ModuleNotFoundError": (("import_error", .8),),
    "ImportError": (("import_error", .55),),
    "OutOfMemoryError": (("cuda_oom", .8),),
    "MemoryError": (("oom_killed", .35),),
    "PermissionError": (("permission_denied", .55),),
    "gaierror": (("hostname_unresolvable", .7),),
    "ConnectionRefusedError": (("rdzv_unreachable", .35),),
    "RendezvousTimeoutError": (("rdzv_unreachable", .7),),
    "RendezvousConnectionError": (("rdzv_unreachable", .7),),
    "DistStoreError": (("rdzv_unreachable", .45),),
    "DistNetworkError": (("rdzv_unreachable", .3), ("port_in_use", .2)),
}
STORE_KINDS = {
    "timeout": (("rdzv_unreachable", .5),),
    "refused": (("rdzv_unreachable", .5),),
    "unreachable": (("rdzv_unreachable", .5),),
    "bind": (("port_in_use", .6),),
    "collective_timeout": (("nccl_timeout_slow_rank", .55),),
    "wait_timeout": (("nccl_timeout_slow_rank", .5), ("rdzv_unreachable", .25)),
    "resolve": (("hostname_unresolvable", .6),),
}
CONTAINER_KINDS = {
    "pull": (("image_pull_failed", .7),),
    "auth": (("image_pull_failed", .6),),
    "start": (("container_start_failed", .55),),
    "gpu_runtime": (("docker_no_gpu_runtime", .7),),
    "requirement": (("driver_too_old", .6),),
    "disk": (("disk_full", .6),),
}
# errno (number or name) of an OSError / a C library message -> (cause, weight)
ERRNO_FAMILIES = {
    28: (("disk_full", .55),), 122: (("disk_full", .6),), 13: (("permission_denied", .5),),
    98: (("port_in_use", .7),), 111: (("rdzv_unreachable", .35),), 113: (("rdzv_unreachable", .3),),
    101: (("rdzv_unreachable", .3),), -2: (("hostname_unresolvable", .6),), -3: (("hostname_unresolvable", .6),),
    12: (("oom_killed", .3),), 30: (("permission_denied", .35),),
}
NCCL_NET_ERRNOS = (111, 113, 101, 110)
ENROOT_LINE = re.compile(r"pyxis:|enroot|/hooks\.d/")
RUNTIME_ABSENT = re.compile(r"not found|No such file", re.IGNORECASE)
TOPOLOGY_SEARCH = re.compile(r"find (?:reverse )?path|ncclTopo\w+|topology (?:search|detection) failed"
                             r"|Could not find (?:a )?path|Could not find real path of /sys/(?:class/pci_bus|devices)", re.IGNORECASE)
NCCL_LINE = re.compile(r"nccl|socket\.(?:h|cc)|net_socket|\bWARN\b", re.IGNORECASE)
SHM_WORDS = re.compile(r"/dev/shm|\bshm_|shared memory|SemLock|multiprocessing", re.IGNORECASE)
USAGE_KINDS = {"unrecognized": (("launcher_args", .65),), "required": (("launcher_args", .6),),
               "invalid": (("launcher_args", .5),), "env_missing": (("launcher_args", .6),),
               "divisibility": (("config_divisibility", .65),)}
VERSION_FAMILIES = {
    **{("fabricmanager", relation): (("fabricmanager", .7),) for relation in ("mismatch", "too_old", "requires",
                                                                              "unsupported")},
    ("driver", "too_old"): (("driver_too_old", .7),), ("driver", "requires"): (("driver_too_old", .6),),
    ("driver", "unsupported"): (("driver_too_old", .4),), ("driver", "mismatch"): (("driver_too_old", .35),),
    ("system_library", "too_old"): (("library_too_old", .7),), ("system_library", "requires"): (("library_too_old", .6),),
    ("system_library", "unsupported"): (("library_too_old", .65),),
    ("nccl", "too_old"): (("nccl_too_old", .6),), ("nccl", "requires"): (("nccl_too_old", .5),),
    ("nccl", "mismatch"): (("version_mismatch", .55),), ("ranks", "mismatch"): (("version_mismatch", .5),),
    ("gpu_arch", "too_old"): (("gpu_arch_unsupported", .7),), ("gpu_arch", "unsupported"): (("gpu_arch_unsupported", .7),),
    ("gpu_arch", "requires"): (("gpu_arch_unsupported", .5),),
}
INTERFACE_KINDS = {"loopback": (("nic_mismatch", .55),), "virtual": (("nic_mismatch", .5),),
                   "none": (("nic_mismatch", .65),)}
RESOURCE_KINDS = {"shm": (("shm_too_small", .6),), "gpu_memory": (("cuda_oom", .6),),
                  "host_memory": (("oom_killed", .55),), "disk": (("disk_full", .55),)}
KERNEL_KINDS = {
    "oom": (("oom_killed", .9),),
    "xid": (("gpu_xid", .85),),
    "segfault": (("segfault", .75),),
    "iommu_fault": (("p2p_unsupported", .6),),
    "pcie": (("gpu_xid", .45),),
}


@dataclass(frozen=True)
class Support:
    """One record's support for one cause: `family` names what kind of evidence it is (the noisy-OR key)."""

    cause: str
    weight: float
    family: str
    record: object
    consequence: bool = False
    fix: str = ""  # the fix of this shape of the cause where the cause's own does not fit (FAMILY_FIXES)


# evidence whose cause's own fix describes another shape of it: memory short with no kill recorded is oom_killed's
# family, but "was killed by the OOM killer" would not be what happened
FAMILY_FIXES = {("errno:12", "oom_killed"): F.HOST_MEMORY_SHORT,
                ("resource:host_memory", "oom_killed"): F.HOST_MEMORY_SHORT,
                ("exception:MemoryError", "oom_killed"): F.HOST_MEMORY_SHORT, ("nccl:nvls", "fabricmanager"): F.NVLS,
                ("cuda:cudaErrorNoDevice", "docker_no_gpu_runtime"): F.NO_GPU_VISIBLE,
                ("signal:4", "gpu_arch_unsupported"): F.ILLEGAL_INSTRUCTION,
                ("signal:4", "library_too_old"): F.ILLEGAL_INSTRUCTION,
                ("usage:divisibility", "config_divisibility"): F.DIVISIBILITY_EITHER,
                ("container:enroot_gpu_runtime", "docker_no_gpu_runtime"): F.ENROOT_NO_GPU_RUNTIME,
                ("service:container_daemon", "docker_no_gpu_runtime"): F.CONTAINER_DAEMON_DOWN,
                ("placement:rank-past-world", "launcher_args"): F.WORLD_SIZE_SHORT}


def supports(records: list, oom_recorded: bool = False, memory_short: bool = False) -> list[Support]:
    """Each record's support; `oom_recorded`: the log holds a record of an OOM kill (the kernel's, a
    cgroup's, a container's), so a SIGKILL in it is the OOM killer's; `memory_short` (after batch 14): no
    such record, but the log shows the host short of memory (an allocation failing, ENOMEM, bad_alloc), so
    the OOM killer is the likely sender and another one stays possible."""
    out: list[Support] = []
    for record in records:
        found = _support(record)
        if oom_recorded and isinstance(record, ev.ExitStatus) and record.signal == 9:
            found = _each((("oom_killed", .5),), "signal:9", record)
        elif memory_short and isinstance(record, ev.ExitStatus) and record.signal == 9:
            found = _each((("oom_killed", .8), ("killed_by_signal", .45)), "signal:9", record)
        out.extend(found)
    return out


def _each(table_entry, family: str, record, consequence: bool = False) -> list[Support]:
    return [Support(cause, weight, family, record, consequence, FAMILY_FIXES.get((family, cause), ""))
            for cause, weight in table_entry or ()]


def _support(record) -> list[Support]:
    if isinstance(record, ev.CudaError):
        return _each(CUDA_FAMILIES.get(record.name), f"cuda:{record.name}", record)
    if isinstance(record, ev.NcclMessage):
        out = []
        lowered = record.text.lower()
        if TOPOLOGY_SEARCH.search(record.text):  # NCCL cannot map the node's topology: new hardware, old NCCL
            return _each((("nccl_too_old", .55),), "nccl:topology", record)
        if "truncated" in lowered:  # NCCL's own hint: sizes or NCCL_* settings differ between the ranks
            return _each((("version_mismatch", .6),), "nccl:truncated", record)
        if record.subsystem == "shm" and ("permission denied" in lowered or "read-only" in lowered):
            return _each((("shm_permission", .65),), "nccl:shm-permission", record)
        if record.level in ("WARN", "ERROR") or record.error_class:
            out += _each(NCCL_SUBSYSTEMS.get(record.subsystem), f"nccl:{record.subsystem}", record)
        if record.error_class == "remote":  # a peer went away: what happened to it is the cause
            out += _each((("nccl_socket_error", .2),), "nccl:remote", record, consequence=True)
        elif not out:
            out += _each(NCCL_CLASSES.get(record.error_class), f"nccl-class:{record.error_class}", record)
        return out
    if isinstance(record, ev.ExitStatus):
        if record.signal is not None:
            return _each(SIGNAL_FAMILIES.get(record.signal), f"signal:{record.signal}", record,
                         consequence=record.signal == 6)
        return _each(EXIT_CODES.get(record.code), f"exit:{record.code}", record)
    if isinstance(record, ev.PyException):
        if record.type == "OutOfMemoryError" and not re.match(r"torch|cuda", record.qualified, re.IGNORECASE) \
                and not re.search(r"CUDA|GPU|HIP", record.message):  # Ray's, the JVM's: host memory
            return _each((("oom_killed", .6),), "exception:host-oom", record)
        if record.type.endswith("MemoryError") and record.type not in EXCEPTION_FAMILIES:
            return _each(EXCEPTION_FAMILIES["MemoryError"], "exception:MemoryError", record)  # numpy's _ArrayMemoryError
        return _each(EXCEPTION_FAMILIES.get(record.type), f"exception:{record.type}", record)
    if isinstance(record, ev.UndefinedSymbol):
        table = (("nccl_too_old", .7),) if record.symbol.startswith("nccl") else (("import_error", .5),)
        return _each(table, f"symbol:{'nccl' if record.symbol.startswith('nccl') else 'other'}", record)
    if isinstance(record, ev.StoreMessage):
        return _each(STORE_KINDS.get(record.kind), f"store:{record.kind}", record,
                     consequence=record.kind == "collective_timeout")
    if isinstance(record, ev.ContainerError):
        text = record.line.text[:ev.MAX_LINE]
        if record.kind == "gpu_runtime" and ENROOT_LINE.search(text) and not RUNTIME_ABSENT.search(text):
            # (after batch 31) under pyxis/enroot the GPU runtime is a start hook: where it is there and fails (an
            # ldcache error in a nested container) the start failed; where it is absent the runtime is missing
            return _each((("container_start_failed", .7),), "container:enroot_gpu_hook", record)
        if record.kind == "gpu_runtime" and ENROOT_LINE.search(text):  # the hook's program absent: its own fix
            return _each(CONTAINER_KINDS["gpu_runtime"], "container:enroot_gpu_runtime", record)
        return _each(CONTAINER_KINDS.get(record.kind), f"container:{record.kind}", record)
    if isinstance(record, ev.OsErrno):
        text = record.line.text[:ev.MAX_LINE]
        if record.errno in NCCL_NET_ERRNOS and NCCL_LINE.search(text):  # NCCL's own connections
            return _each((("nccl_socket_error", .45),), f"errno:nccl:{record.errno}", record)
        if record.errno in (13, 30) and SHM_WORDS.search(text):  # /dev/shm itself is not writable
            return _each((("shm_permission", .65),), f"errno:shm:{record.errno}", record)
        return _each(ERRNO_FAMILIES.get(record.errno), f"errno:{record.errno}", record)
    if isinstance(record, ev.UsageError):
        return _each(USAGE_KINDS.get(record.kind), f"usage:{record.kind}", record)
    if isinstance(record, ev.VersionRelation):
        return _each(VERSION_FAMILIES.get((record.subject, record.relation)),
                     f"version:{record.subject}:{record.relation}", record)
    if isinstance(record, ev.NetInterface):
        return _each(INTERFACE_KINDS.get(record.kind), f"iface:{record.kind}", record)
    if isinstance(record, ev.ResourceExhausted):
        return _each(RESOURCE_KINDS.get(record.resource), f"resource:{record.resource}", record)
    if isinstance(record, ev.ServiceFailure):
        unit = record.unit
        if any(w in unit for w in ("docker", "containerd", "nvidia-c")):  # the container daemon itself down
            return _each((("docker_no_gpu_runtime", .35),), "service:container_daemon", record)
        table = (("fabricmanager", .75),) if "fabricmanager" in unit or unit == "nvswitch" else ()
        return _each(table, f"service:{unit}", record)
    if isinstance(record, ev.PlatformHint):
        return _each((("platform_backend_unsupported", .55),), f"platform:{record.platform}", record)
    if isinstance(record, ev.KernelLine):
        return _each(KERNEL_KINDS.get(record.kind), f"kernel:{record.kind}", record)
    return []


# torchrun's agent (or another launcher) telling that it was sent SIGTERM/SIGINT: the stop came from outside the job
STOPPED_FROM_OUTSIDE = re.compile(r"Received (?:2|15|Signals\.SIG(?:INT|TERM)) death signal|got signal: (?:2|15)\b",
                                  re.IGNORECASE)


def next_step(records: list, first_line=None) -> str:
    """For an `unknown`: what the evidence that names no cause still says, as the next step (the
    first unexplained exception and where it was raised, NCCL's error class, the signal that ended a
    rank), most specific first; "" when there is none."""
    steps = []
    for record in records:
        if isinstance(record, ev.PyException) and (first_line is None or record.line == first_line):
            where = f" raised in `{record.module}`" if record.module else ""
            steps.append((0, f"the first unexplained error is `{record.qualified}`{where}: read the traceback "
                             f"above it on that rank (a bug or bad input in that module is not an infrastructure "
                             f"fault, and retrying will not help);"))
        elif isinstance(record, ev.NcclMessage) and record.error_class and record.error_class != "remote":
            steps.append((1, f"NCCL failed with its `{record.error_class}` error class without naming the "
                             f"transport: rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see the WARN "
                             f"line before it;"))
        elif isinstance(record, ev.ExitStatus) and record.signal in (2, 15) and STOPPED_FROM_OUTSIDE.search(
                record.line.text[:ev.MAX_LINE]):
            steps.append((1, f"the launcher itself received signal {record.signal} and stopped its workers: the "
                             f"cause is with whoever sent it (a scheduler's time limit or preemption, a supervisor "
                             f"that saw a companion process such as an inference server or orchestrator fail, an "
                             f"operator): read that sender's log, not this one;"))
        elif isinstance(record, ev.ExitStatus) and record.signal:
            steps.append((2, f"a process ended by signal {record.signal}: check the node's `dmesg` and the "
                             f"rank's stderr just before it;"))
    return min(steps)[1] if steps else ""


@dataclass(frozen=True)
class _Anchor:
    """A line that carries log-level evidence (the placement) into the engine."""

    line: object


def placement_supports(placement, records: list) -> list[Support]:
    """What the ranks' placement adds: a GPU claimed by two ranks a node apart (their numbers differ by
    at least the host's device count) is two machines with one identity (duplicate_host), otherwise
    one GPU given twice (duplicate_gpu); a launch whose roll-call shows a rank started twice or fewer ranks than
    its world size started the wrong number of processes (launcher_args: Slurm tasks vs devices, no srun), as does a
    rank numbered past the world its launch command declares; a system error on a run confined to one host is its
    shared memory, not the network."""
    out: list[Support] = []
    if placement.shared:
        host, _, low, high, line = placement.shared[0]
        devices = len(set(placement.hosts[host].values()))
        # ranks a node apart on one device index (2 and 10 of 8-GPU nodes): two machines, one identity
        many = len(placement.hosts[host]) > 8 or high - low >= max(devices, 4)
        table = (("duplicate_host", .6), ("duplicate_gpu", .3)) if many else \
            (("duplicate_gpu", .45), ("duplicate_host", .3))
        out += _each(table, "placement:shared-gpu", _Anchor(line))
    if placement.roll_call:  # the launch started each rank twice, or fewer ranks than the world size it declares
        world, seen, twice, line = placement.roll_call
        if twice is not None:
            out += _each((("launcher_args", .6),), "placement:rank-started-twice", _Anchor(line))
        elif seen < world:
            out += _each((("launcher_args", .45),), "placement:ranks-missing", _Anchor(line))
    if placement.past_world:  # (after batch 42) a rank numbered at or past the world its launch command declares
        out += _each((("launcher_args", .6),), "placement:rank-past-world", _Anchor(placement.past_world[2]))
    # channels through NET/ (one host's GPUs talk over P2P or SHM), or the loopback among NCCL's socket interfaces (a
    # peer on another host cannot reach 127.0.0.1): the job spans hosts and the stall is between them, not the
    # one-host peer-to-peer hang (after batches 28 and 29)
    across = any(isinstance(r, ev.NcclMessage) and " via net/" in r.text.lower()
                 or isinstance(r, ev.NetInterface) and r.kind == "loopback" for r in records)
    if placement.stalled is not None and len(placement.nccl_hosts) == 1 and not placement.shared \
            and not _failed(records) and not across:
        # one host's ranks stopped inside NCCL's setup with no error and no GPU claimed twice: the peer-to-peer hang
        # (ACS/IOMMU redirecting P2P traffic), above the interfaces NCCL lists, which carry no traffic between GPUs
        # of one host (nccl-tests#115: veth interfaces listed, the IOMMU the cause); as strong as InfiniBand's own
        # lines where NCCL uses or expects its devices (not where it merely found none); a hang in any case
        ib = any(isinstance(r, ev.NcclMessage) and r.subsystem == "net_ib" and "no device found" not in r.text.lower()
                 for r in records)
        out += _each((("p2p_unsupported", .6 if ib else .75), ("rank_hang", .3)), "placement:one-host-stalled-in-nccl",
                     _Anchor(placement.stalled))
    if placement.clashes:  # one hostname, two addresses on one interface: two machines
        out += _each((("duplicate_host", .65),), "placement:address-clash", _Anchor(placement.clashes[0][3]))
    system_error = next((r for r in records if isinstance(r, ev.NcclMessage) and r.error_class == "system"), None)
    if system_error is not None and (placement.single_host or not placement.networked):
        out += _each((("shm_too_small", .4),), "placement:single-host-system-error", system_error)
    return out


def _failed(records: list) -> bool:
    """Any record of a failure: an exception, an exit status, a CUDA or OS error, an NCCL error class."""
    return any(isinstance(r, (ev.PyException, ev.ExitStatus, ev.CudaError, ev.OsErrno, ev.UndefinedSymbol))
               or (isinstance(r, ev.NcclMessage) and (r.error_class or r.level in ("ERROR", ""))) for r in records)
