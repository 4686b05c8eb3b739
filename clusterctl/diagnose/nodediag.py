"""Pure parsers of node diagnostics, for the diagnosis: kernel OOM kills and Xid lines (dmesg),
ECC / retired pages / row remapping (`nvidia-smi -q`), and a container's final state
(`docker inspect`: OOMKilled, ExitCode).

collect-logs already fetches these as `<host>/diag/dmesg.txt` (dmesg filtered on oom|xid|nvrm),
`nvidia-smi-q.txt` and `docker-inspect.json` (collect/fetch.py `diag_sections`); rundir.py feeds
them through these parsers, so `collect-logs` and `diagnose DIR` see the same evidence. The run
path can call the same functions on the same commands' output.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Optional

OOM_KILL = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Kill(?:ed)? process (?P<pid>\d+) "
                      r"\((?P<name>[^)]*)\)|^(?:\[[^\]]*\]\s*)?Killed process (?P<pid2>\d+) \((?P<name2>[^)]*)\)"
                      r"|oom-kill:.*?task=(?P<name3>[^,\s]+),pid=(?P<pid3>\d+)", re.IGNORECASE)
XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[^)]*)\): (?P<xid>\d+)(?:, pid=(?P<pid>'?[^,']*'?))?"
                 r"(?:, name=(?P<name>[^,]*))?,?\s*(?P<message>.*)")
FELL_OFF = re.compile(r"fallen off the bus", re.IGNORECASE)  # the driver wraps this message over 3 lines
GPU_AT = re.compile(r"NVRM: (?:The NVIDIA )?GPU (?:at PCI:)?(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F:.]+)")


@dataclass(frozen=True)
class OomKill:
    pid: int
    process: str
    line: str


@dataclass(frozen=True)
class Xid:
    pci: str
    xid: int
    process: str
    message: str
    line: str


@dataclass(frozen=True)
class EccState:
    volatile_uncorrectable: int = 0
    aggregate_uncorrectable: int = 0
    retired_pending: bool = False
    remap_pending: bool = False
    remap_failure: bool = False

    @property
    def bad(self) -> bool:
        return bool(self.volatile_uncorrectable or self.retired_pending or self.remap_pending or self.remap_failure)

    def describe(self) -> str:
        parts = []
        if self.volatile_uncorrectable:
            parts.append(f"{self.volatile_uncorrectable} volatile uncorrectable ECC error(s)")
        if self.aggregate_uncorrectable:
            parts.append(f"{self.aggregate_uncorrectable} aggregate")
        parts += [text for flag, text in ((self.retired_pending, "retired pages pending"),
                                          (self.remap_pending, "row remapping pending"),
                                          (self.remap_failure, "row remapping failure")) if flag]
        return ", ".join(parts) or "no ECC errors"


@dataclass(frozen=True)
class ContainerState:
    status: str
    exit_code: Optional[int]
    oom_killed: bool

    def describe(self) -> str:
        return (f"docker inspect: Status={self.status} ExitCode={self.exit_code} "
                f"OOMKilled={str(self.oom_killed).lower()}")


def oom_kills(dmesg: str) -> list[OomKill]:
    kills = []
    for line in dmesg.splitlines():
        match = OOM_KILL.search(line)
        if match:
            pid = match.group("pid") or match.group("pid2") or match.group("pid3")
            name = match.group("name") or match.group("name2") or match.group("name3") or ""
            kills.append(OomKill(int(pid), name, line.strip()))
    return kills


def xids(dmesg: str) -> list[Xid]:
    found, last_gpu = [], ""
    for line in dmesg.splitlines():
        match = XID.search(line)
        gpu = GPU_AT.search(line)
        last_gpu = gpu.group("pci") if gpu else last_gpu
        if match:
            found.append(Xid(match.group("pci"), int(match.group("xid")), (match.group("name") or "").strip(),
                             match.group("message").strip(), line.strip()))
        elif FELL_OFF.search(line):  # Xid 79's condition, reported without an Xid by some drivers
            found.append(Xid(last_gpu, 79, "", "GPU has fallen off the bus", line.strip()))
    return found


def ecc_state(smi_q: str) -> EccState:
    """Sum the uncorrectable counters of `nvidia-smi -q` over all GPUs ("N/A" counts as 0)."""
    volatile = aggregate = 0
    retired = pending = failure = False
    section: list[str] = []  # indentation-scoped path of section names
    for raw in smi_q.splitlines():
        stripped = raw.strip()
        if not stripped:
            continue
        depth = (len(raw) - len(raw.lstrip(" "))) // 4
        key, sep, value = stripped.partition(":")
        key, value = key.strip(), value.strip()
        del section[depth:]
        if not sep or not value:
            section.append(key)
            continue
        path = " > ".join(section).lower()
        count = int(value) if value.isdigit() else 0
        lowered = key.lower()
        if "ecc errors" in path and ("uncorrectable" in lowered or "double bit" in path and lowered == "total"):
            if "volatile" in path:
                volatile += count
            elif "aggregate" in path:
                aggregate += count
        elif "retired pages" in path and "pending" in lowered:
            retired |= value.lower() == "yes"
        elif "remapped rows" in path and lowered == "pending":
            pending |= value.lower() == "yes"
        elif "remapped rows" in path and "failure" in lowered:
            failure |= value.lower() == "yes"
    return EccState(volatile, aggregate, retired, pending, failure)


def container_state(inspect_json: str) -> Optional[ContainerState]:
    """The State of the first container in `docker inspect` output (a list or one object); None if unreadable."""
    try:
        data = json.loads(inspect_json)
    except (ValueError, RecursionError):
        return None
    data = data[0] if isinstance(data, list) and data else data
    state = data.get("State") if isinstance(data, dict) else None
    if not isinstance(state, dict):
        return None
    code = state.get("ExitCode")
    return ContainerState(str(state.get("Status", "")), code if isinstance(code, int) else None,
                          state.get("OOMKilled") is True)
