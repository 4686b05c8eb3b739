"""Network facts: the route to an address, interfaces, TCP listeners, hostname resolution."""
from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Optional, Sequence

from clusterctl.preflight.facts._text import command_missing, excerpt, strip_provenance, unknown_option
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
    unreadable: Optional[str] = None  # output not understood: the route is unknown, not absent


# iproute2 before 4.13 (CentOS 7, RHEL 7, Synology DSM) rejects -j with `Option "-j" is unknown`;
# 4.15 (Ubuntu 18.04) accepts it and prints text for `route get`. The text form is read either way.
_ROUTE_GET = ('out=$(ip -j route get "$1" 2>&1); '
              'case $out in *"is unknown"*|*"invalid option"*|*"unrecognized option"*) ip route get "$1" 2>&1;; '
              '*) printf "%s\\n" "$out";; esac')


def route_get_command(address: str, json_output: bool = True) -> Command:
    """`ip -j route get ADDR`, falling back to `ip route get ADDR` where -j is unknown."""
    argv = ("sh", "-c", _ROUTE_GET, "sh", address) if json_output else ("ip", "route", "get", address)
    return Command(argv=argv, timeout=30.0, ok_exit_codes=ANY_EXIT)


def parse_route_get(text: str) -> RouteInfo:
    """`ip -j route get ADDR` (JSON) or `ip route get ADDR` (text), told apart by the output."""
    text = strip_provenance(text).strip()
    if command_missing(text, "ip"):
        return RouteInfo(error="ip (iproute2) is not installed")
    if unknown_option(text):
        reason = f"this ip (iproute2) refused an option: {excerpt(text, lines=1)}"
        return RouteInfo(error=reason, unreadable=reason)
    if text.startswith("["):
        try:
            routes = json.loads(text)
        except ValueError:
            routes = None
        if routes and isinstance(routes, list) and isinstance(routes[0], dict):
            first = routes[0]
            return RouteInfo(dst=_str(first.get("dst")), dev=_str(first.get("dev")), src=_str(first.get("prefsrc")),
                             via=_str(first.get("gateway")), local=first.get("type") == "local")
    error = re.search(r"(?:RTNETLINK answers|Error):\s*(.+)", text)
    if error:
        return RouteInfo(error=error.group(1).strip())
    return _route_from_text(text)


def _str(value) -> Optional[str]:
    return value if isinstance(value, str) else None


def _route_from_text(text: str) -> RouteInfo:
    first = text.splitlines()[0] if text else ""
    tokens = first.split()
    if not tokens:
        return RouteInfo(error="ip route get printed nothing", unreadable="`ip route get` printed nothing")
    local = tokens[0] in ("local", "broadcast")
    values = {key: tokens[i + 1] for i, key in enumerate(tokens[:-1]) if key in ("dev", "src", "via")}
    if "dev" not in values or (local and len(tokens) < 2):  # not a route: an error or a message we do not know
        reason = f"`ip route get` printed {excerpt(text)}"
        return RouteInfo(error=reason, unreadable=reason)
    return RouteInfo(dst=tokens[1] if local else tokens[0], dev=values.get("dev"), src=values.get("src"),
                     via=values.get("via"), local=local)


# --------------------------------------------------------------------------- interfaces

IP_ADDR = Command(argv=("ip", "-j", "addr"), timeout=30.0, ok_exit_codes=ANY_EXIT)
# What the probes run: `ip -o addr` where -j is unknown (one line per address, read by parse_ip_addr too).
IP_ADDR_PROBE = Command(argv=("sh", "-c", 'out=$(ip -j addr 2>&1); case $out in *"is unknown"*|*"invalid option"*) '
                              'ip -o addr 2>&1;; *) printf "%s\\n" "$out";; esac'), timeout=30.0, ok_exit_codes=ANY_EXIT)

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
            return tuple(_interface_from_json(entry) for entry in json.loads(text) if isinstance(entry, dict))
        except (ValueError, TypeError, AttributeError):
            return ()
    found: dict[str, dict] = {}
    current: Optional[dict] = None
    for line in text.splitlines():
        oneline = re.match(r"^([0-9]{1,9}):\s+(\S+?)(?:@\S+)?\s+(inet6?)\s+(\S+)", line)
        header = re.match(r"^([0-9]{1,9}):\s+(\S+?)(?:@\S+)?:\s+<", line)  # plain `ip addr`
        if oneline:
            entry = found.setdefault(oneline.group(2), {"index": int(oneline.group(1)), "addresses": []})
            entry["addresses"].append(oneline.group(4))
        elif header:
            current = found.setdefault(header.group(2), {"index": int(header.group(1)), "addresses": []})
        elif current is not None and re.match(r"^\s+inet6?\s+\S", line):  # "inet" with no address: cut output
            current["addresses"].append(line.split()[1])
    return tuple(Interface(name=name, index=v["index"], addresses=tuple(v["addresses"])) for name, v in found.items())


def _interface_from_json(entry: dict) -> Interface:
    infos = entry.get("addr_info") if isinstance(entry.get("addr_info"), list) else []
    addresses = tuple(f"{info['local']}/{info.get('prefixlen', 32)}" for info in infos
                      if isinstance(info, dict) and "local" in info)
    flags = entry.get("flags") if isinstance(entry.get("flags"), list) else []
    up = "UP" in flags or entry.get("operstate") == "UP"
    index = entry.get("ifindex")
    return Interface(name=str(entry.get("ifname", "?")), index=index if isinstance(index, int) else None,
                     addresses=addresses, up=up)


def interface_with_address(interfaces: Sequence[Interface], address: str) -> Optional[Interface]:
    """The interface that holds `address` (the master's own NIC, whose route says `dev lo`)."""
    return next((iface for iface in interfaces if address in (a.split("/")[0] for a in iface.addresses)), None)


# --------------------------------------------------------------------------- listeners

SS_LISTEN = Command(argv=("ss", "-ltnpH"), timeout=30.0, ok_exit_codes=ANY_EXIT)

# The master's listeners; owners (`ss -p` reads every process's fds) only when the port is taken.
# ss before iproute2 4.? has no -H (RHEL 6/7, Ubuntu 16.04): `ss: invalid option -- 'H'`; then the
# header is printed and skipped by parse_ss. Called as `sh -c SCRIPT sh PORT`.
SS_LISTENERS_SCRIPT = (
    'h=H; ss -ltnH >/dev/null 2>&1 || h=; '
    'if ss -ltn$h 2>/dev/null | awk \'{print $4}\' | grep -q ":$1$"; then ss -ltnp$h 2>&1; else ss -ltn$h 2>&1; fi')


def ss_unreadable(text: str) -> Optional[str]:
    """Why ss's output cannot be trusted to list the listeners (None when it can)."""
    text = strip_provenance(text)
    if command_missing(text, "ss"):
        return "ss (iproute2) is not installed"
    if unknown_option(text):
        return f"this ss refused an option: {excerpt(text, lines=1)}"
    rows = [line.split() for line in text.splitlines() if line.strip()]
    known = [row for row in rows if row[0] in ("State", "LISTEN", "UNCONN", "Netid", "Recv-Q")]
    if rows and not known:
        return f"`ss -ltn` printed {excerpt(text)}"
    return None


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
        if len(fields) >= 5 and fields[0] not in ("LISTEN", "UNCONN", "State") and fields[1] in ("LISTEN", "UNCONN"):
            fields = fields[1:]  # `ss -ltnp` with a Netid column (`ss -a`, some distributions' defaults)
        if len(fields) < 5 or fields[0] == "State" or fields[0] not in ("LISTEN", "UNCONN"):
            continue
        address, _, port = fields[3].rpartition(":")
        if not re.fullmatch(r"[0-9]{1,5}", port):
            continue
        holders = tuple((name, int(pid)) for name, pid in re.findall(r'\("([^"]*)",pid=([0-9]{1,9})\b', line))
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
# `uname -n` (coreutils, always there) rather than `hostname` (a separate package, missing in slim images).
HOSTNAME_RESOLUTION = Command(
    argv=("sh", "-c", 'h=$(uname -n); echo "$h"; getent ahosts "$h"'), timeout=30.0, ok_exit_codes=ANY_EXIT)


@dataclass(frozen=True)
class HostnameResolution:
    hostname: str
    addresses: tuple[str, ...] = ()
    unreadable: Optional[str] = None  # the hostname itself could not be read

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
        if not _HOSTNAME.match(hostname):  # `sh: uname: not found`, an empty output...
            return HostnameResolution(hostname=hostname[:64], unreadable=f"`uname -n` printed {excerpt(text)}")
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


_HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False
