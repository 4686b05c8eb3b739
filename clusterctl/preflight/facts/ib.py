"""ibstat: HCAs, their ports and link states, and the NCCL_IB_HCA they imply."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from clusterctl.preflight.facts._text import command_missing, natural_key, strip_provenance
from clusterctl.preflight.facts.nvidia import ANY_EXIT
from clusterctl.models import Command

IBSTAT = Command(argv=("ibstat",), timeout=60.0, ok_exit_codes=ANY_EXIT)


@dataclass(frozen=True)
class IbPort:
    hca: str
    port: int
    state: str  # Active | Down | Initializing | Armed
    physical_state: str  # LinkUp | Polling | Disabled | ...
    rate: Optional[int]  # Gb/s
    link_layer: str  # InfiniBand | Ethernet (RoCE)

    @property
    def active(self) -> bool:
        return self.state == "Active" and self.physical_state == "LinkUp"

    @property
    def is_roce(self) -> bool:
        return self.link_layer == "Ethernet"

    @property
    def name(self) -> str:
        """NCCL's spelling: mlx5_0:1."""
        return f"{self.hca}:{self.port}"

    def describe(self) -> str:
        return f"{self.name} {self.state}/{self.physical_state} {self.rate or '?'}Gb/s {self.link_layer}"


@dataclass(frozen=True)
class IbStatus:
    ports: tuple[IbPort, ...] = ()
    warnings: tuple[str, ...] = ()  # ibpanic/ibwarn lines: some HCAs may be missing from `ports`
    error: Optional[str] = None  # why no HCA could be listed at all

    @property
    def hcas(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(port.hca for port in self.ports))

    @property
    def active_ports(self) -> tuple[IbPort, ...]:
        return tuple(port for port in self.ports if port.active)

    @property
    def inactive_ports(self) -> tuple[IbPort, ...]:
        return tuple(port for port in self.ports if not port.active)

    @property
    def has_devices(self) -> bool:
        return bool(self.ports)

    @property
    def nccl_ports(self) -> tuple[IbPort, ...]:
        """The active ports NCCL should use.

        Native InfiniBand ports win over Ethernet (RoCE) ones when a node has both: the
        Ethernet ones are then the front-end network. Among the chosen kind, only the
        fastest ports are kept: GPU rails run at one speed, slower ports are management
        or storage NICs.
        """
        active = self.active_ports
        ib = [port for port in active if not port.is_roce]
        chosen = ib or list(active)
        if not chosen:
            return ()
        fastest = max(port.rate or 0 for port in chosen)
        return tuple(sorted((p for p in chosen if (p.rate or 0) == fastest), key=lambda p: natural_key(p.name)))

    @property
    def nccl_ib_hca(self) -> str:
        """NCCL_IB_HCA for this node, e.g. `mlx5_0:1,mlx5_1:1` (empty without active ports)."""
        return ",".join(port.name for port in self.nccl_ports)

    @property
    def link_layer(self) -> Optional[str]:
        """InfiniBand or Ethernet for the ports NCCL would use; None without any."""
        layers = {port.link_layer for port in self.nccl_ports}
        return layers.pop() if len(layers) == 1 else None


_KEY_VALUE = re.compile(r"^\s*([A-Za-z ]+?):\s*(.*?)\s*$")


def parse_ibstat(text: str) -> IbStatus:
    """`ibstat` output: per-CA blocks, indented or not; ibpanic/ibwarn lines kept as warnings."""
    text = strip_provenance(text)
    if command_missing(text, "ibstat"):
        return IbStatus(error="ibstat is not installed (infiniband-diags missing)")
    ports: list[IbPort] = []
    warnings: list[str] = []
    hca: Optional[str] = None
    port: Optional[dict] = None

    def close_port() -> None:
        if port is not None and hca is not None:
            ports.append(IbPort(hca=hca, port=port["number"], state=port.get("State", "?"),
                                physical_state=port.get("Physical state", "?"),
                                rate=_rate(port.get("Rate")), link_layer=port.get("Link layer", "InfiniBand")))

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("ibpanic:", "ibwarn:", "ibstat:")) or "iberror" in stripped:
            warnings.append(stripped)
            continue
        ca = re.match(r"^CA '([^']+)'", stripped)
        if ca:
            close_port()
            hca, port = ca.group(1), None
            continue
        number = re.match(r"^Port (\d+):$", stripped)
        if number:
            close_port()
            port = {"number": int(number.group(1))}
            continue
        pair = _KEY_VALUE.match(line)
        if pair and port is not None:
            port[pair.group(1)] = pair.group(2)
    close_port()
    error = None
    if not ports:
        error = warnings[-1] if warnings else "no InfiniBand/RoCE devices (ibstat printed nothing)"
    return IbStatus(ports=tuple(ports), warnings=tuple(warnings), error=error)


def _rate(value: Optional[str]) -> Optional[int]:
    match = re.match(r"^\s*(\d+)", value or "")
    return int(match.group(1)) if match else None
