"""How a process becomes "on a node": its network namespace, hostname and /etc/hosts.

Daemons (sshd, dockerd) enter the node's network namespace with `nsenter --net=` (not
`ip netns exec`, which remounts /sys and breaks dockerd's cgroup discovery), then get a
private UTS namespace carrying the node's hostname and a private mount namespace in which
the node's own hosts file is bind-mounted over /etc/hosts. Like a Debian machine, that
file maps the hostname to 127.0.1.1 on odd nodes: the "hostname resolves to loopback" trap
is real here.
A sudo node (layout.py) also gets /etc/passwd, /etc/group and /etc/sudoers of its own that
know the non-root user, so the machine's own users are never touched. Root's ~/.bashrc
reads as Debian's stock file (/etc/skel/.bashrc) on the node: bash sources
it for every command sshd runs, and a development machine's own (pyenv init: ~150 ms of
CPU per command) would make every node slower than a freshly installed one.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

from clusterctl.sandbox.layout import SUDO_UID, SUDO_USER, Node

# Positional parameters only, so no name or path is ever parsed by the shell: $1 is the
# hostname, then pairs of (file, where to bind it) up to a `--`, then the daemon's argv.
# /run/netns is detached (and hidden under an empty tmpfs) inside the private mount
# namespace: otherwise the copied nsfs mounts of every other node would keep their
# namespaces alive after `ip netns del`, and a node would "see" the other nodes.
# `--sys-class DIR` before the `--` lays DIR over /sys/class (a read-only overlay): the node
# then shows the hardware a stand-in variant describes (/sys/class/infiniband/...).
_ENTER = (
    'hostname "$1" || exit 1; shift; '
    'while [ "$1" != -- ]; do '
    'if [ "$1" = --sys-class ]; then mount -t overlay cc-sys -o "lowerdir=$2:/sys/class" /sys/class || exit 1; '
    'else mount --bind "$1" "$2" || exit 1; fi; shift 2; done; shift; '
    "umount -l /run/netns 2>/dev/null && mount -t tmpfs -o size=16k,mode=755 cc-netns /run/netns; "
    'exec "$@"'
)
STOCK_BASHRC = Path("/etc/skel/.bashrc")
DOCKER_CERTS_D = Path("/etc/docker/certs.d")  # where dockerd looks for a registry's CA (per node: bound over)
SUDOERS = (
    'Defaults env_reset\n'
    'Defaults secure_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\n'
    "root ALL=(ALL:ALL) ALL\n"
    f"{SUDO_USER} ALL=(ALL:ALL) NOPASSWD: ALL\n"
)


def hosts_text(node: Node) -> str:
    """Debian's layout on odd nodes (the hostname on 127.0.1.1), the node's address on even ones."""
    short = node.hostname.split(".")[0]
    own = "127.0.1.1" if node.hostname_on_loopback else node.address
    return (
        "127.0.0.1\tlocalhost\n"
        f"{own}\t{node.hostname} {short}\n"
        "\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        "ff02::1\tip6-allnodes\n"
        "ff02::2\tip6-allrouters\n"
    )


def write_node_files(node: Node, authorized_keys: str) -> None:
    """The files the node's daemons see over the machine's own: /etc/hosts, root's ~/.bashrc,
    and on a sudo node /etc/passwd, /etc/group and /etc/sudoers that know SUDO_USER."""
    node.hosts_file.write_text(hosts_text(node))
    node.bashrc.write_text(STOCK_BASHRC.read_text() if STOCK_BASHRC.is_file() else "")
    if not node.sudo_user:
        return
    passwd = Path("/etc/passwd").read_text().rstrip("\n") + "\n"
    node.passwd_file.write_text(passwd + f"{SUDO_USER}:x:{SUDO_UID}:{SUDO_UID}::{node.home}:/bin/bash\n")
    groups = []
    for line in Path("/etc/group").read_text().splitlines():
        fields = line.split(":")
        if len(fields) == 4 and fields[0] == "docker":  # the engine's socket group, as on real nodes
            fields[3] = ",".join(filter(None, [fields[3], SUDO_USER]))
        groups.append(":".join(fields))
    node.group_file.write_text("\n".join(groups) + f"\n{SUDO_USER}:x:{SUDO_UID}:\n")
    # pam_unix's account check (sudo runs it) wants a shadow entry: "*" is no password, not locked
    shadow = Path("/etc/shadow").read_text().rstrip("\n") + "\n"
    node.shadow_file.write_text(shadow + f"{SUDO_USER}:*:20000:0:99999:7:::\n")
    node.shadow_file.chmod(0o640)
    node.sudoers_file.write_text(SUDOERS)
    node.sudoers_file.chmod(0o440)
    ssh_dir = node.home / ".ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(authorized_keys)
    for path in (node.home, ssh_dir, ssh_dir / "authorized_keys"):
        os.chown(path, SUDO_UID, SUDO_UID)
        path.chmod(0o600 if path.is_file() else 0o700)


def root_bashrc() -> Path:
    return Path(os.path.expanduser("~root")) / ".bashrc"


def net_argv(node: Node, argv: Sequence[str]) -> list[str]:
    """argv run in the node's network namespace only (what tests use to plant faults)."""
    return ["nsenter", f"--net={node.netns_path}", *map(str, argv)]


def hardware(node: Node) -> Optional[Path]:
    """The stand-in variant the node impersonates (a directory with bin/, maybe sys/class/, env)."""
    try:
        text = node.hardware_file.read_text().strip()
    except OSError:
        return None
    return Path(text) if text else None


def hardware_env(node: Node) -> list[tuple[str, str]]:
    """The variant's `env` file: NAME=value lines for every session (e.g. LANG=zh_CN.UTF-8)."""
    variant = hardware(node)
    if variant is None or not (variant / "env").is_file():
        return []
    pairs = []
    for line in (variant / "env").read_text().splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name.replace("_", "").isalnum() and not name.startswith("#"):
            pairs.append((name, value))
    return pairs


def _binds(node: Node) -> list[str]:
    binds = [str(node.hosts_file), "/etc/hosts"]
    variant = hardware(node)
    if variant is not None and (variant / "sys" / "class").is_dir():
        sys_class = str(variant / "sys" / "class")
        if ":" in sys_class or "," in sys_class:
            raise ValueError(f"an overlay lower dir cannot contain ':' or ',': {sys_class}")
        binds += ["--sys-class", sys_class]
    if root_bashrc().is_file():
        binds += [str(node.bashrc), str(root_bashrc())]
    if node.certs_dir.is_dir() and DOCKER_CERTS_D.is_dir():  # made by engine.start
        binds += [str(node.certs_dir), str(DOCKER_CERTS_D)]
    if node.sudo_user:
        binds += [str(node.passwd_file), "/etc/passwd", str(node.group_file), "/etc/group",
                  str(node.shadow_file), "/etc/shadow", str(node.sudoers_file), "/etc/sudoers"]
    return binds


def daemon_argv(node: Node, argv: Sequence[str]) -> list[str]:
    """argv run as a daemon of the node: its network, hostname, /etc/hosts (and users)."""
    return net_argv(
        node,
        ["unshare", "--uts", "--mount", "--propagation", "private",
         "sh", "-c", _ENTER, "sh", node.hostname, *_binds(node), "--", *map(str, argv)],
    )
