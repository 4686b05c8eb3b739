"""Verdicts on the network: the rendezvous port and its reachability, the NIC the ranks
will use, the hostname's resolution, InfiniBand."""
from __future__ import annotations

import re
from typing import Mapping, Optional, Sequence

from clusterctl.models import CheckResult
from clusterctl.preflight.facts.ib import IbStatus
from clusterctl.preflight.facts.net import (
    HostnameResolution,
    Interface,
    Listener,
    RouteInfo,
    free_port_near,
    holder_of,
    interface_with_address,
    is_virtual_interface,
)
from clusterctl.preflight.verdicts.common import FAIL, PASS, WARN, cannot_read, majority, verdict


def check_rdzv_port_free(host: str, port: int, listeners: Sequence[Listener],
                         unreadable: Optional[str] = None) -> CheckResult:
    """On the master: nothing may listen on rendezvous.port before launch. `unreadable`: why ss's
    output cannot be trusted (then a free port cannot be told from one ss did not list)."""
    holder = holder_of(listeners, port)
    if holder is None and unreadable:
        return cannot_read(host, "rdzv_port_free", f"the listeners on port {port}: {unreadable}",
                           f"run `ss -ltnp` (or `netstat -ltnp`) on {host} and check that nothing listens on {port}")
    if holder is None:
        return verdict(host, "rdzv_port_free", PASS, f"port {port} is free on {host}")
    spare = free_port_near(listeners, port)
    who = f"pid {holder.pid} ({holder.process})" if holder.pid else "a process this user cannot see (run as root to name it)"
    stop = f"stop {who} on {host}" if holder.pid else f"find it with `ss -ltnp 'sport = :{port}'` as root on {host}"
    return verdict(host, "rdzv_port_free", FAIL, f"port {port} on {host} is held: {holder.describe()}",
                   f"{stop} (`clusterctl down` if it is a stale torchrun of an earlier run), or set "
                   f"rendezvous.port: {spare}", "port_in_use")


def check_rdzv_reachable(host: str, master: str, address: str, port: int, connect_error: Optional[str],
                         worker_rules: Sequence[str] = (), master_rules: Sequence[str] = ()) -> CheckResult:
    """A worker's TCP connect to master:port. 'Connection refused' with no rule in the way means
    the path is open and nothing listens yet, which is normal before launch."""
    quoted = "; ".join([f"on {master}: '{r}'" for r in master_rules] + [f"on {host}: '{r}'" for r in worker_rules])
    if connect_error is None:
        return verdict(host, "rdzv_reachable", PASS, f"{host} connected to {master} at {address}:{port}")
    if "refused" in connect_error.lower() and not quoted:
        return verdict(host, "rdzv_reachable", PASS, f"{master} at {address}:{port} answered (connection refused: "
                       "nothing listens there yet); the path is open")
    detail = f"{host} cannot open a TCP connection to {master} at {address}:{port}: {connect_error}"
    if quoted:
        detail += f"; blocking rules {quoted}"
    fixes = []
    if master_rules:
        fixes.append(f"on {master} allow the port: {_allow_command(master_rules, port)}")
    if worker_rules:
        fixes.append(f"on {host} allow outgoing {port}: remove the rules quoted above")
    if not fixes:
        fixes.append(f"check that hosts[{master}].address ({address}) is {master}'s address on the network the "
                     f"nodes share and that {host} routes to it (`ip route get {address}` on {host})")
    fixes.append("or set rendezvous.port to a port the firewall already lets through")
    return verdict(host, "rdzv_reachable", FAIL, detail, "; ".join(fixes), "rdzv_unreachable")


def _allow_command(rules: Sequence[str], port: int) -> str:
    """The command that opens `port` in the firewall the quoted rules come from."""
    first = rules[0]
    if first.startswith(("-A ", ":")):
        return f"`iptables -I INPUT -p tcp --dport {port} -j ACCEPT` (and save it with your rules)"
    if re.search(r"\b(DENY|REJECT|ALLOW)\b|^Default:", first):
        return f"`ufw allow {port}/tcp` (or `ufw allow from SUBNET to any port {port} proto tcp`)"
    return f"`nft insert rule inet filter input tcp dport {port} accept` (adjust to the table/chain quoted)"


def check_nic(routes: Mapping[str, RouteInfo], master: str, interfaces: Mapping[str, Sequence[Interface]] = {},
              overrides: Mapping[str, Optional[str]] = {}) -> list[CheckResult]:
    """Each node's route to the master picks the NCCL/Gloo socket interface (hosts[].nic overrides).

    `interfaces` (host -> `ip addr` fact) names the master's own NIC, whose route to itself says dev lo.
    """
    chosen: dict[str, str] = {}
    results: dict[str, CheckResult] = {}
    for host, route in routes.items():
        if overrides.get(host):
            chosen[host] = overrides[host]
            continue
        nic, problem = _route_nic(host, route, master, interfaces.get(host, ()))
        if problem:
            results[host] = problem
        else:
            chosen[host] = nic
    per_node = ", ".join(f"{h}: {n}" for h, n in chosen.items())
    for host, nic in chosen.items():
        route = routes[host]
        how = f"hosts[{host}].nic: {nic}" if overrides.get(host) else \
            f"route to {master} {route.dst}: dev {nic} src {route.src}{' via ' + route.via if route.via else ''}"
        env = f"NCCL_SOCKET_IFNAME={nic} GLOO_SOCKET_IFNAME={nic}"
        if len(set(chosen.values())) > 1:
            # not a warning: launched by clusterctl, every node gets its own names (by hand, one
            # NCCL_SOCKET_IFNAME for all would be wrong somewhere: the detail says so)
            results[host] = verdict(host, "nic", PASS, f"{how}; interface names differ across nodes ({per_node}): "
                                    f"clusterctl sets them per node, here {env}")
        else:
            results[host] = verdict(host, "nic", PASS, f"{how}; clusterctl sets {env}")
    return [results[host] for host in routes]


def _route_nic(host: str, route: RouteInfo, master: str,
               interfaces: Sequence[Interface]) -> tuple[Optional[str], Optional[CheckResult]]:
    """(the interface the route leaves through, or the verdict on why it is unusable)."""
    if route.unreadable:
        return None, cannot_read(host, "nic", f"the route to {master}: {route.unreadable}",
                                 f"set hosts[{host}].nic to the interface that reaches {master}")
    if route.error:
        return None, verdict(host, "nic", FAIL, f"{host} has no route to {master}: {route.error}",
                             f"add a route from {host} to {master}'s address, or set hosts[{master}].address to an "
                             "address both share", "rdzv_unreachable")
    nic = route.dev
    if route.local and host == master:
        own = interface_with_address(interfaces, route.src or route.dst or "")
        if own is None:
            return None, verdict(host, "nic", WARN, f"{host} is the master and its route says dev lo; no interface "
                                 f"known to hold {route.src}", f"set hosts[{host}].nic to the interface the workers reach")
        nic = own.name
    if nic == "lo" or is_virtual_interface(nic or "lo"):
        return None, verdict(host, "nic", FAIL, f"the route from {host} to {master} ({route.dst}) leaves through {nic}, "
                             "a virtual interface: NCCL/Gloo would bind there and peers never answer",
                             f"set hosts[{master}].address to {master}'s LAN address, or hosts[{host}].nic to the "
                             "physical interface", "nic_mismatch")
    return nic, None


def check_hostname(host: str, resolution: HostnameResolution, single_node: bool = False) -> CheckResult:
    """The hostname's resolution. With every rank on one node (`single_node`) ranks talk over
    loopback anyway, so a hostname on loopback or unresolvable cannot matter: no warning."""
    name = resolution.hostname
    if resolution.unreadable:
        return cannot_read(host, "hostname", resolution.unreadable)
    note = "the launcher passes --local-addr (and is_host on the master), so torchrun does not rely on it"
    if single_node and resolution.addresses and not resolution.loopback_only:
        return verdict(host, "hostname", PASS, f"hostname {name} resolves to {', '.join(resolution.addresses)}")
    if single_node:
        seen = f"resolves to {', '.join(resolution.addresses)}" if resolution.resolvable else "does not resolve"
        return verdict(host, "hostname", PASS, f"hostname {name} {seen}; every rank runs on {host} and talks over "
                       "loopback, so it does not matter")
    if not resolution.resolvable:
        return verdict(host, "hostname", WARN, f"hostname {name} of {host} does not resolve; {note}",
                       f"add `ADDRESS {name}` to /etc/hosts on {host} for tools that look it up",
                       "hostname_unresolvable")
    if resolution.loopback_only:
        return verdict(host, "hostname", WARN, f"hostname {name} of {host} resolves to loopback "
                       f"{', '.join(resolution.addresses)}; {note}",
                       f"map {name} to its LAN address in /etc/hosts on {host} (replace the 127.0.1.1 line)",
                       "nic_mismatch")
    return verdict(host, "hostname", PASS, f"hostname {name} resolves to {', '.join(resolution.addresses)}")


def check_ib(statuses: Mapping[str, IbStatus], mode: str = "auto") -> list[CheckResult]:
    """InfiniBand/RoCE per node and across nodes; checks.ib: auto | required | off.

    auto: a node with HCAs but no usable port fails (NCCL would try them, or silently fall back
    to TCP), a node without HCAs passes (NCCL uses TCP sockets), an unreadable state warns.
    required: no usable port fails. off: passes; clusterctl sets NCCL_IB_DISABLE=1."""
    if mode == "off":
        return [verdict(h, "ib", PASS, "checks.ib is off: clusterctl sets NCCL_IB_DISABLE=1 (TCP sockets)")
                for h in statuses]
    with_ib = {h: s for h, s in statuses.items() if s.nccl_ports}
    layer = majority({h: s.link_layer for h, s in with_ib.items()}) if with_ib else None
    count = majority({h: len(s.nccl_ports) for h, s in with_ib.items()}) if with_ib else 0
    return [_ib_verdict(host, status, mode, bool(with_ib), layer, count) for host, status in statuses.items()]


_OFF = "or set checks.ib: off so every node uses TCP (clusterctl then sets NCCL_IB_DISABLE=1)"


def _ib_verdict(host: str, status: IbStatus, mode: str, any_ib: bool, layer: Optional[str], count: int) -> CheckResult:
    ports = status.nccl_ports
    if not ports and status.unreadable:
        return cannot_read(host, "ib", f"the InfiniBand ports: {status.unreadable}",
                           f"run `ibstat` and `cat /sys/class/infiniband/*/ports/*/state` on {host}; {_OFF}")
    if not ports and status.has_devices:
        return verdict(host, "ib", FAIL, f"{host} has HCAs ({', '.join(status.hcas)}) but no usable port: "
                       f"{_port_states(status)} (read from {status.source})",
                       f"bring the ports up on {host} ({_causes(status)}), {_OFF}", "ib_config")
    if not ports:
        why = status.error or "no InfiniBand/RoCE device"
        if mode == "required" or any_ib:
            peers = " while other nodes have active ports" if any_ib else " and checks.ib is required"
            return verdict(host, "ib", FAIL, f"no usable IB/RoCE port on {host}{peers}: {why}",
                           f"give {host} the HCAs the other nodes have, {_OFF}", "ib_config")
        return verdict(host, "ib", PASS, f"no InfiniBand/RoCE on {host} ({why}): NCCL uses TCP sockets")
    hca = status.nccl_ib_hca
    if layer and status.link_layer != layer:
        return verdict(host, "ib", FAIL, f"{host} would use {status.link_layer} ports ({hca}) while the other nodes "
                       f"use {layer}", f"give {host} the same fabric as the others, or set checks.ib: off", "ib_config")
    down = [p for p in status.inactive_ports if p.link_layer == status.link_layer]
    if status.warnings and status.source == "ibstat":
        return verdict(host, "ib", WARN, f"NCCL_IB_HCA={hca}, but ibstat stopped early: {status.warnings[-1]}",
                       f"run `ibstat` on {host}; a device it cannot stat may be missing from NCCL_IB_HCA", "ib_config")
    if len(ports) < count or down:
        fewer = f"only {len(ports)} active port(s) where the other nodes have {count}; " if len(ports) < count else ""
        listed = ", ".join(f"{p.describe()} ({p.likely_cause})" for p in down) or "none"
        return verdict(host, "ib", WARN, f"NCCL_IB_HCA={hca}: {fewer}down: {listed}",
                       f"bring up the down ports on {host}; the slowest node sets the pace", "ib_config")
    return verdict(host, "ib", PASS, f"NCCL_IB_HCA={hca} ({len(ports)} x {ports[0].rate} Gb/s {status.link_layer}, "
                   f"from {status.source})")


def _port_states(status: IbStatus) -> str:
    return ", ".join(f"{p.name} {p.state}/{p.physical_state}" for p in status.ports)


def _causes(status: IbStatus) -> str:
    return "; ".join(dict.fromkeys(port.likely_cause for port in status.ports))
