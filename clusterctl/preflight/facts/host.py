"""Host facts: Docker engine, memory, clock and the Python/torch/NCCL versions (disk: disk.py).

Each fact is a `Command` plus a pure parser of its output. Parsers never raise on odd
output: a reason ends up in the fact's `error` field instead.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from clusterctl.preflight.facts._text import command_missing, excerpt, number, strip_provenance
from clusterctl.models import Command

# --------------------------------------------------------------------------- docker

DOCKER_INFO = Command(argv=("docker", "info", "--format", "{{json .}}"), timeout=30.0)


@dataclass(frozen=True)
class DockerInfo:
    server_version: Optional[str] = None
    runtimes: tuple[str, ...] = ()
    default_runtime: Optional[str] = None
    cgroup_driver: Optional[str] = None
    cdi_spec_dirs: tuple[str, ...] = ()
    error: Optional[str] = None  # why the engine could not be asked (daemon down, no permission)
    unreadable: Optional[str] = None  # the output was not understood: the engine's state is unknown

    @property
    def major_version(self) -> Optional[int]:
        match = re.match(r"^([0-9]{1,6})\.", self.server_version if isinstance(self.server_version, str) else "")
        return int(match.group(1)) if match else None

    @property
    def has_nvidia_runtime(self) -> bool:
        return "nvidia" in self.runtimes

    @property
    def reachable(self) -> bool:
        return self.error is None and bool(self.server_version)


def parse_docker_info(output: Union[str, Mapping[str, Any]]) -> DockerInfo:
    """`docker info --format '{{json .}}'` text, or the Docker SDK's `client.info()` dict.

    With the daemon down the CLI still prints JSON (client fields only, an empty
    ServerVersion) on stdout and the reason on stderr; `ServerErrors` carries it in
    newer clients.
    """
    if isinstance(output, Mapping):
        data: Mapping[str, Any] = output
        text = ""
    else:
        text = strip_provenance(output)
        data = _first_json_object(text) or {}
    if not data:
        return _docker_info_from_text(text)
    errors = data.get("ServerErrors")
    server_errors = [str(e) for e in errors] if isinstance(errors, list) else []
    version = _str(data.get("ServerVersion"))
    error = None
    if not version:
        error = "; ".join(server_errors) or _docker_error(text) or "the Docker daemon did not answer"
    runtimes = tuple(sorted(str(k) for k in _mapping(data.get("Runtimes"))))
    dirs = data.get("CDISpecDirs")
    return DockerInfo(
        server_version=version,
        runtimes=runtimes,
        default_runtime=_str(data.get("DefaultRuntime")),
        cgroup_driver=_str(data.get("CgroupDriver")),
        cdi_spec_dirs=tuple(str(d) for d in dirs) if isinstance(dirs, list) else (),
        error=error,
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    """A JSON object, or {} for anything else a broken or foreign document holds there."""
    return value if isinstance(value, Mapping) else {}


def _str(value: Any) -> Optional[str]:
    return value if isinstance(value, str) and value else None


def _docker_info_from_text(text: str) -> DockerInfo:
    """The human `docker info` layout (or a grep of it): `Runtimes: io.containerd.runc.v2 nvidia runc`."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(": ")
        if sep and key in ("Server Version", "Runtimes", "Default Runtime", "Cgroup Driver"):
            values[key] = value.strip()
    if not values:
        known = _docker_error(text)
        reason = f"`docker info` printed {excerpt(text)}"
        return DockerInfo(error=known or reason, unreadable=None if known else reason)
    return DockerInfo(
        server_version=values.get("Server Version"),
        runtimes=tuple(sorted(values.get("Runtimes", "").split())),
        default_runtime=values.get("Default Runtime"),
        cgroup_driver=values.get("Cgroup Driver"),
        error=_docker_error(text),
    )


def _first_json_object(text: str) -> Optional[dict]:
    start = text.find("{")
    if start < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _docker_error(text: str) -> Optional[str]:
    if command_missing(text, "docker"):
        return "docker is not installed (command not found)"
    for line in text.splitlines():
        if "Cannot connect to the Docker daemon" in line or "permission denied" in line.lower():
            return line.strip()
    return None


@dataclass(frozen=True)
class ContainerState:
    name: str
    image: str
    running: bool
    status: str
    network_mode: Optional[str] = None
    ipc_mode: Optional[str] = None
    shm_size_bytes: Optional[int] = None
    gpu_request: Optional[str] = None  # "all", a count, device ids; None when no GPUs asked for
    error: Optional[str] = None
    unreadable: Optional[str] = None  # neither a container nor docker's "no such container"
    instance: Optional[str] = None  # "<Id> <StartedAt>" while running: a restart or a new container changes it


def docker_inspect_command(name: str) -> Command:
    return Command(argv=("docker", "inspect", "--type", "container", name), timeout=30.0, ok_exit_codes=(0, 1))


def parse_docker_inspect(output: Union[str, Mapping[str, Any]]) -> ContainerState:
    """`docker inspect --type container NAME` (a JSON list), or the SDK's `container.attrs`."""
    if isinstance(output, Mapping):
        data: Mapping[str, Any] = output
    else:
        text = strip_provenance(output)
        try:
            parsed = json.loads(text[text.find("["):]) if "[" in text else None
        except ValueError:
            parsed = None
        if not parsed or not isinstance(parsed, list) or not isinstance(parsed[0], dict):
            reason = text.strip().splitlines()[-1] if text.strip() else "no such container"
            known = re.search(r"No such (container|object)|Error|Cannot connect|permission denied|not found", text, re.I)
            unreadable = None if known or not text.strip() else f"`docker inspect` printed {excerpt(text)}"
            return ContainerState(name="", image="", running=False, status="missing", error=reason,
                                  unreadable=unreadable)
        data = parsed[0]
    state, host_config = _mapping(data.get("State")), _mapping(data.get("HostConfig"))
    config = _mapping(data.get("Config"))
    shm = host_config.get("ShmSize")
    return ContainerState(
        name=str(data.get("Name", "")).lstrip("/"),
        image=str(config.get("Image", "")),
        running=bool(state.get("Running")),
        status=str(state.get("Status", "")),
        network_mode=_str(host_config.get("NetworkMode")),
        ipc_mode=_str(host_config.get("IpcMode")),
        shm_size_bytes=shm if isinstance(shm, int) and not isinstance(shm, bool) else None,
        gpu_request=_gpu_request(host_config.get("DeviceRequests")),
        instance=f"{data.get('Id', '')} {state.get('StartedAt', '')}" if state.get("Running") else None,
    )


def _gpu_request(requests: Any) -> Optional[str]:
    for request in requests if isinstance(requests, list) else ():
        request = _mapping(request)
        groups = request.get("Capabilities")
        capabilities = [c for group in (groups if isinstance(groups, list) else ()) if isinstance(group, list)
                        for c in group]
        if "gpu" not in capabilities and request.get("Driver") != "nvidia":
            continue
        ids = request.get("DeviceIDs")
        if isinstance(ids, list) and ids:
            return ",".join(str(i) for i in ids)
        count = request.get("Count", 0)
        return "all" if count == -1 else str(count)
    return None


# --------------------------------------------------------------------------- memory, clock


MEMINFO = Command(argv=("cat", "/proc/meminfo"), timeout=10.0)
BOOT_ID = Command(argv=("cat", "/proc/sys/kernel/random/boot_id"), timeout=10.0)  # new at every boot


@dataclass(frozen=True)
class MemInfo:
    total_bytes: int
    available_bytes: int


def parse_meminfo(text: str) -> Optional[MemInfo]:
    values: dict[str, int] = {}
    for line in strip_provenance(text).splitlines():
        match = re.match(r"^(\w+):\s+([0-9]{1,18})\s*(kB)?\b", line)
        if match:
            values[match.group(1)] = int(match.group(2)) * (1024 if match.group(3) else 1)
    if "MemTotal" not in values:
        return None
    available = values.get("MemAvailable", values.get("MemFree", 0))
    return MemInfo(total_bytes=values["MemTotal"], available_bytes=available)


CLOCK = Command(argv=("date", "+%s.%N"), timeout=10.0)


def parse_clock(text: str) -> Optional[float]:
    """Seconds since the epoch from `date +%s.%N` (a date without %N support prints 'N')."""
    for line in strip_provenance(text).splitlines():
        match = re.match(r"^\s*(\d+)(?:\.(\d+))?\s*$", line)
        if match:
            return float(f"{match.group(1)}.{match.group(2) or 0}")
        match = re.match(r"^\s*(\d+)\.N\s*$", line)
        if match:
            return float(match.group(1))
    return None


def clock_offset(remote_epoch: float, local_before: float, local_after: float) -> float:
    """The remote clock minus ours, taking our reading at the middle of the round trip."""
    return remote_epoch - (local_before + local_after) / 2.0


# --------------------------------------------------------------------------- versions

# Printed as one JSON line. torch is located and read, not imported: importing it costs
# ~2 s of CPU per node (and on a shared 2-core rehearsal machine, 16 nodes' imports are
# most of `up`). The version and CUDA come from torch/version.py, NCCL from the
# nvidia-nccl wheel beside torch, which torch loads (none: NCCL is linked into torch).
VERSIONS_SNIPPET = """\
import json, os, re, sys
out = {"python": "%d.%d.%d" % sys.version_info[:3]}
try:
    from importlib import util
    spec = util.find_spec("torch")
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("No module named 'torch'")
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
            text = f.read()
    except OSError:  # not a wheel's layout: ask torch itself
        import torch
        version = getattr(torch, "version", None)
        text = "__version__ = '%s'\\ncuda = '%s'\\n" % (torch.__version__, getattr(version, "cuda", None) or "")
    found = re.search(r"^__version__\\s*=\\s*['\\"]([^'\\"]+)", text, re.M)
    out["torch"] = found.group(1) if found else None
    found = re.search(r"^cuda\\b[^=\\n]*=\\s*['\\"]([^'\\"]+)", text, re.M)
    out["cuda"] = found.group(1) if found else None
    out["nccl"] = None
    if out["cuda"]:
        out["nccl"] = "bundled"
        site = os.path.dirname(os.path.dirname(spec.origin))
        for entry in sorted(os.listdir(site)):
            found = re.match(r"nvidia_nccl_cu\\d+-([\\w.]+)\\.dist-info$", entry)
            if found:
                out["nccl"] = found.group(1)
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""


def versions_command(python: str = "python3") -> Command:
    return Command(argv=(python, "-c", VERSIONS_SNIPPET), timeout=60.0)


@dataclass(frozen=True)
class Versions:
    python: Optional[str] = None
    torch: Optional[str] = None
    cuda: Optional[str] = None
    nccl: Optional[str] = None
    cuda_available: bool = False
    gpu_count: int = 0
    error: Optional[str] = None

    @property
    def key(self) -> tuple:
        """What must be identical across nodes."""
        return (self.python, self.torch, self.cuda, self.nccl)

    def describe(self) -> str:
        if self.error and not self.torch:
            return f"python {self.python or '?'}, no torch ({self.error})"
        return f"python {self.python}, torch {self.torch}, cuda {self.cuda or 'none'}, nccl {self.nccl or 'none'}"


def parse_versions(text: str) -> Versions:
    """The snippet's JSON line; also a bare traceback or a missing interpreter."""
    text = strip_provenance(text)
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if not isinstance(data, dict):
                continue
            return Versions(
                python=_str(data.get("python")),
                torch=_str(data.get("torch")),
                cuda=_str(data.get("cuda")),
                nccl=_nccl_version(data.get("nccl")),
                cuda_available=bool(data.get("cuda_available")),
                gpu_count=number(str(data.get("gpu_count") or 0)) or 0,
                error=_str(data.get("error")) or _str(data.get("nccl_error")),
            )
    missing = re.search(r"No module named '?torch'?", text)
    if missing:
        return Versions(error="ModuleNotFoundError: No module named 'torch'")
    if re.search(r"python3?\S*: (command )?not found|No such file or directory", text):
        return Versions(error="python is not installed on this node")
    last = text.strip().splitlines()[-1] if text.strip() else "the versions snippet printed nothing"
    return Versions(error=last)


def _nccl_version(value: Any) -> Optional[str]:
    """torch < 2.0 returned NCCL's version as one int (2.18.3 -> 21803)."""
    if value is None or isinstance(value, (bool, dict, list)):
        return None
    text = str(value)
    code = number(text)
    if code is not None and len(text) >= 5:  # NCCL >= 2.9: major*10000 + minor*100 + patch
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    if code is not None and len(text) == 4:  # older: major*1000 + minor*100 + patch
        return f"{code // 1000}.{code // 100 % 10}.{code % 100}"
    return text
