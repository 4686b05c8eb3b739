"""Firewall facts: which rules would stop a new TCP/UDP connection to a port.

Reads `iptables-save`, `nft list ruleset` and `ufw status verbose` text and walks the
rules the way the kernel does: first match wins, jumps into user chains, the chain
policy at the end. What a rule tests that a text dump cannot answer (an interface
name, an ipset, an unknown peer address) counts against the connection: a DROP that
might match is reported, an ACCEPT that might match is not trusted. Only the filter
hooks matter (iptables' filter table; nft chains of type filter).
"""
from __future__ import annotations

import ipaddress
import re
import shlex
from dataclasses import dataclass, field
from typing import Callable, Optional

from clusterctl.preflight.facts._text import strip_provenance
from clusterctl.preflight.facts.nvidia import ANY_EXIT
from clusterctl.models import Command

IPTABLES_SAVE = Command(argv=("iptables-save",), timeout=30.0, ok_exit_codes=ANY_EXIT, privileged=True)
NFT_RULESET = Command(argv=("nft", "list", "ruleset"), timeout=30.0, ok_exit_codes=ANY_EXIT, privileged=True)
UFW_STATUS = Command(argv=("ufw", "status", "verbose"), timeout=30.0, ok_exit_codes=ANY_EXIT, privileged=True)

ACCEPT, BLOCK, RETURN = "accept", "block", "return"


@dataclass(frozen=True)
class Connection:
    """A new connection as one host's firewall sees it."""

    port: int
    proto: str = "tcp"
    peer: Optional[str] = None  # the other end's address (source when inbound, destination when outbound)
    inbound: bool = True


@dataclass(frozen=True)
class Firewall:
    iptables: str = ""
    nft: str = ""
    ufw: str = ""

    def rules_blocking(self, port: int, proto: str = "tcp", src: Optional[str] = None,
                       dst: Optional[str] = None, direction: str = "both") -> list[str]:
        """The rule lines that would DROP/REJECT a new connection to `port`.

        `src` is the peer for connections coming in, `dst` the peer for connections
        going out; `direction` is "in", "out" or "both".
        """
        found: list[str] = []
        for text in (self.iptables, self.nft, self.ufw):
            for line in rules_blocking(text, port, proto, src, dst, direction):
                if line not in found:
                    found.append(line)
        return found


def rules_blocking(text: str, port: int, proto: str = "tcp", src: Optional[str] = None,
                   dst: Optional[str] = None, direction: str = "both") -> list[str]:
    """Blocking rule lines in one ruleset dump; its format (iptables-save, nft, ufw) is detected."""
    text = strip_provenance(text)
    evaluate = _evaluator(text)
    if evaluate is None:
        return []
    connections = []
    if direction in ("in", "both"):
        connections.append(Connection(port=port, proto=proto.lower(), peer=src, inbound=True))
    if direction in ("out", "both"):
        connections.append(Connection(port=port, proto=proto.lower(), peer=dst, inbound=False))
    found: list[str] = []
    for connection in connections:
        for line in evaluate(text, connection):
            if line not in found:
                found.append(line)
    return found


def _evaluator(text: str) -> Optional[Callable[[str, Connection], list[str]]]:
    if re.search(r"^(\*filter|:INPUT |-A INPUT )", text, re.MULTILINE):
        return _iptables_blocking
    if re.search(r"^table (ip|ip6|inet|arp|bridge|netdev) ", text, re.MULTILINE):
        return _nft_blocking
    if re.search(r"^Status: (active|inactive)", text, re.MULTILINE):
        return _ufw_blocking
    return None


# --------------------------------------------------------------------------- shared matching


def _port_in(spec: str, port: int) -> bool:
    """22 | 29500:29510 | 29500-29510 | 22,80,443 | { 22, 29400-29410 }."""
    for part in re.split(r"[,\s{}]+", spec.strip()):
        if not part:
            continue
        bounds = re.split(r"[:\-]", part)
        if not all(re.fullmatch(r"[0-9]{1,5}", b) for b in bounds):
            return False  # a named service or set: cannot tell
        low, high = int(bounds[0]), int(bounds[-1])
        if low <= port <= high:
            return True
    return False


def _address_in(spec: str, address: Optional[str]) -> Optional[bool]:
    """Whether `address` falls in a comma/space list of networks; None when unknown."""
    if address is None:
        return None
    try:
        peer = ipaddress.ip_address(address)
    except ValueError:
        return None
    for part in re.split(r"[,\s{}]+", spec.strip()):
        if not part:
            continue
        try:
            if peer in ipaddress.ip_network(part, strict=False):
                return True
        except ValueError:
            return None  # a hostname or a named set
    return False


def _negate(value: Optional[bool], negated: bool) -> Optional[bool]:
    return value if value is None or not negated else not value


def _combine(results: list[Optional[bool]]) -> Optional[bool]:
    if any(result is False for result in results):
        return False
    return None if any(result is None for result in results) else True


# --------------------------------------------------------------------------- iptables-save


@dataclass
class _Table:
    policies: dict[str, tuple[str, str]] = field(default_factory=dict)  # chain -> (policy, line)
    rules: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)  # chain -> [(line, tokens)]


def _parse_iptables(text: str) -> dict[str, _Table]:
    tables: dict[str, _Table] = {}
    table = tables.setdefault("filter", _Table())  # rules.v4 files may omit nothing; default anyway
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("*"):
            table = tables.setdefault(line[1:], _Table())
        elif line.startswith(":") and line[1:].split():  # a bare ":" (output cut mid-line) names no chain
            name, policy = (line[1:].split() + ["-"])[:2]
            table.policies[name] = (policy, line)
            table.rules.setdefault(name, [])
        elif line.startswith("-A "):
            try:
                tokens = shlex.split(line)
            except ValueError:
                tokens = line.split()
            table.rules.setdefault(tokens[1], []).append((line, tokens[2:]))
    return tables


_PROTOCOLS = {"6": "tcp", "17": "udp", "132": "sctp"}


def _iptables_match(tokens: list[str], connection: Connection) -> tuple[Optional[bool], Optional[str]]:
    """(does the rule match, its target)."""
    results: list[Optional[bool]] = []
    target = None
    i, negated = 0, False
    while i < len(tokens):
        token = tokens[i]
        value = tokens[i + 1] if i + 1 < len(tokens) else ""
        if token == "!":
            negated, i = True, i + 1
            continue
        if token in ("-j", "--jump", "-g", "--goto"):
            target = value
            break  # the rest are the target's own options
        step, result = _iptables_condition(token, value, connection)
        if result != "skip":
            results.append(_negate(result, negated))
        negated, i = False, i + step
    return _combine(results), target


def _iptables_condition(option: str, value: str, c: Connection):
    """(tokens consumed, True/False/None or 'skip' for options that test nothing)."""
    if option in ("-m", "--match"):
        return 2, "skip"
    if option in ("-p", "--protocol"):
        proto = _PROTOCOLS.get(value, value.lower())
        return 2, proto in ("all", c.proto)
    if option in ("--dport", "--destination-port", "--dports", "--destination-ports"):
        return 2, _port_in(value, c.port)
    if option in ("--sport", "--source-port", "--sports", "--source-ports"):
        return 2, None  # the peer's ephemeral port
    if option in ("-s", "--source"):
        return 2, _address_in(value, c.peer) if c.inbound else None
    if option in ("-d", "--destination"):
        return 2, None if c.inbound else _address_in(value, c.peer)
    if option in ("-i", "--in-interface", "-o", "--out-interface"):
        return 2, False if value == "lo" else None
    if option in ("--ctstate", "--state"):
        return 2, "NEW" in value.upper().split(",")
    if option == "--dst-type":
        return 2, (value == "LOCAL") if c.inbound else (False if value == "LOCAL" else None)
    if option == "--src-type":
        return 2, False if value == "LOCAL" and c.inbound else None
    if option in ("--limit", "--limit-burst", "--comment"):
        return 2, "skip"
    if option == "--syn":
        return 1, c.proto == "tcp"
    return 1, None


def _iptables_blocking(text: str, connection: Connection) -> list[str]:
    table = _parse_iptables(text).get("filter")
    if table is None:
        return []
    chain = "INPUT" if connection.inbound else "OUTPUT"
    verdict, line = _walk_iptables(table, chain, connection, depth=0)
    if verdict == BLOCK:
        return [line]
    policy, policy_line = table.policies.get(chain, ("ACCEPT", ""))
    if verdict is None and policy == "DROP":
        return [policy_line]
    return []


def _walk_iptables(table: _Table, chain: str, connection: Connection, depth: int):
    if depth > 20:
        return None, ""
    for line, tokens in table.rules.get(chain, []):
        matched, target = _iptables_match(tokens, connection)
        if matched is False or target is None:
            continue
        if target == "ACCEPT" and matched:
            return ACCEPT, line
        if target in ("DROP", "REJECT"):
            return BLOCK, line  # also when it only might match
        if target == "RETURN" and matched:
            return None, line
        if target in table.rules:
            verdict, where = _walk_iptables(table, target, connection, depth + 1)
            if verdict in (ACCEPT, BLOCK):
                return verdict, where
    return None, ""


# --------------------------------------------------------------------------- nft


@dataclass
class _NftChain:
    name: str
    hook: Optional[str] = None
    policy: str = "accept"
    header: str = ""
    rules: list[str] = field(default_factory=list)


def _parse_nft(text: str) -> list[_NftChain]:
    chains: list[_NftChain] = []
    table = ""
    current: Optional[_NftChain] = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("table "):
            table = line.rstrip("{ ").strip()
        elif line.startswith("chain "):
            current = _NftChain(name=line.split()[1])
            chains.append(current)
        elif current is not None and line.startswith("type "):
            hook = re.search(r"\bhook (\w+)", line)
            policy = re.search(r"\bpolicy (\w+)", line)
            is_filter = line.split()[1] == "filter"
            current.hook = hook.group(1) if hook and is_filter else None
            current.policy = policy.group(1) if policy else "accept"
            current.header = f"{table} chain {current.name}: {line}"
        elif current is not None and line == "}":
            current = None
        elif current is not None and line:
            current.rules.append(line)
    return chains


_NFT_VALUE = r'(?:!=\s*)?(?:\{[^}]*\}|"[^"]*"|\S+)'


def _nft_match(rule: str, c: Connection) -> Optional[bool]:
    results: list[Optional[bool]] = []
    rest = rule
    for pattern, test in _NFT_TESTS:
        for match in re.finditer(pattern, rest):
            value = match.group("v")
            negated = value.startswith("!=")
            value = value[2:].strip() if negated else value
            results.append(_negate(test(match, value, c), negated))
        rest = re.sub(pattern, " ", rest)
    leftover = re.sub(r"\b(counter( packets \d+ bytes \d+)?|accept|drop|reject( with [\w\s-]+)?|"
                      r"(jump|goto) \S+|return|continue|log( prefix \"[^\"]*\")?( level \w+)?|"
                      r"limit rate [^a-z]*\S+|comment \"[^\"]*\")", " ", rest).strip()
    if leftover:
        results.append(None)  # something this reader does not know
    return _combine(results)


_NFT_TESTS: list[tuple[str, Callable]] = [
    (rf"\b(?P<p>tcp|udp|sctp|th) dport (?P<v>{_NFT_VALUE})",
     lambda m, v, c: (m.group("p") in ("th", c.proto)) and _port_in(v.strip('"'), c.port)),
    (rf"\b(?P<p>tcp|udp|sctp|th) sport (?P<v>{_NFT_VALUE})", lambda m, v, c: None),
    (rf"\b(meta l4proto|ip protocol|ip6 nexthdr) (?P<v>{_NFT_VALUE})",
     lambda m, v, c: c.proto in re.split(r"[,\s{}]+", v)),
    (rf"\b(ip|ip6) (?P<d>saddr|daddr) (?P<v>{_NFT_VALUE})",
     lambda m, v, c: _address_in(v, c.peer) if (m.group("d") == "saddr") == c.inbound else None),
    (rf"\b(iif|iifname|oif|oifname) (?P<v>{_NFT_VALUE})", lambda m, v, c: False if v.strip('"') == "lo" else None),
    (rf"\bct state (?P<v>{_NFT_VALUE})", lambda m, v, c: "new" in re.split(r"[,\s{}]+", v)),
    (rf"\bfib daddr type (?P<v>{_NFT_VALUE})", lambda m, v, c: (v == "local") if c.inbound else None),
]


def _nft_verdict(rule: str) -> Optional[tuple[str, Optional[str]]]:
    match = re.search(r"\b(accept|drop|reject|return|jump|goto)\b(?:\s+(\S+))?", rule)
    if not match:
        return None
    return match.group(1), match.group(2) if match.group(1) in ("jump", "goto") else None


def _nft_blocking(text: str, connection: Connection) -> list[str]:
    chains = _parse_nft(text)
    by_name = {chain.name: chain for chain in chains}
    hook = "input" if connection.inbound else "output"
    found = []
    for chain in chains:
        if chain.hook != hook:
            continue
        verdict, line = _walk_nft(chain, by_name, connection, depth=0)
        if verdict == BLOCK:
            found.append(line)
        elif verdict is None and chain.policy == "drop":
            found.append(chain.header)
    return found


def _walk_nft(chain: _NftChain, by_name: dict, connection: Connection, depth: int):
    if depth > 20:
        return None, ""
    for rule in chain.rules:
        verdict = _nft_verdict(rule)
        if verdict is None:
            continue
        matched = _nft_match(rule, connection)
        if matched is False:
            continue
        kind, target = verdict
        if kind == "accept" and matched:
            return ACCEPT, rule
        if kind in ("drop", "reject"):
            return BLOCK, rule
        if kind == "return" and matched:
            return None, rule
        if kind in ("jump", "goto") and target in by_name:
            result, where = _walk_nft(by_name[target], by_name, connection, depth + 1)
            if result in (ACCEPT, BLOCK):
                return result, where
    return None, ""


# --------------------------------------------------------------------------- ufw

_UFW_RULE = re.compile(
    r"^(?:\[\s*\d+\]\s*)?(?P<to>.+?)\s+(?P<action>ALLOW|DENY|REJECT|LIMIT)(?:\s+(?P<dir>IN|OUT|FWD))?\s+(?P<frm>.+?)\s*$")


def _ufw_blocking(text: str, connection: Connection) -> list[str]:
    if re.search(r"^Status: inactive", text, re.MULTILINE):
        return []
    in_rules = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if re.match(r"^\s*--\s+-+\s+-+", line):
            in_rules = True
            continue
        rule = _UFW_RULE.match(line.strip()) if in_rules else None
        if rule is None:
            continue
        direction = rule.group("dir") or "IN"
        if direction != ("IN" if connection.inbound else "OUT"):
            continue
        matched = _ufw_match(rule.group("to"), rule.group("frm"), connection)
        if matched is False:
            continue
        if rule.group("action") in ("ALLOW", "LIMIT") and matched:
            return []
        if rule.group("action") in ("DENY", "REJECT"):
            return [line.strip()]
    default = re.search(r"^Default:.*", text, re.MULTILINE)
    wanted = "incoming" if connection.inbound else "outgoing"
    if default and re.search(rf"\b(deny|reject) \({wanted}\)", default.group(0)):
        return [default.group(0).strip()]
    return []


def _ufw_match(to: str, frm: str, c: Connection) -> Optional[bool]:
    if "(v6)" in to and (c.peer is None or ":" not in c.peer):
        return False
    results: list[Optional[bool]] = []
    ports = re.search(r"(?:^|\s)([\d,:]+)(?:/(\w+))?(?:\s|$)", to.replace(" (v6)", " "))
    if ports:
        results.append(_port_in(ports.group(1), c.port) and (ports.group(2) in (None, c.proto)))
    elif not to.startswith("Anywhere"):
        results.append(None)  # an application profile name
    address = (frm if c.inbound else to).split()[0]
    if _is_network(address):
        results.append(_address_in(address, c.peer))
    return _combine(results)


def _is_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True
