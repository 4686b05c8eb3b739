"""nvidia-smi facts: GPUs and their compute processes (topology and fabric: nvlink.py).

Every parser takes the tool's text (stdout, with stderr appended: see `combined`) and
never raises. When nvidia-smi is missing or cannot reach the driver the result says
"no GPUs" and carries the tool's own reason; output it does not understand is
`unreadable`, never "no GPUs". CSV columns are matched by the names in the header
(`--format=csv`), by the fields asked for otherwise, and a row whose width does not fit
is skipped rather than read by position. Driver 610+ prints `KMD Version` and
`CUDA UMD Version` where older drivers print `Driver Version` and `CUDA Version`.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from clusterctl.preflight.facts._text import command_missing, excerpt, number, strip_provenance, to_int
from clusterctl.models import Command

# Facts judge their own output: a failing nvidia-smi is a fact ("no GPUs"), not an error.
ANY_EXIT = tuple(range(256))

GPU_QUERY_FIELDS = ("index", "uuid", "name", "memory.total", "memory.used", "driver_version", "pci.bus_id")
APPS_QUERY_FIELDS = ("pid", "process_name", "gpu_uuid", "used_memory")

NVIDIA_SMI_GPUS = Command(
    argv=("nvidia-smi", "--query-gpu=" + ",".join(GPU_QUERY_FIELDS), "--format=csv,noheader,nounits"),
    timeout=60.0, ok_exit_codes=ANY_EXIT)
NVIDIA_SMI_APPS = Command(
    argv=("nvidia-smi", "--query-compute-apps=" + ",".join(APPS_QUERY_FIELDS), "--format=csv,noheader,nounits"),
    timeout=60.0, ok_exit_codes=ANY_EXIT)
NVIDIA_SMI_TABLE = Command(argv=("nvidia-smi",), timeout=60.0, ok_exit_codes=ANY_EXIT)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: Optional[str] = None
    memory_total_mib: Optional[int] = None
    memory_used_mib: Optional[int] = None
    driver_version: Optional[str] = None
    pci_bus_id: Optional[str] = None


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    process_name: str
    gpu_uuid: Optional[str] = None
    gpu_index: Optional[int] = None
    used_memory_mib: Optional[int] = None
    kind: Optional[str] = None  # C (compute), G (graphics), C+G, M (MPS)


@dataclass(frozen=True)
class GpuInventory:
    gpus: tuple[Gpu, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = None
    error: Optional[str] = None  # why no GPU is visible, in the tool's words
    unreadable: Optional[str] = None  # nvidia-smi printed something this parser does not understand

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(gpu.index for gpu in self.gpus)

    def index_of_uuid(self, uuid: str) -> Optional[int]:
        return next((gpu.index for gpu in self.gpus if gpu.uuid == uuid), None)


# --------------------------------------------------------------------------- failures

_NO_GPU_MESSAGES = (
    re.compile(r"NVIDIA-SMI has failed because it couldn.t communicate with the NVIDIA driver[^\n]*"),
    re.compile(r"Failed to initialize NVML:[^\n]*"),
    re.compile(r"No devices were found[^\n]*"),
    re.compile(r"Unable to determine the device handle for GPU[^\n]*"),
    re.compile(r"NVIDIA-SMI couldn't find libnvidia-ml.so library[^\n]*"),
)


def no_gpu_reason(text: str) -> Optional[str]:
    """The tool's own words for why it shows no GPU, or None when it worked."""
    text = strip_provenance(text)
    if command_missing(text, "nvidia-smi"):
        return "nvidia-smi is not installed (command not found): no NVIDIA driver on this node"
    for pattern in _NO_GPU_MESSAGES:
        match = pattern.search(text)
        if match:
            return match.group(0).strip()
    return None


# --------------------------------------------------------------------------- csv queries

# Header spellings nvidia-smi prints for a query field, where they differ from the field's name.
_ALIASES = {"used_gpu_memory": "used_memory", "gpu_bus_id": "pci.bus_id", "gpu_name": "name"}
_HEADER_CELL = re.compile(r"^[a-z][a-z0-9_.]*( \[[^\]]*\])?$")


def _csv_rows(text: str) -> list[list[str]]:
    lines = [line for line in strip_provenance(text).splitlines() if line.strip()]
    try:
        return [[cell.strip() for cell in row] for row in csv.reader(lines, skipinitialspace=True)]
    except csv.Error:  # a NUL byte or a runaway quote: no row is trustworthy
        return []


def _columns(rows: list[list[str]], fields: Sequence[str]) -> tuple[dict[str, int], list[list[str]]]:
    """Column positions by name: from a header row (`--format=csv`) wherever it starts, else `fields`."""
    for at, row in enumerate(rows):
        if row and all(_HEADER_CELL.match(cell) for cell in row):
            names = [_ALIASES.get(cell.split(" [")[0], cell.split(" [")[0]) for cell in row]
            if set(names) & set(fields):
                return {name: pos for pos, name in enumerate(names)}, rows[at + 1:]
    return {name: pos for pos, name in enumerate(fields)}, rows


def _cell(row: list[str], columns: Mapping[str, int], name: str) -> Optional[str]:
    pos = columns.get(name)
    if pos is None or pos >= len(row):
        return None
    value = row[pos]
    return None if value in ("", "N/A", "[N/A]", "[Not Supported]") else value


def _whole_number(value: Optional[str]) -> Optional[int]:
    """An int only when the whole cell is digits: never digits pulled out of a UUID or a message."""
    return number((value or "").strip())


def parse_gpu_csv(text: str, fields: Sequence[str] = GPU_QUERY_FIELDS) -> GpuInventory:
    """`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`."""
    reason = no_gpu_reason(text)
    if reason:
        return GpuInventory(error=reason)
    columns, rows = _columns(_csv_rows(text), fields)
    gpus = []
    for row in rows:
        index = _whole_number(_cell(row, columns, "index"))
        if index is None or len(row) != len(columns):
            continue  # not a data row (an error message, a truncated line, another query's width)
        gpus.append(Gpu(
            index=index,
            name=_cell(row, columns, "name") or "",
            uuid=_cell(row, columns, "uuid"),
            memory_total_mib=to_int(_cell(row, columns, "memory.total")),
            memory_used_mib=to_int(_cell(row, columns, "memory.used")),
            driver_version=_cell(row, columns, "driver_version"),
            pci_bus_id=_cell(row, columns, "pci.bus_id"),
        ))
    if not gpus and strip_provenance(text).strip():
        return GpuInventory(unreadable=f"`nvidia-smi --query-gpu` printed {excerpt(text)}")
    drivers = {gpu.driver_version for gpu in gpus if gpu.driver_version}
    return GpuInventory(gpus=tuple(gpus), driver_version=drivers.pop() if len(drivers) == 1 else None)


def parse_compute_apps_csv(text: str, fields: Sequence[str] = APPS_QUERY_FIELDS) -> tuple[GpuProcess, ...]:
    """`nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory --format=csv...`.

    Only wholly numeric, positive PIDs: a suggested `kill -4` would signal a process group."""
    if no_gpu_reason(text):
        return ()
    columns, rows = _columns(_csv_rows(text), fields)
    processes = []
    for row in rows:
        pid = _whole_number(_cell(row, columns, "pid"))
        if not pid or len(row) != len(columns):
            continue
        processes.append(GpuProcess(
            pid=pid,
            process_name=_cell(row, columns, "process_name") or "?",
            gpu_uuid=_cell(row, columns, "gpu_uuid"),
            used_memory_mib=to_int(_cell(row, columns, "used_memory")),
            kind="C",
        ))
    return tuple(processes)


def compute_apps_unreadable(text: str, fields: Sequence[str] = APPS_QUERY_FIELDS) -> Optional[str]:
    """Why the compute-apps query cannot be trusted to list every process (None when it can)."""
    if no_gpu_reason(text) or parse_compute_apps_csv(text, fields):
        return None
    columns, rows = _columns(_csv_rows(text), fields)
    if rows or (not _csv_rows(text) and strip_provenance(text).strip()):
        return f"`nvidia-smi --query-compute-apps` printed {excerpt(text)}"
    return None  # empty, or a header alone: no process runs


# --------------------------------------------------------------------------- default table

_HEADER = re.compile(r"(?:Driver|KMD) Version:\s*(?P<driver>[\w.\-]+)(?:.*?CUDA (?:UMD )?Version:\s*(?P<cuda>[\w.\-/]+))?")
_GPU_ROW = re.compile(
    r"^\|\s*(?P<index>[0-9]{1,4})\s+(?P<name>.+?)\s+(?:On|Off)\s*\|\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])")
_MEMORY = re.compile(r"(?P<used>[0-9]{1,12})MiB\s*/\s*(?P<total>[0-9]{1,12})MiB")
_PROCESS_ROW = re.compile(
    r"^\|\s+(?P<gpu>[0-9]{1,4})\s+(?:(?:N/A|[0-9]+)\s+(?:N/A|[0-9]+)\s+)?(?P<pid>[1-9][0-9]{0,9})\s+(?P<kind>C\+G|[CGM])\s+"
    r"(?P<name>.*?)\s+(?P<mem>[0-9]{1,12}MiB|N/A)\s*\|$")


def parse_smi_table(text: str) -> GpuInventory:
    """The default `nvidia-smi` table: driver and CUDA versions, GPUs, processes."""
    reason = no_gpu_reason(text)
    if reason:
        return GpuInventory(error=reason)
    lines = strip_provenance(text).splitlines()
    driver = cuda = None
    gpus: list[Gpu] = []
    processes: list[GpuProcess] = []
    in_processes = False
    for line_no, line in enumerate(lines):
        header = _HEADER.search(line)
        if header and driver is None:
            driver, cuda = header.group("driver"), header.group("cuda")
            continue
        if "Processes:" in line:
            in_processes = True
            continue
        row = _GPU_ROW.match(line)
        if row and not in_processes:
            memory = _MEMORY.search(lines[line_no + 1]) if line_no + 1 < len(lines) else None
            gpus.append(Gpu(
                index=int(row.group("index")), name=row.group("name").strip(), pci_bus_id=row.group("bus"),
                memory_used_mib=int(memory.group("used")) if memory else None,
                memory_total_mib=int(memory.group("total")) if memory else None,
                driver_version=driver))
            continue
        process = _PROCESS_ROW.match(line.rstrip()) if in_processes else None
        if process:
            processes.append(GpuProcess(
                pid=int(process.group("pid")), process_name=process.group("name").strip() or "?",
                gpu_index=int(process.group("gpu")), used_memory_mib=to_int(process.group("mem")),
                kind=process.group("kind")))
    if not gpus and driver is None and strip_provenance(text).strip():
        return GpuInventory(unreadable=f"`nvidia-smi` printed {excerpt(text)}")
    return GpuInventory(gpus=tuple(gpus), processes=tuple(processes), driver_version=driver, cuda_version=cuda)
