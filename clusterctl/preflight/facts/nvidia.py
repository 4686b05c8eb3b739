"""nvidia-smi facts: GPUs, their compute processes, the topology matrix, fabric state.

Every parser takes the tool's text (stdout, with stderr appended: see `combined`) and
never raises. When nvidia-smi is missing or cannot reach the driver the result says
"no GPUs" and carries the tool's own reason.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from clusterctl.preflight.facts._text import command_missing, strip_provenance, to_int
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
NVIDIA_SMI_TOPO = Command(argv=("nvidia-smi", "topo", "-m"), timeout=60.0, ok_exit_codes=ANY_EXIT)
NVIDIA_SMI_QUERY = Command(argv=("nvidia-smi", "-q"), timeout=120.0, ok_exit_codes=ANY_EXIT)


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


def _csv_rows(text: str) -> list[list[str]]:
    lines = [line for line in strip_provenance(text).splitlines() if line.strip()]
    return [[cell.strip() for cell in row] for row in csv.reader(lines, skipinitialspace=True)]


def _columns(rows: list[list[str]], fields: Sequence[str]) -> tuple[dict[str, int], list[list[str]]]:
    """Column positions by field name; a header row (`--format=csv`) wins over `fields`."""
    if rows and rows[0] and not rows[0][0].isdigit() and rows[0][0].split(" [")[0] in (fields[0], "pid", "index"):
        names = [cell.split(" [")[0] for cell in rows[0]]
        names = ["used_memory" if name == "used_gpu_memory" else name for name in names]
        return {name: pos for pos, name in enumerate(names)}, rows[1:]
    return {name: pos for pos, name in enumerate(fields)}, rows


def _cell(row: list[str], columns: Mapping[str, int], name: str) -> Optional[str]:
    pos = columns.get(name)
    if pos is None or pos >= len(row):
        return None
    value = row[pos]
    return None if value in ("", "N/A", "[N/A]", "[Not Supported]") else value


def parse_gpu_csv(text: str, fields: Sequence[str] = GPU_QUERY_FIELDS) -> GpuInventory:
    """`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`."""
    reason = no_gpu_reason(text)
    if reason:
        return GpuInventory(error=reason)
    columns, rows = _columns(_csv_rows(text), fields)
    gpus = []
    for row in rows:
        index = to_int(_cell(row, columns, "index"))
        if index is None or len(row) < min(len(fields), len(columns)):
            continue  # not a data row (an error message, a truncated line)
        gpus.append(Gpu(
            index=index,
            name=_cell(row, columns, "name") or "",
            uuid=_cell(row, columns, "uuid"),
            memory_total_mib=to_int(_cell(row, columns, "memory.total")),
            memory_used_mib=to_int(_cell(row, columns, "memory.used")),
            driver_version=_cell(row, columns, "driver_version"),
            pci_bus_id=_cell(row, columns, "pci.bus_id"),
        ))
    drivers = {gpu.driver_version for gpu in gpus if gpu.driver_version}
    return GpuInventory(gpus=tuple(gpus), driver_version=drivers.pop() if len(drivers) == 1 else None)


def parse_compute_apps_csv(text: str, fields: Sequence[str] = APPS_QUERY_FIELDS) -> tuple[GpuProcess, ...]:
    """`nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory --format=csv...`."""
    if no_gpu_reason(text):
        return ()
    columns, rows = _columns(_csv_rows(text), fields)
    processes = []
    for row in rows:
        pid = to_int(_cell(row, columns, "pid"))
        if pid is None:
            continue
        processes.append(GpuProcess(
            pid=pid,
            process_name=_cell(row, columns, "process_name") or "?",
            gpu_uuid=_cell(row, columns, "gpu_uuid"),
            used_memory_mib=to_int(_cell(row, columns, "used_memory")),
            kind="C",
        ))
    return tuple(processes)


# --------------------------------------------------------------------------- default table

_HEADER = re.compile(r"Driver Version:\s*(?P<driver>[\w.\-]+)(?:.*?CUDA Version:\s*(?P<cuda>[\w.\-/]+))?")
_GPU_ROW = re.compile(
    r"^\|\s*(?P<index>\d+)\s+(?P<name>.+?)\s+(?:On|Off)\s*\|\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])")
_MEMORY = re.compile(r"(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB")
_PROCESS_ROW = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(?P<pid>\d+)\s+(?P<kind>C\+G|[CGM])\s+"
    r"(?P<name>.*?)\s+(?P<mem>\d+MiB|N/A)\s*\|$")


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
    for number, line in enumerate(lines):
        header = _HEADER.search(line)
        if header and driver is None:
            driver, cuda = header.group("driver"), header.group("cuda")
            continue
        if "Processes:" in line:
            in_processes = True
            continue
        row = _GPU_ROW.match(line)
        if row and not in_processes:
            memory = _MEMORY.search(lines[number + 1]) if number + 1 < len(lines) else None
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
    return GpuInventory(gpus=tuple(gpus), processes=tuple(processes), driver_version=driver, cuda_version=cuda)


# --------------------------------------------------------------------------- topology

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LABEL = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\w+)$")


@dataclass(frozen=True)
class GpuTopology:
    labels: tuple[str, ...] = ()  # matrix columns: GPU0.., then NIC0.. (or mlx5_0.. in old drivers)
    links: Mapping[tuple[str, str], str] = field(default_factory=dict)  # (row, column) -> X, NV18, PIX, SYS...
    nic_names: Mapping[str, str] = field(default_factory=dict)  # NIC0 -> mlx5_0
    cpu_affinity: Mapping[str, str] = field(default_factory=dict)
    numa_affinity: Mapping[str, str] = field(default_factory=dict)
    error: Optional[str] = None

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(label for label in self.labels if label.startswith("GPU"))

    @property
    def nics(self) -> tuple[str, ...]:
        """RDMA device names (mlx5_0...), in matrix order."""
        return tuple(self.nic_names.get(label, label) for label in self.labels if not label.startswith("GPU"))

    def link(self, a: str, b: str) -> Optional[str]:
        return self.links.get((a, b))

    @property
    def all_gpus_nvlinked(self) -> bool:
        """Every GPU pair talks over NVLink (NV#), as on NVSwitch boards."""
        pairs = [(a, b) for a in self.gpus for b in self.gpus if a != b]
        return bool(pairs) and all((self.link(a, b) or "").startswith("NV") for a, b in pairs)

    def nics_near(self, gpu: str, closest: Sequence[str] = ("PIX", "PXB")) -> tuple[str, ...]:
        """NICs behind the same PCIe switch as `gpu` (what GPUDirect RDMA wants)."""
        return tuple(self.nic_names.get(label, label) for label in self.labels
                     if not label.startswith("GPU") and self.link(gpu, label) in closest)


def parse_topology(text: str) -> GpuTopology:
    """`nvidia-smi topo -m`: the link matrix, CPU/NUMA affinity and the NIC legend."""
    reason = no_gpu_reason(text)
    if reason:
        return GpuTopology(error=reason)
    lines = [_ANSI.sub("", line) for line in strip_provenance(text).splitlines()]
    header = next((line.split() for line in lines if "GPU0" in line.split()), None)
    if header is None:
        return GpuTopology(error="no topology matrix in the output")
    labels = tuple(token for token in header if _LABEL.match(token))
    links: dict[tuple[str, str], str] = {}
    cpu: dict[str, str] = {}
    numa: dict[str, str] = {}
    for line in lines:
        cells = line.split()
        if not cells or cells[0] not in labels or cells == list(header):
            continue
        row, values = cells[0], cells[1:]
        for column, value in zip(labels, values):
            links[(row, column)] = value
        rest = values[len(labels):]
        if row.startswith("GPU") and rest:
            cpu[row] = rest[0]
            if len(rest) > 1:
                numa[row] = rest[1]
    nic_names = {m.group(1): m.group(2) for m in (re.match(r"^\s*(NIC\d+):\s*(\S+)", line) for line in lines) if m}
    return GpuTopology(labels=labels, links=links, nic_names=nic_names, cpu_affinity=cpu, numa_affinity=numa)


# --------------------------------------------------------------------------- nvidia-smi -q


@dataclass(frozen=True)
class FabricState:
    bus_id: Optional[str]
    product: Optional[str]
    state: Optional[str]
    status: Optional[str]

    @property
    def applicable(self) -> bool:
        """False on GPUs without an NVSwitch fabric (the tool prints N/A)."""
        return self.state not in (None, "N/A", "Not Supported")

    @property
    def ready(self) -> bool:
        return self.state == "Completed" and self.status in ("Success", None, "N/A")


@dataclass(frozen=True)
class SmiQuery:
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = None
    fabric: tuple[FabricState, ...] = ()
    error: Optional[str] = None

    @property
    def fabric_applicable(self) -> bool:
        return any(entry.applicable for entry in self.fabric)

    @property
    def fabric_not_ready(self) -> tuple[FabricState, ...]:
        return tuple(entry for entry in self.fabric if entry.applicable and not entry.ready)


def parse_smi_query(text: str) -> SmiQuery:
    """`nvidia-smi -q` (or its `| grep -A 2 Fabric` excerpt): versions and per-GPU fabric state."""
    reason = no_gpu_reason(text)
    if reason:
        return SmiQuery(error=reason)
    driver = cuda = bus = product = None
    entries: list[dict] = []
    current: Optional[dict] = None
    for line in strip_provenance(text).splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        gpu_line = re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$", line)
        if gpu_line:
            bus, product, current = gpu_line.group(1), None, None
        elif key == "Driver Version" and driver is None:
            driver = value
        elif key == "CUDA Version" and cuda is None:
            cuda = value
        elif key == "Product Name":
            product = value
        elif line.strip() == "Fabric":
            current = {"bus_id": bus, "product": product, "state": None, "status": None}
            entries.append(current)
        elif current is not None and key in ("State", "Status") and current[key.lower()] is None:
            current[key.lower()] = value
    fabric = tuple(FabricState(**entry) for entry in entries)
    return SmiQuery(driver_version=driver, cuda_version=cuda, fabric=fabric)
