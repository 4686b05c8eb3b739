"""A rank's TCP connections, read from /proc/PID/net/tcp{,6} lines, and what looks wrong in them. Pure.

Used when every rank waits in the same collective: then no rank is elsewhere, and the peer the
collective waits for is outside the job (a rank of another run, a process holding the port) or the
network loses its traffic. What the kernel's table can tell, per rank and per sample:
- a connection still in SYN-SENT: the rank is connecting to an address that does not answer;
- bytes in a connection's send queue in every sample (sent, never acknowledged): the far end
  neither reads nor acknowledges, or a firewall drops the packets on the way; the far address is named;
- unrecovered retransmission timeouts (the `retrnsmt` column) on a connection;
- no established connection to the master's rendezvous port (the TCPStore every rank holds).
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Iterable, Optional

STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT",
          7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING"}

_LINE_RE = re.compile(r"^\s*\d+:\s+(?P<local>[0-9A-Fa-f]{8,32}:[0-9A-Fa-f]{4})\s+(?P<remote>[0-9A-Fa-f]{8,32}:[0-9A-Fa-f]{4})"
                      r"\s+(?P<state>[0-9A-Fa-f]{2})\s+(?P<tx>[0-9A-Fa-f]{1,8}):(?P<rx>[0-9A-Fa-f]{1,8})"
                      r"\s+\S+\s+(?P<retrans>[0-9A-Fa-f]{1,8})\s+\d+\s+\d+\s+(?P<inode>\d+)")


@dataclass(frozen=True)
class Socket:
    local: tuple[str, int]
    remote: tuple[str, int]
    state: str
    tx_queue: int  # bytes sent and not yet acknowledged (ESTABLISHED), or the backlog (LISTEN)
    rx_queue: int
    retransmits: int  # unrecovered retransmission timeouts
    inode: int

    def __str__(self) -> str:
        return f"{_endpoint(self.local)} -> {_endpoint(self.remote)} {self.state}"


def parse_tcp_table(text: str) -> tuple[Socket, ...]:
    """/proc/net/tcp or tcp6 lines (headers and noise skipped) -> sockets. Never raises."""
    sockets = []
    for line in text.splitlines():
        match = _LINE_RE.match(line)
        if not match:
            continue
        local, remote = _address(match.group("local")), _address(match.group("remote"))
        if local is None or remote is None:
            continue
        sockets.append(Socket(local, remote, STATES.get(int(match.group("state"), 16), match.group("state")),
                              int(match.group("tx"), 16), int(match.group("rx"), 16),
                              int(match.group("retrans"), 16), int(match.group("inode"))))
    return tuple(sockets)


def _address(text: str) -> Optional[tuple[str, int]]:
    """The kernel's hex address: IPv4 as one little-endian word, IPv6 as four."""
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        packed = raw[::-1]
    elif len(raw) == 16:
        packed = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    else:
        return None
    address = ipaddress.ip_address(packed)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return str(address), int(port, 16)


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _endpoint(pair: tuple[str, int]) -> str:
    return f"[{pair[0]}]:{pair[1]}" if ":" in pair[0] else f"{pair[0]}:{pair[1]}"


@dataclass(frozen=True)
class Suspect:
    host: str
    rank: int
    what: str  # one sentence: the connection and what is wrong with it
    peer: Optional[str] = None  # the inventory host at the far end, when known


def suspicious_connections(samples: Iterable[Iterable[tuple[str, int, tuple[Socket, ...]]]], master: tuple[str, int],
                           host_of_address: dict[str, str]) -> list[Suspect]:
    """From each sample's (host, rank, sockets): the connections that look wrong, worst first.

    A send queue counts only when it is non-empty in every sample (a busy link drains between samples)."""
    samples = [list(sample) for sample in samples]
    if not samples:
        return []
    seen: dict[tuple[str, int, int], list[Socket]] = {}  # (host, rank, inode) -> the socket in each sample
    ranks: dict[tuple[str, int], list[tuple[Socket, ...]]] = {}
    for sample in samples:
        for host, rank, sockets in sample:
            ranks.setdefault((host, rank), []).append(sockets)
            for socket in sockets:
                seen.setdefault((host, rank, socket.inode), []).append(socket)
    suspects: list[tuple[int, Suspect]] = []
    for (host, rank, _inode), history in seen.items():
        last = history[-1]
        peer = host_of_address.get(last.remote[0])
        named = f"{last} ({peer})" if peer else str(last)
        if last.state == "SYN_SENT":
            suspects.append((0, Suspect(host, rank, f"{named}: connecting, no answer", peer)))
        elif last.state == "ESTABLISHED" and len(history) == len(samples) and all(s.tx_queue for s in history):
            suspects.append((1, Suspect(host, rank, f"{named}: {last.tx_queue} bytes sent and not acknowledged "
                                                    f"in every sample", peer)))
        elif last.retransmits:
            suspects.append((2, Suspect(host, rank, f"{named}: {last.retransmits} unrecovered retransmission "
                                                    "timeout(s)", peer)))
    for (host, rank), history in ranks.items():
        # every rank holds a TCPStore client connection to the master's rendezvous port (an address:
        # a master named by host name cannot be compared with the kernel's table, and is not judged)
        if _is_address(master[0]) and not any(s.state == "ESTABLISHED" and s.remote == master for s in history[-1]):
            suspects.append((3, Suspect(host, rank, f"no connection to the master's store {_endpoint(master)}")))
    return [s for _, s in sorted(suspects, key=lambda item: (item[0], item[1].host, item[1].rank))]
