"""Network facts: the route to an address, interfaces, TCP listeners, hostname resolution."""
from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Optional, Sequence

from clusterctl.preflight.facts._text import command_missing, strip_provenance
from clusterctl.preflight.facts.nvidia import ANY_EXIT
from clusterctl.models import Command

# --------------------------------------------------------------------------- routes


@dataclass(frozen=True)
class RouteInfo:
    dst: Optional[str] = None
    dev: Optional[str] = None
    src: Optional[str] = None
    via: Optional[str] = None
    local: bool = False  # the address is this host's own (dev lo)
    error: Optional[str] = None  # "Network is unreachable" and the like


def route_get_command(address: str, json_output: bool = True) -> Command:
    argv = ("ip", "-j", "route", "get", address) if json_output else ("ip", "route", "get", address)
    return Command(argv=argv, timeout=30.0, ok_exit_codes=ANY_EXIT)


def parse_route_get(text: str) -> RouteInfo:
    """`ip -j route get ADDR` (JSON) or `ip route get ADDR` (text), told apart by the output."""
    text = strip_provenance(text).strip()
    if command_missing(text, "ip"):
        return RouteInfo(error="ip (iproute2) is not installed")
    if text.startswith("["):
        try:
            routes = json.loads(text)
        except ValueError:
            routes = None
        if routes:
            first = routes[0]
            return RouteInfo(dst=first.get("dst"), dev=first.get("dev"), src=first.get("prefsrc"),
                             via=first.get("gateway"), local=first.get("type") == "local")
    error = re.search(r"(?:RTNETLINK answers|Error):\s*(.+)", text)
    if error:
        return RouteInfo(error=error.group(1).strip())
    return _route_from_text(text)


def _route_from_text(text: str) -> RouteInfo:
    first = text.splitlines()[0] if text else ""
    tokens = first.split()
    if not tokens:
        return RouteInfo(error="ip route get printed nothing")
    local = tokens[0] in ("local", "broadcast")
    values = {key: tokens[i + 1] for i, key in enumerate(tokens[:-1]) if key in ("dev", "src", "via")}
    return RouteInfo(dst=tokens[1] if local else tokens[0], dev=values.get("dev"), src=values.get("src"),
                     via=values.get("via"), local=local)


# --------------------------------------------------------------------------- interfaces

IP_ADDR = Command(argv=("ip", "-j", "addr"), timeout=30.0, ok_exit_codes=ANY_EXIT)

# Interfaces that carry no traffic between nodes: NCCL/Gloo picking one hangs the job.
_VIRTUAL = re.compile(r"^(lo|docker\d*|br-[0-9a-f]+|veth.*|virbr\d+.*|cni\d*|flannel.*|cali.*|tunl\d+|vxlan.*|kube-.*|weave.*|tailscale\d*|cilium.*)$")


def is_virtual_interface(name: str) -> bool:
    """Docker/libvirt/CNI bridges, veth pairs and loopback: never the NIC between nodes."""
    return bool(_VIRTUAL.match(name.split("@")[0]))


@dataclass(frozen=True)
class Interface:
    name: str
    index: Optional[int] = None
    addresses: tuple[str, ...] = ()  # CIDR, e.g. 10.0.0.5/24
    up: bool = True

    @property
    def virtual(self) -> bool:
        return is_virtual_interface(self.name)

    @property
    def ipv4(self) -> tuple[str, ...]:
        return tuple(a.split("/")[0] for a in self.addresses if ":" not in a)


def parse_ip_addr(text: str) -> tuple[Interface, ...]:
    """`ip -j addr` (JSON) or `ip -o addr` (one line per address)."""
    text = strip_provenance(text).strip()
    if text.startswith("["):
        try:
            return tuple(_interface_from_json(entry) for entry in json.loads(text))
        except ValueError:
            return ()
    found: dict[str, dict] = {}
    current: Optional[dict] = None
    for line in text.splitlines():
        oneline = re.match(r"^(\d+):\s+(\S+?)(?:@\S+)?\s+(inet6?)\s+(\S+)", line)
        header = re.match(r"^(\d+):\s+(\S+?)(?:@\S+)?:\s+<", line)  # plain `ip addr`
        if oneline:
            entry = found.setdefault(oneline.group(2), {"index": int(oneline.group(1)), "addresses": []})
            entry["addresses"].append(oneline.group(4))
        elif header:
            current = found.setdefault(header.group(2), {"index": int(header.group(1)), "addresses": []})
        elif current is not None and re.match(r"^\s+inet6?\s", line):
            current["addresses"].append(line.split()[1])
    return tuple(Interface(name=name, index=v["index"], addresses=tuple(v["addresses"])) for name, v in found.items())


def _interface_from_json(entry: dict) -> Interface:
    addresses = tuple(f"{info['local']}/{info.get('prefixlen', 32)}" for info in entry.get("addr_info", []) if "local" in info)
    up = "UP" in entry.get("flags", []) or entry.get("operstate") == "UP"
    return Interface(name=entry.get("ifname", "?"), index=entry.get("ifindex"), addresses=addresses, up=up)


def interface_with_address(interfaces: Sequence[Interface], address: str) -> Optional[Interface]:
    """The interface that holds `address` (the master's own NIC, whose route says `dev lo`)."""
    return next((iface for iface in interfaces if address in (a.split("/")[0] for a in iface.addresses)), None)


# --------------------------------------------------------------------------- listeners

SS_LISTEN = Command(argv=("ss", "-ltnpH"), timeout=30.0, ok_exit_codes=ANY_EXIT)


@dataclass(frozen=True)
class Listener:
    local_address: str
    port: int
    process: Optional[str] = None
    pid: Optional[int] = None
    holders: tuple[tuple[str, int], ...] = ()  # every (process, pid) sharing the socket

    def describe(self) -> str:
        who = ", ".join(f"pid {pid} ({name})" for name, pid in self.holders) or "a process this user cannot see"
        return f"{self.local_address}:{self.port} held by {who}"


def parse_ss(text: str) -> tuple[Listener, ...]:
    """`ss -ltnp` / `ss -ltnpH` (with or without the header, with or without -p)."""
    listeners = []
    for line in strip_provenance(text).splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[0] == "State" or fields[0] not in ("LISTEN", "UNCONN"):
            continue
        address, _, port = fields[3].rpartition(":")
        if not port.isdigit():
            continue
        holders = tuple((name, int(pid)) for name, pid in re.findall(r'\("([^"]*)",pid=(\d+)', line))
        listeners.append(Listener(
            local_address=address.strip("[]") or "*", port=int(port),
            process=holders[0][0] if holders else None, pid=holders[0][1] if holders else None, holders=holders))
    return tuple(listeners)


def holder_of(listeners: Sequence[Listener], port: int) -> Optional[Listener]:
    """The listener on `port`, on any address (what blocks a rendezvous bind)."""
    return next((listener for listener in listeners if listener.port == port), None)


def free_port_near(listeners: Sequence[Listener], port: int, span: int = 100) -> Optional[int]:
    taken = {listener.port for listener in listeners}
    return next((candidate for candidate in range(port + 1, port + span) if candidate not in taken), None)


# --------------------------------------------------------------------------- hostname

# Prints the hostname, then what it resolves to, in one round trip. No user data inside.
HOSTNAME_RESOLUTION = Command(
    argv=("sh", "-c", 'h=$(hostname); echo "$h"; getent ahosts "$h"'), timeout=30.0, ok_exit_codes=ANY_EXIT)


@dataclass(frozen=True)
class HostnameResolution:
    hostname: str
    addresses: tuple[str, ...] = ()

    @property
    def resolvable(self) -> bool:
        return bool(self.addresses)

    @property
    def loopback_only(self) -> bool:
        return self.resolvable and all(_is_loopback(address) for address in self.addresses)


def parse_hostname_resolution(text: str, hostname: Optional[str] = None) -> HostnameResolution:
    """HOSTNAME_RESOLUTION's output, or `getent ahosts NAME` alone when `hostname` is given."""
    lines = [line for line in strip_provenance(text).splitlines() if line.strip()]
    if hostname is None:
        hostname = lines[0].strip() if lines else ""
        lines = lines[1:]
    addresses = []
    for line in lines:
        candidate = line.split()[0]
        try:
            ipaddress.ip_address(candidate.split("%")[0])
        except ValueError:
            continue
        if candidate not in addresses:
            addresses.append(candidate)
    return HostnameResolution(hostname=hostname, addresses=tuple(addresses))


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False
