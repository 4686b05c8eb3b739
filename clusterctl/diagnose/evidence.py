"""Typed evidence: what distributed failure logs are made of, parsed line by line before any cause is named
(this module, evidence_system.py for stores/containers/kernel, evidence_config.py for configuration).

`extract(lines)` turns parsed log lines (logformat.LogLine) into evidence records: NCCL messages
(level, subsystem, call, NCCL's error class), CUDA errors by enum (every spelling: the runtime's
message, `cudaError*`, `CUDA_ERROR_*`, `Cuda failure 'msg'`, numeric codes), exit statuses and
signals (exit codes, negative return codes, 128+N, signal names, launchers' banners), Python
exception types with the innermost frame's module, c10d/TCPStore/rendezvous messages,
Docker/containerd/registry errors, kernel lines (OOM killer, Xid, segfault, IOMMU faults) and
launcher banners (torchrun, DeepSpeed, accelerate, mpirun, srun).

The parsers know message *shapes* (a CUDA error is an enum whatever wraps it), not causes:
families.py maps each record to the causes it supports, with weights. Every parser is a bounded
regex behind a cheap literal check; remote text (garbage, truncation, megabyte lines) never makes
one fail or backtrack for long (MAX_LINE caps what is looked at; tests/unit/test_diagnose_evidence.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from clusterctl.diagnose import evidence_config, evidence_system
from clusterctl.diagnose.evidence_config import (NetInterface, PlatformHint, ResourceExhausted,  # noqa: F401
                                                  ServiceFailure, UsageError, VersionRelation)
from clusterctl.diagnose.evidence_system import ContainerError, KernelLine, StoreMessage  # noqa: F401
from clusterctl.diagnose.logformat import LogLine
from clusterctl.diagnose.reader import MAX_LINE
from clusterctl.diagnose.textmatch import NCCL_CLASS_DESCRIPTION, compile_kinds, first_kind, gated, lines_holding


@dataclass(frozen=True)
class NcclMessage:
    line: LogLine
    level: str  # WARN | INFO | ERROR | "" (torch's "NCCL error ..." wrapper)
    subsystem: str  # "net_ib", "socket", "shm", "p2p", "nvls", "bootstrap", "init", "proxy", ... or ""
    call: str  # the failing call it names (socketStartConnect, ibv_create_qp, cudaIpcOpenMemHandle), or ""
    error_class: str  # system | internal | unhandled_cuda | remote | invalid_usage | invalid_argument | ""
    text: str


@dataclass(frozen=True)
class CudaError:
    line: LogLine
    name: str  # the runtime enum, e.g. cudaErrorNoKernelImageForDevice; "cudaError<code>" when only a code is known
    code: Optional[int]


@dataclass(frozen=True)
class ExitStatus:
    line: LogLine
    code: Optional[int]  # the process's exit code as printed (negative: killed by that signal)
    signal: Optional[int]  # the signal that ended it, when known (-9, 137, SIGKILL, "Killed" -> 9)
    launcher: str = ""


@dataclass(frozen=True)
class PyException:
    line: LogLine
    type: str  # the last dotted part: ModuleNotFoundError, OutOfMemoryError, gaierror
    qualified: str  # as printed: torch.OutOfMemoryError
    message: str
    module: str  # the innermost traceback frame's module (torch.distributed.rendezvous, ...) or ""


@dataclass(frozen=True)
class OsErrno:
    line: LogLine
    errno: int  # as Linux numbers it (ENOSPC 28); getaddrinfo's EAI_* negative (-2, -3)


@dataclass(frozen=True)
class UndefinedSymbol:
    line: LogLine
    symbol: str  # a dynamic linker's `undefined symbol: X`: a library built against another version


@dataclass(frozen=True)
class LauncherBanner:
    line: LogLine
    launcher: str  # torchrun | deepspeed | accelerate | mpirun | srun


# --------------------------------------------------------------------------- CUDA errors

# (runtime enum, code, the runtime's message, the driver API's enum)
CUDA_ERRORS = (
    ("cudaErrorInvalidValue", 1, "invalid argument", "CUDA_ERROR_INVALID_VALUE"),
    ("cudaErrorMemoryAllocation", 2, "out of memory", "CUDA_ERROR_OUT_OF_MEMORY"),
    ("cudaErrorInitializationError", 3, "initialization error", "CUDA_ERROR_NOT_INITIALIZED"),
    ("cudaErrorMapBufferObjectFailed", 14, "mapping of buffer object failed", "CUDA_ERROR_MAP_FAILED"),
    ("cudaErrorInsufficientDriver", 35, "CUDA driver version is insufficient for CUDA runtime version", ""),
    ("cudaErrorDevicesUnavailable", 46, "all CUDA-capable devices are busy or unavailable", ""),
    ("cudaErrorInvalidDeviceFunction", 98, "invalid device function", ""),
    ("cudaErrorNoDevice", 100, "no CUDA-capable device is detected", "CUDA_ERROR_NO_DEVICE"),
    ("cudaErrorInvalidDevice", 101, "invalid device ordinal", "CUDA_ERROR_INVALID_DEVICE"),
    ("cudaErrorNoKernelImageForDevice", 209, "no kernel image is available for execution on the device",
     "CUDA_ERROR_NO_BINARY_FOR_GPU"),
    ("cudaErrorECCUncorrectable", 214, "uncorrectable ECC error encountered", "CUDA_ERROR_ECC_UNCORRECTABLE"),
    ("cudaErrorPeerAccessUnsupported", 217, "peer access is not supported between these two devices",
     "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"),
    ("cudaErrorNvlinkUncorrectable", 220, "uncorrectable NVLink error detected during the execution",
     "CUDA_ERROR_NVLINK_UNCORRECTABLE"),
    ("cudaErrorUnsupportedPtxVersion", 222, "the provided PTX was compiled with an unsupported toolchain",
     "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
    ("cudaErrorOperatingSystem", 304, "OS call failed or operation not supported on this OS",
     "CUDA_ERROR_OPERATING_SYSTEM"),
    ("cudaErrorInvalidResourceHandle", 400, "invalid resource handle", "CUDA_ERROR_INVALID_HANDLE"),
    ("cudaErrorPeerAccessNotEnabled", 705, "peer access has not been enabled", "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"),
    ("cudaErrorIllegalAddress", 700, "an illegal memory access was encountered", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    ("cudaErrorAssert", 710, "device-side assert triggered", "CUDA_ERROR_ASSERT"),
    ("cudaErrorLaunchFailure", 719, "unspecified launch failure", "CUDA_ERROR_LAUNCH_FAILED"),
    ("cudaErrorSystemNotReady", 802, "system not yet initialized", "CUDA_ERROR_SYSTEM_NOT_READY"),
    ("cudaErrorSystemDriverMismatch", 803, "system has unsupported display driver / cuda driver combination",
     "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"),
    ("cudaErrorCompatNotSupportedOnDevice", 804, "forward compatibility was attempted on non supported HW",
     "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"),
)
_CUDA_BY_TEXT = {}
for _name, _code, _message, _driver in CUDA_ERRORS:
    for _key in (_name, _message, _driver):
        if _key:
            _CUDA_BY_TEXT[_key.lower()] = (_name, _code)
_CUDA_BY_CODE = {code: (name, code) for name, code, _, _ in CUDA_ERRORS}
# The messages are matched only where a CUDA context is said ("CUDA error: out of memory",
# "Cuda failure 'invalid argument'", "cudaErrorX"): "invalid argument" alone is not a CUDA error.
_CUDA_CONTEXT = re.compile(
    r"(?:CUDA error|Cuda failure|CUDA failure|cuda runtime error|CUDA_ERROR|cudaError|CUresult|CUDA driver error|"
    r"CUDA Runtime Error|cuda error|cuda[A-Z]\w{2,30}\(?\)? (?:err(?:or)?|failed|returned))[^\n]{0,40}?(?:\((?P<code>\d{1,4})\))?[\s:=]*(?P<code2>\d{1,4})?\s*'?(?P<msg>[^'\n]"
    r"{0,100})", re.IGNORECASE)
_CUDA_ENUM = re.compile(r"\b(cudaError\w+|CUDA_ERROR_[A-Z_]+)\b")
_CUDA_MESSAGES = re.compile("|".join(re.escape(m) for _, _, m, _ in sorted(CUDA_ERRORS, key=lambda e: -len(e[2]))),
                            re.IGNORECASE)


@gated("cuda")
def cuda_errors(line: LogLine, lowered: str) -> list[CudaError]:
    text = line.text[:MAX_LINE]
    found = []
    for match in _CUDA_ENUM.finditer(text):
        name, code = _CUDA_BY_TEXT.get(match.group(1).lower(), (match.group(1), None))
        found.append(CudaError(line, name, code))
    match = _CUDA_CONTEXT.search(text)
    if match:
        message = _CUDA_MESSAGES.search(match.group("msg") or "")
        code = match.group("code") or match.group("code2")
        if message:
            found.append(CudaError(line, *_CUDA_BY_TEXT[message.group(0).lower()]))
        elif code and int(code) in _CUDA_BY_CODE:
            found.append(CudaError(line, *_CUDA_BY_CODE[int(code)]))
    return list({e.name: e for e in found}.values())


# --------------------------------------------------------------------------- NCCL

_NCCL_LINE = re.compile(r"(?:(?P<file>[\w/]+\.(?:cc|cu|h|cpp)):\d+ )?NCCL (?P<level>WARN|INFO|ERROR)\s+(?P<msg>.*)")
_NCCL_ERROR_CLASSES = (
    ("system", r"unhandled system error|ncclSystemError"),
    ("internal", r"internal error|ncclInternalError"),
    ("unhandled_cuda", r"unhandled cuda error|ncclUnhandledCudaError"),
    ("remote", r"remote process exited or there was a network error|ncclRemoteError"),
    ("invalid_usage", r"invalid usage|ncclInvalidUsage"),
    ("invalid_argument", r"invalid argument|ncclInvalidArgument"),
)
_NCCL_ERROR_RE = compile_kinds(_NCCL_ERROR_CLASSES)
# A subsystem named by the file (newer NCCL) or by the message's own prefix (older NCCL).
_SUBSYSTEMS = (
    ("net_ib", r"net_ib|NET/IB|\bibv_|IBext|\bmlx5|\bRoCE\b|GID index|transport retry"),
    ("shm", r"transport/shm|shmutils|shm\.cc|/dev/shm|shm_open|ncclShm|\bshm\b"),
    ("p2p", r"transport/p2p|p2p\.cc|\bP2P\b|cudaIpc|peer access|peer mapping"),
    ("nvls", r"nvls|NVLS"),
    ("socket", r"socket\.cc|NET/Socket|\bsocket\w*|Connect to|connection (?:refused|timed out|closed)|No route to host"),
    ("bootstrap", r"bootstrap"),
    ("proxy", r"proxy\.cc|\bproxy"),
    ("init", r"init\.cc|ncclCommInit|Duplicate GPU|hostHash|host hash"),
    ("enqueue", r"enqueue\.cc|collective|mismatch"),
)
_SUBSYSTEM_RE = compile_kinds(_SUBSYSTEMS)
_CALL = re.compile(r"\b(?:Call to )?((?:ibv|cuda|cu|socket|nccl|shm|posix|bootstrap)\w{2,40})\b")


_IB_VERBS = re.compile(r"(?:NET/IBP? ?:|\bmlx5_\d+:\d+\b).{0,200}(?:error|fail|unable|No device|async|down)"
                       r"|\bibv_\w+ failed|Call to ibv_\w+", re.IGNORECASE)


@gated("nccl", "unhandled system error", "unhandled cuda error", "ibv_", "net/ib", "mlx5_", "remnode")
def nccl_messages(line: LogLine, lowered: str) -> list[NcclMessage]:
    if "nccl" not in lowered and "unhandled system error" not in lowered and "unhandled cuda error" not in lowered:
        if ("ibv_" in lowered or "net/ib" in lowered or "mlx5_" in lowered) and _IB_VERBS.search(line.text[:MAX_LINE]):
            return [NcclMessage(line, "WARN", "net_ib", "", "", line.text[:400])]
        if "remnode" in lowered or "ncclTopo" in line.text[:MAX_LINE]:  # NCCL's topology search, quoted bare
            return [NcclMessage(line, "WARN", "topology", "", "", line.text[:400])]
        return []
    text = line.text[:MAX_LINE]
    error_class = first_kind(_NCCL_ERROR_RE, text)
    match = _NCCL_LINE.search(text)
    if match is None and not error_class:
        return []
    level = match.group("level").upper() if match else ""
    body = (match.group("file") or "") + " " + match.group("msg") if match else text
    body = NCCL_CLASS_DESCRIPTION.sub("", body)
    subsystem = first_kind(_SUBSYSTEM_RE, body)
    call = _CALL.search(body)
    return [NcclMessage(line, level, subsystem, call.group(1) if call else "", error_class, body.strip()[:400])]


# --------------------------------------------------------------------------- exits and signals

SIGNAL_NAMES = {"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6, "SIGBUS": 7,
                "SIGFPE": 8, "SIGKILL": 9, "SIGUSR1": 10, "SIGSEGV": 11, "SIGUSR2": 12, "SIGPIPE": 13,
                "SIGALRM": 14, "SIGTERM": 15, "SIGXCPU": 24, "KILLED": 9, "SEGMENTATION FAULT": 11,
                "BUS ERROR": 7, "ABORTED": 6, "HANGUP": 1, "TERMINATED": 15}
_EXIT_CODE = re.compile(
    r"(?:exitcode|exit[ _]code|return[ _]code|exit status|exit value|returned non-zero exit status|exited with"
    r"(?: exit)?(?: code)?|ExitCode|exits with return code|ret(?:urn)?code)\W{0,4}?(?P<code>-?\d{1,3})\b", re.IGNORECASE)
_SIGNAL = re.compile(
    r"(?:signal[: ]+(?P<num>\d{1,2})\b(?: ?\((?P<paren>\w+)\))?|\b(?P<death>\d{1,2}) death signal|\b(?:Signals\.)?(?P<name>SIG(?:HUP|INT|QUIT|ILL|ABRT|BUS|"
    r"FPE|KILL|SEGV|PIPE|TERM|USR1|USR2|XCPU))\b|killed by signal:? (?P<word>Killed|Segmentation fault|Bus error"
    r"|Aborted|Hangup|Terminated)|Fatal Python error: (?P<fatal>Segmentation fault|Bus error|Aborted)"
    r"|^(?:\S+: )?(?P<bare>Killed|Segmentation fault|Bus error|Aborted)(?: \(core dumped\))?\s*$"
    # a shell reporting its job ended by a signal: `script: line 12:   811 Killed    python train.py`
    r"|\bline \d+: +\d+ (?P<job>Killed|Segmentation fault|Bus error|Aborted)\b)", re.IGNORECASE)
_LAUNCHERS = (
    ("torchrun", r"torch\.distributed\.(?:elastic|run|launch)|Root Cause \(first observed failure\)|torchrun"),
    ("deepspeed", r"deepspeed|\[launch\.py:\d+:\w+\]"),
    ("accelerate", r"accelerate"),
    ("mpirun", r"mpirun|mpiexec|\borted\b|prterun|\bORTE\b"),
    ("srun", r"\bsrun:|slurmstepd"),
)
_LAUNCHER_RE = compile_kinds(_LAUNCHERS)
@gated("exit", "code", "signal", "sig", "killed", "segmentation", "bus error", "aborted", "status")
def exit_statuses(line: LogLine, lowered: str) -> list[ExitStatus]:
    text = line.text[:MAX_LINE]
    launcher = first_kind(_LAUNCHER_RE, text)
    found = []
    code_match = _EXIT_CODE.search(text)
    code = int(code_match.group("code")) if code_match else None
    signal = -code if code is not None and code < 0 else (code - 128 if code is not None and 128 < code < 160
                                                           else None)
    match = _SIGNAL.search(text)
    if match:
        if match.group("num") or match.group("death"):  # torchrun's agent: `Received 15 death signal`
            signal = int(match.group("num") or match.group("death"))
        else:
            word = next(g for g in ("paren", "name", "word", "fatal", "bare", "job") if match.group(g))
            signal = SIGNAL_NAMES.get(match.group(word).upper(), signal)
    if code is not None or signal is not None:
        found.append(ExitStatus(line, code, signal, launcher))
    return found


# --------------------------------------------------------------------------- Python exceptions

_EXCEPTION = re.compile(r"(?:^|(?<=[\]\s:>)]))(?P<qualified>(?:[A-Za-z_]\w*\.){0,6}(?P<type>[A-Za-z_]\w*(?:Error|Exception|Exit|error"
                        r"|Interrupt|Warning)))(?::\s*(?P<message>.*))?$")
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]{1,500})", line \d+')


def frame_module(path: str) -> str:
    """`.../site-packages/torch/distributed/rendezvous.py` -> torch.distributed.rendezvous."""
    path = path.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/", "/lib/python3"):
        if marker in path:
            path = path.split(marker)[-1]
            if marker == "/lib/python3":
                path = path.split("/", 1)[-1]
            break
    else:
        path = path.rsplit("/", 1)[-1]
    return path[:-3].replace("/", ".") if path.endswith(".py") else path.replace("/", ".")


def exception_named(text: str) -> Optional[str]:
    """The qualified name of the Python exception `text` states (`torch.distributed...SignalException`,
    `RuntimeError`), or None (a warning is none)."""
    match = _exception_match(text)
    return match.group("qualified") if match else None


def _exception_match(text: str):
    """The match of a Python exception line (`Type: message`), None for none or a warning."""
    match = _EXCEPTION.search(text[:MAX_LINE].strip())
    return None if not match or match.group("type").endswith("Warning") else match


def py_exception(line: LogLine, last_frame: str) -> list[PyException]:
    match = _exception_match(line.text)
    if not match:
        return []
    return [PyException(line, match.group("type"), match.group("qualified"), (match.group("message") or "")[:400],
                        last_frame)]


# --------------------------------------------------------------------------- errno

ERRNO_NAMES = {"ENOSPC": 28, "EDQUOT": 122, "EACCES": 13, "EPERM": 1, "EADDRINUSE": 98, "ECONNREFUSED": 111,
               "EHOSTUNREACH": 113, "ENETUNREACH": 101, "ENOMEM": 12, "EROFS": 30, "ETIMEDOUT": 110}
ERRNO_MESSAGES = {"no space left on device": 28, "bind error": 98, "failed to bind": 98, "port may have been used": 98,
                  "port is occupied": 98, "port occupied": 98, "port is already in use": 98, "disk quota exceeded": 122, "permission denied": 13,
                  "address already in use": 98, "connection refused": 111, "no route to host": 113,
                  "network is unreachable": 101, "name or service not known": -2,
                  "temporary failure in name resolution": -3, "cannot allocate memory": 12,
                  "read-only file system": 30}
_ERRNO = re.compile(r"\[Errno (-?\d{1,3})\]|\berrno:? ?(-?\d{1,3})\b|\b(E(?:NOSPC|DQUOT|ACCES|ADDRINUSE|CONNREFUSED"
                    r"|HOSTUNREACH|NETUNREACH|NOMEM|ROFS))\b|(" + "|".join(ERRNO_MESSAGES) + ")", re.IGNORECASE)


@gated("err", *ERRNO_MESSAGES)
def os_errnos(line: LogLine, lowered: str) -> list[OsErrno]:
    match = _ERRNO.search(line.text[:MAX_LINE])
    if not match:
        return []
    number, number2, name, message = match.groups()
    value = number or number2
    if value is not None:
        return [OsErrno(line, int(value))]
    if name:
        return [OsErrno(line, ERRNO_NAMES[name.upper()])]
    if message.lower() == "failed to bind" and _NOT_A_PORT.search(line.text[:MAX_LINE]):
        return []  # NCCL binding NVLS multicast memory, not a socket to a port
    return [OsErrno(line, ERRNO_MESSAGES[message.lower()])]


_NOT_A_PORT = re.compile(r"failed to bind \S*\s*(?:NVLink|NVLS|multicast|memory|buffer)", re.IGNORECASE)


# --------------------------------------------------------------------------- undefined symbols

_UNDEFINED = re.compile(r"undefined symbol:? ?(\w{2,200})")


@gated("undefined symbol")
def undefined_symbols(line: LogLine, lowered: str) -> list[UndefinedSymbol]:
    match = _UNDEFINED.search(line.text[:MAX_LINE])
    return [UndefinedSymbol(line, match.group(1))] if match else []


@gated("root cause", "launch.py", "mpirun", "accelerate", "srun:", "primary job")
def launcher_banners(line: LogLine, lowered: str) -> list[LauncherBanner]:
    text = line.text[:MAX_LINE]
    for name, regex in _LAUNCHER_RE:
        if regex.search(text):
            return [LauncherBanner(line, name)]
    if "primary job" in lowered:
        return [LauncherBanner(line, "mpirun")]
    return []


# --------------------------------------------------------------------------- all of it

PER_LINE = (cuda_errors, nccl_messages, exit_statuses, os_errnos, undefined_symbols, launcher_banners,
            evidence_system.store_messages, evidence_system.container_errors,
            evidence_system.kernel_lines) + evidence_config.PARSERS


EXCEPTION_GATE = frozenset(("error", "exception", "exit", "interrupt"))
GATE_WORDS = frozenset().union(EXCEPTION_GATE, *(parser.gate for parser in PER_LINE))


def extract(lines: list[LogLine]) -> list:
    """Every evidence record of `lines`, in line order. Each parser runs only on the lines holding one of its gate
    words, found for the whole log at once (most lines of a training log hold none)."""
    out: list = []
    last_frame = ""
    lowers = [line.text[:MAX_LINE].lower() for line in lines]
    holding = lines_holding(lowers, GATE_WORDS)
    for index, line in enumerate(lines):
        text = line.text
        frame = _FRAME.match(text[:MAX_LINE]) if text.lstrip().startswith("File ") else None
        if frame:
            last_frame = frame_module(frame.group("path"))
            continue
        words = holding.get(index)
        if not words:
            continue
        lowered = lowers[index]
        for parser in PER_LINE:
            if not words.isdisjoint(parser.gate):
                out.extend(parser.parse(line, lowered))
        if not words.isdisjoint(EXCEPTION_GATE):
            found = py_exception(line, last_frame)
            if found:
                out.extend(found)
                last_frame = ""
    return out
