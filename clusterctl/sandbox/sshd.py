"""One real sshd per node, with its own host key, config and pid file.

Clients authenticate with the sandbox's own key pair (root's ~/.ssh is never touched)
and verify hosts strictly against the sandbox's known_hosts file.
"""
from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Iterable

from clusterctl.errors import SandboxError
from clusterctl.sandbox.layout import Layout, Node
from clusterctl.sandbox.nodes import daemon_argv, hardware, hardware_env, net_argv
from clusterctl.sandbox.system import SYSTEM_PATH, children, owned_pid, run, tail, terminate, wait_until

SSHD = "/usr/sbin/sshd"


def ensure_key(path: Path, comment: str, regenerate: bool = False) -> None:
    if regenerate:
        path.unlink(missing_ok=True)
        path.with_suffix(".pub").unlink(missing_ok=True)
    if path.exists() and path.with_suffix(".pub").exists():
        return
    path.unlink(missing_ok=True)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path])


def public_key(path: Path) -> str:
    """`ssh-ed25519 AAAA...` without the comment."""
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def ensure_client_key(layout: Layout) -> None:
    ensure_key(layout.client_key, "clusterctl-sandbox")
    layout.authorized_keys.write_text(public_key(layout.client_key) + "\n")
    layout.authorized_keys.chmod(0o600)


def known_hosts_name(node: Node) -> str:
    """As OpenSSH writes it: `[address]:port` for a port other than 22."""
    return node.listen_address if node.ssh_port == 22 else f"[{node.listen_address}]:{node.ssh_port}"


def write_known_hosts(layout: Layout, nodes: Iterable[Node]) -> None:
    lines = [f"{known_hosts_name(n)} {public_key(n.host_key)}\n" for n in nodes]
    layout.known_hosts.write_text("".join(lines))


def session_path() -> str:
    """PATH for sessions: this interpreter (the one with torch) first, like a real node's python3."""
    python_bin = str(Path(sys.prefix) / "bin")
    return SYSTEM_PATH if python_bin in SYSTEM_PATH.split(":") else f"{python_bin}:{SYSTEM_PATH}"


def config_text(layout: Layout, node: Node, docker: bool) -> str:
    variant = hardware(node)
    path = f"{variant / 'bin'}:{session_path()}" if variant is not None else session_path()
    env = [f'PATH="{node.local_bin}:{path}"', *(f'{name}="{value}"' for name, value in hardware_env(node))]
    if not node.sudo_user:  # root's home is this machine's: its Docker login on the node is the node's own
        env.append(f'DOCKER_CONFIG="{node.docker_config_dir}"')
    if docker:
        env.insert(0, f'DOCKER_HOST="{node.docker_host}"')
    return "\n".join([
        f"Port {node.ssh_port}",
        f"ListenAddress {node.listen_address}",
        f"HostKey {node.host_key}",
        f"PidFile {node.sshd_pid}",
        "PermitRootLogin no" if node.sudo_user else "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes",
        # the non-root user's own ~/.ssh/authorized_keys, as on a real machine
        f"AuthorizedKeysFile {node.home / '.ssh' / 'authorized_keys' if node.sudo_user else layout.authorized_keys}",
        "StrictModes no",  # /var/tmp is world-writable: strict modes would refuse the key file
        "UsePAM no",
        "UseDNS no",
        "PrintMotd no",
        "MaxStartups 100:30:200",
        "MaxSessions 64",
        "Subsystem sftp internal-sftp",
        f"SetEnv {' '.join(env)}",
        "",
    ])


def write_config(layout: Layout, node: Node, docker: bool) -> bool:
    """Write the node's sshd_config; True when it changed (a running sshd must restart)."""
    text = config_text(layout, node, docker)
    old = node.sshd_config.read_text() if node.sshd_config.exists() else None
    if old == text:
        return False
    node.sshd_config.write_text(text)
    return True


def pid(node: Node) -> int | None:
    return owned_pid(node.sshd_pid, str(node.sshd_config))


_BANNER = ("import socket, sys\n"
           "try:\n"
           "    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))\n"
           "    c.settimeout(float(sys.argv[3])); sys.exit(0 if c.recv(8).startswith(b'SSH-') else 1)\n"
           "except OSError:\n"
           "    sys.exit(1)\n")


def answers(node: Node, timeout: float = 0.5) -> bool:
    """The node's sshd sends its banner. A node behind the bastion is asked from its own
    network namespace: this machine has no route to it."""
    if node.behind_bastion:
        argv = net_argv(node, [sys.executable, "-c", _BANNER, node.listen_address, str(node.ssh_port), str(timeout)])
        return run(argv, check=False, timeout=timeout + 10).returncode == 0
    try:
        with socket.create_connection((node.listen_address, node.ssh_port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            return conn.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def start(node: Node, timeout: float = 10.0) -> None:
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    if pid(node) is not None:
        return
    node.sshd_pid.unlink(missing_ok=True)
    done = run(daemon_argv(node, [SSHD, "-f", node.sshd_config, "-E", node.sshd_log]), check=False)
    if done.returncode != 0:
        raise SandboxError(f"sshd of {node.name} failed to start: {done.stderr.strip()}",
                           where=f"{node.sshd_log}\n{tail(node.sshd_log)}")
    wait_until(lambda: pid(node) is not None and answers(node), timeout, f"sshd of {node.name}",
               lambda: f"{node.sshd_log}\n{tail(node.sshd_log)}")


def stop(node: Node, sessions: bool = True) -> None:
    """Stop the listener; with `sessions`, also drop the open connections."""
    listener = pid(node)
    if listener is None:
        node.sshd_pid.unlink(missing_ok=True)
        return
    doomed = ([*children(listener)] if sessions else []) + [listener]
    terminate(doomed, timeout=5)
    node.sshd_pid.unlink(missing_ok=True)


def restart(node: Node) -> None:
    stop(node, sessions=False)
    start(node)
