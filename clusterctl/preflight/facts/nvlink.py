"""nvidia-smi's view of how GPUs connect: `topo -m` (NVLink/PCIe links, the NIC nearest each
GPU) and `-q` (driver versions, the NVSwitch fabric state per GPU).

Parsers never raise; `no_gpu_reason` says when nvidia-smi could not run at all, and
`unreadable` when it printed something not understood. Driver 610+ spells the versions
`KMD Version` / `CUDA UMD Version` (and keeps the old keys, marked deprecated, in `-q`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from clusterctl.models import Command
from clusterctl.preflight.facts._text import excerpt, strip_provenance
from clusterctl.preflight.facts.nvidia import ANY_EXIT, no_gpu_reason

NVIDIA_SMI_TOPO = Command(argv=("nvidia-smi", "topo", "-m"), timeout=60.0, ok_exit_codes=ANY_EXIT)
NVIDIA_SMI_QUERY = Command(argv=("nvidia-smi", "-q"), timeout=120.0, ok_exit_codes=ANY_EXIT)

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
    error: Optional[str] = None  # nvidia-smi could not run (no driver, not installed)
    unreadable: Optional[str] = None  # it ran, but printed no matrix this parser understands

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

    def nic_distances(self, gpu: str) -> dict[str, str]:
        """RDMA device -> its link type from `gpu` (PIX, PXB, PHB, NODE, SYS), nearest first."""
        found = {self.nic_names.get(label, label): self.link(gpu, label) or "?" for label in self.labels
                 if not label.startswith("GPU")}
        return dict(sorted(found.items(), key=lambda item: link_rank(item[1])))


# PCIe distance, nearest first (nvidia-smi topo's legend); NVLink is not a NIC path.
PCIE_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")


def link_rank(link: str) -> int:
    return PCIE_ORDER.index(link) if link in PCIE_ORDER else len(PCIE_ORDER)


def nvlink_count(link: Optional[str]) -> int:
    """NV18 -> 18; NV# is `#` bonded NVLinks; anything else 0."""
    match = re.match(r"^NV([0-9]{1,4})$", link or "")
    return int(match.group(1)) if match else 0


def parse_topology(text: str) -> GpuTopology:
    """`nvidia-smi topo -m`: the link matrix, CPU/NUMA affinity and the NIC legend."""
    reason = no_gpu_reason(text)
    if reason:
        return GpuTopology(error=reason)
    lines = [_ANSI.sub("", line) for line in strip_provenance(text).splitlines()]
    header = next((line.split() for line in lines if "GPU0" in line.split()), None)
    if header is None:
        return GpuTopology(error="no topology matrix in the output",
                           unreadable=f"`nvidia-smi topo -m` printed {excerpt(text)}")
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
    unreadable: Optional[str] = None

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
        elif key in ("Driver Version", "KMD Version") and driver is None and value:
            driver = value.split()[0]  # 610+: "610.43.02 [Deprecated; ... Use KMD Version instead]"
        elif key in ("CUDA Version", "CUDA UMD Version") and cuda is None and value:
            cuda = value.split()[0]
        elif key == "Product Name":
            product = value
        elif line.strip() == "Fabric":
            current = {"bus_id": bus, "product": product, "state": None, "status": None}
            entries.append(current)
        elif current is not None and key in ("State", "Status") and current[key.lower()] is None:
            current[key.lower()] = value
    fabric = tuple(FabricState(**entry) for entry in entries)
    if driver is None and not fabric and strip_provenance(text).strip():
        return SmiQuery(unreadable=f"`nvidia-smi -q` printed {excerpt(text)}")
    return SmiQuery(driver_version=driver, cuda_version=cuda, fabric=fabric)
