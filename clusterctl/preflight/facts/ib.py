"""InfiniBand/RoCE ports: sysfs first, ibstat second, and the NCCL_IB_HCA they imply.

sysfs (/sys/class/infiniband/*/ports/*/{state,phys_state,rate,link_layer}) is what the
kernel knows and what NCCL's own device scan reads; it needs no tool and cannot abort.
`ibstat` (infiniband-diags) is read too, for nodes whose sysfs hides the tree: it stops
with `ibpanic` on a device it cannot stat (Azure's accelerated-networking NIC), which is
"state unknown", never "no InfiniBand".
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from clusterctl.models import Command
from clusterctl.preflight.facts._text import command_missing, excerpt, natural_key, strip_provenance
from clusterctl.preflight.facts.nvidia import ANY_EXIT

IBSTAT = Command(argv=("ibstat",), timeout=60.0, ok_exit_codes=ANY_EXIT)

# One `port DEV/ports/N` line, then `name=value` for each file. $(cat) drops the trailing newline
# sysfs writes (and tolerates files without one). `none` when the class directory is absent.
# $1 (tests only) reads a captured tree instead of /sys/class/infiniband.
_SYSFS_SCRIPT = r'''d=${1:-/sys/class/infiniband}
if [ ! -d "$d" ]; then echo "sysfs: none"; exit 0; fi
echo "sysfs: $d"
for p in "$d"/*/ports/*; do
  [ -d "$p" ] || continue
  echo "port ${p#"$d"/}"
  for f in state phys_state rate link_layer; do v=$(cat "$p/$f" 2>&1); echo "$f=$v"; done
done'''
IB_SYSFS = Command(argv=("sh", "-c", _SYSFS_SCRIPT), timeout=30.0, ok_exit_codes=ANY_EXIT)


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

    @property
    def likely_cause(self) -> str:
        """The usual reason a port is in this state (InfiniBand spec states, what admins meet)."""
        if self.active:
            return "up"
        if self.physical_state == "Polling":
            return "no link partner: cable out or faulty, or the switch port down"
        if self.physical_state == "Disabled":
            return "port disabled (ibportstate, firmware or the switch)"
        if self.physical_state == "LinkErrorRecovery":
            return "link errors: a bad cable or transceiver"
        if self.physical_state == "LinkUp" and self.state in ("Initializing", "Down"):
            return ("link up but no subnet manager configured the port: start opensm (or the switch's SM)"
                    if not self.is_roce else "link up but the port is not active: check the switch and the NIC's mode")
        if self.state == "Armed":
            return "the subnet manager armed the port but never activated it"
        return "port not active"


@dataclass(frozen=True)
class IbStatus:
    ports: tuple[IbPort, ...] = ()
    warnings: tuple[str, ...] = ()  # ibpanic/ibwarn lines: some HCAs may be missing from `ports`
    error: Optional[str] = None  # why no HCA could be listed at all (absent, tool missing)
    source: str = "ibstat"  # sysfs | ibstat: where `ports` came from
    unreadable: Optional[str] = None  # neither source could be read: the state is unknown, not "no IB"

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
        numbered = re.match(r"^Port ([0-9]{1,9}):$", stripped)
        if numbered:
            close_port()
            port = {"number": int(numbered.group(1))}
            continue
        pair = _KEY_VALUE.match(line)
        if pair and port is not None:
            port[pair.group(1)] = pair.group(2)
    close_port()
    error = unreadable = None
    if not ports and warnings:
        unreadable = f"ibstat stopped before listing any port: {warnings[-1]}"
    elif not ports and text.strip():
        unreadable = f"`ibstat` printed {excerpt(text)}"
    elif not ports:
        error = "no InfiniBand/RoCE devices (ibstat printed nothing)"
    return IbStatus(ports=tuple(ports), warnings=tuple(warnings), error=error or unreadable, unreadable=unreadable)


def _rate(value: Optional[str]) -> Optional[int]:
    match = re.match(r"^\s*([0-9]{1,9})", value or "")
    return int(match.group(1)) if match else None


# --------------------------------------------------------------------------- sysfs

# The kernel's spellings (drivers/infiniband/core/sysfs.c: "4: ACTIVE", "5: LinkUp") in ibstat's words.
_STATES = {"NOP": "Unknown", "DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed", "ACTIVE": "Active",
           "ACTIVE_DEFER": "Active"}


def parse_ib_sysfs(text: str) -> IbStatus:
    """IB_SYSFS's output: a `port DEV/ports/N` line, then state=, phys_state=, rate=, link_layer=."""
    text = strip_provenance(text)
    ports: list[IbPort] = []
    current: Optional[dict] = None
    saw_class = False

    def close() -> None:
        if current is not None:
            ports.append(IbPort(hca=current["hca"], port=current["port"], state=_sysfs_state(current.get("state", "")),
                                physical_state=_sysfs_value(current.get("phys_state", "")) or "?",
                                rate=_rate(current.get("rate")), link_layer=current.get("link_layer") or "InfiniBand"))

    for line in text.splitlines():
        line = line.strip()
        if line.startswith("sysfs: "):
            saw_class = saw_class or line != "sysfs: none"
            continue
        port = re.match(r"^port ([^/\s]+)/ports/([0-9]{1,9})$", line)
        if port:
            close()
            current = {"hca": port.group(1), "port": int(port.group(2))}
            continue
        key, sep, value = line.partition("=")
        if sep and current is not None and key in ("state", "phys_state", "rate", "link_layer"):
            current[key] = value.strip()
    close()
    if any(port.state not in _STATES.values() for port in ports):  # "cat: ...: Permission denied" and the like
        return IbStatus(source="sysfs", unreadable=f"/sys/class/infiniband read printed {excerpt(text)}")
    if ports:
        return IbStatus(ports=tuple(ports), source="sysfs")
    if "sysfs: none" in text or (saw_class and current is None and "=" not in text):
        return IbStatus(source="sysfs", error="no InfiniBand/RoCE devices (/sys/class/infiniband is absent or empty)")
    return IbStatus(source="sysfs", unreadable=f"/sys/class/infiniband read printed {excerpt(text)}")


def _sysfs_value(raw: str) -> str:
    """`5: LinkUp` -> `LinkUp`."""
    return raw.split(":", 1)[1].strip() if re.match(r"^\d+:", raw) else raw.strip()


def _sysfs_state(raw: str) -> str:
    value = _sysfs_value(raw)
    return _STATES.get(value.upper(), value or "?")


def ib_status(sysfs_text: str, ibstat_text: str) -> IbStatus:
    """sysfs when it lists ports, else ibstat; unknown (`unreadable`) when neither can say."""
    sysfs = parse_ib_sysfs(sysfs_text)
    if sysfs.ports:
        return sysfs
    ibstat = parse_ibstat(ibstat_text)
    if ibstat.ports:
        return ibstat
    if ibstat.unreadable:  # ibpanic and the like: HCAs may well be there
        return IbStatus(warnings=ibstat.warnings, source="ibstat", unreadable=ibstat.unreadable,
                        error=ibstat.unreadable)
    if sysfs.error and not sysfs.unreadable:  # the kernel has no IB device; ibstat agrees or is missing
        return IbStatus(source="sysfs", error=f"{sysfs.error}; {ibstat.error or 'ibstat lists none'}")
    if not sysfs_text.strip():  # no sysfs section (an older probe, a pasted ibstat): ibstat alone decides
        return ibstat
    return IbStatus(source="sysfs", unreadable=sysfs.unreadable, error=sysfs.unreadable)
