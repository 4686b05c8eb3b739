"""Addresses, interfaces and connections as logs print them: which addresses route nowhere beyond their host or
link, which interface lists leave NCCL on a virtual one, what a failed connection between nodes reads like. Shared by
rules.py's and rules_words.py's rows for nic_mismatch, nccl_socket_error and rdzv_unreachable, so that one reading of
an address holds for every transport (NCCL, Gloo, c10d, UCX, Open MPI)."""
from __future__ import annotations

# a link-local address (IPv6 fe80::, IPv4 169.254/16) routes nowhere beyond its own link
LINK_LOCAL = r"fe80::[0-9a-f:]*%[\w.-]+|\b169\.254\.\d{1,3}\.\d{1,3}\b"
# (after batch 13) a Docker bridge's gateway, the host's own address on docker0 / a user-defined bridge (172.17-31.0.1):
# reachable from that host's containers only, so a peer that published it picked the wrong interface
BRIDGE_GATEWAY = r"\b172\.(?:1[7-9]|2\d|3[01])\.0\.1\b"
# (after batch 32) a container's own address on Docker's default bridge (172.17.0.2 and up): no other host routes to it
BRIDGE_CONTAINER = r"\b172\.17\.0\.(?:[2-9]|\d\d+)\b"
# addresses a rank's peer cannot route to: NCCL connecting there is the interface's fault (nic_mismatch), not the
# network's (nccl_socket_error)
NOT_ROUTED = rf"127\.0\.[01]\.1|{LINK_LOCAL}|{BRIDGE_GATEWAY}|{BRIDGE_CONTAINER}"
# (after batch 33) of those, the ones that are not the host's own loopback: a peer connecting to one of them, in any
# transport's words (UCX's `connect(fd=42, dest_addr=172.17.0.1:54351)`, c10d's `trying to connect to (172.17.0.2`),
# was handed an address of the wrong interface; a connection to 127.0.0.1 may be a single host's own rendezvous
OFF_HOST_UNROUTED = rf"{LINK_LOCAL}|{BRIDGE_GATEWAY}|{BRIDGE_CONTAINER}"
# (after batch 28) NCCL's socket interfaces when one it may use is a virtual or link-local one (a veth of a container's
# bridge, docker0, an fe80:: address): a connection failing between the nodes is then the interface's fault first;
# (after batch 31) loopback too (NCCL_SOCKET_IFNAME=lo on a run of two nodes: every peer's address is its own);
# (after batch 32) a peer's address on Docker's default bridge (lower case: `unless_log` reads the lowered log)
NCCL_NOT_ROUTING = (r"(?:bootstrap|net/socket) : using .{0,200}\[\d+\](?:veth|docker|virbr|br-|lo:)\w*:?"
                    r"|(?:bootstrap|net/socket) : using .{0,200}:fe80::|connect to 172\.17\.0\.(?:[2-9]|\d\d+)<")
CONNECT_FAILED = r"Call to connect (?:failed|returned) ?:? ?(?:Connection refused|Connection timed out|No route)"
# a rank inside a container on Docker's default bridge (its own 172.17.0.x, not the gateway), or whose hostname is a
# container's id: not the host's network, so peers on other hosts cannot reach the address NCCL publishes
CONTAINER_BRIDGE_NCCL = (r"(?:Bootstrap|NET/Socket) : Using (?:\[\d+\])?[\w.-]+:172\.17\.(?:0\.(?:[2-9]|\d\d+)"
                         r"|[1-9]\d*\.\d{1,3})<")
CONTAINER_ID_HOST_NCCL = r"^[0-9a-f]{12}:\d+:\d+ \[\d+\] NCCL INFO (?:Bootstrap|NET/Socket) : Using"
# a connection between the nodes failed (lower case: `requires` searches the lowered log); not NCCL's bare system
# error, which a full /dev/shm in the same container says too (batch 29)
NET_FAILED = (r"socket\.cc:\d+ -> 2|call to connect (?:failed|returned)|connect to \S+ failed|remote process exited"
              r"|connection refused|connection timed out")
