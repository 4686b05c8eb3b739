"""How a process becomes "on a node": its network namespace, hostname and /etc/hosts.

Daemons (sshd, dockerd) enter the node's network namespace with `nsenter --net=` (not
`ip netns exec`, which remounts /sys and breaks dockerd's cgroup discovery), then get a
private UTS namespace carrying the node's hostname and a private mount namespace in which
the node's own hosts file is bind-mounted over /etc/hosts. Like a Debian machine, that
file maps the hostname to 127.0.1.1: the "hostname resolves to loopback" trap is real here.
Root's ~/.bashrc reads as Debian's stock file (/etc/skel/.bashrc) on the node: bash sources
it for every command sshd runs, and a development machine's own (pyenv init: ~150 ms of
CPU per command) would make every node slower than a freshly installed one.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from clusterctl.sandbox.layout import Node

# Positional parameters only, so no name or path is ever parsed by the shell.
# /run/netns is detached (and hidden under an empty tmpfs) inside the private mount
# namespace: otherwise the copied nsfs mounts of every other node would keep their
# namespaces alive after `ip netns del`, and a node would "see" the other nodes.
_ENTER = (
    'hostname "$1" && mount --bind "$2" /etc/hosts || exit 1; '
    'if [ -f "$4" ]; then mount --bind "$3" "$4" || exit 1; fi; '
    "umount -l /run/netns 2>/dev/null && mount -t tmpfs -o size=16k,mode=755 cc-netns /run/netns; "
    'shift 4; exec "$@"'
)
STOCK_BASHRC = Path("/etc/skel/.bashrc")


def hosts_text(node: Node) -> str:
    return (
        "127.0.0.1\tlocalhost\n"
        f"127.0.1.1\t{node.name}\n"
        "\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        "ff02::1\tip6-allnodes\n"
        "ff02::2\tip6-allrouters\n"
    )


def write_node_files(node: Node) -> None:
    """The files the node's daemons see over the machine's own: /etc/hosts and root's ~/.bashrc."""
    node.hosts_file.write_text(hosts_text(node))
    node.bashrc.write_text(STOCK_BASHRC.read_text() if STOCK_BASHRC.is_file() else "")


def root_bashrc() -> Path:
    return Path(os.path.expanduser("~root")) / ".bashrc"


def net_argv(node: Node, argv: Sequence[str]) -> list[str]:
    """argv run in the node's network namespace only (what tests use to plant faults)."""
    return ["nsenter", f"--net={node.netns_path}", *map(str, argv)]


def daemon_argv(node: Node, argv: Sequence[str]) -> list[str]:
    """argv run as a daemon of the node: its network, hostname and /etc/hosts."""
    return net_argv(
        node,
        ["unshare", "--uts", "--mount", "--propagation", "private",
         "sh", "-c", _ENTER, "sh", node.name, str(node.hosts_file), str(node.bashrc), str(root_bashrc()),
         *map(str, argv)],
    )
