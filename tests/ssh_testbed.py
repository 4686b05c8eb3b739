"""Real OpenSSH servers and agents for the SSH trust tests: each sshd on 127.0.0.1 at a free high
port with its own config, host key (optionally CA-signed) and authorized_keys in a temporary
directory; an ssh-agent on its own socket. Everything started here is stopped by `Servers.stop()` (the
tests call it in `finally`). Nothing outside the temporary directory is read or written:
clients get `-F` configs that name their own known_hosts files (user and global)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

SSHD = "/usr/sbin/sshd"


def have_openssh() -> bool:
    return os.geteuid() == 0 and os.path.exists(SSHD) and all(
        shutil.which(tool) for tool in ("ssh", "ssh-keygen", "ssh-agent", "ssh-add"))


def free_port() -> int:
    from clusterctl_helpers import free_port as below_ephemeral  # no outgoing connection takes it meanwhile

    return below_ephemeral()


def keygen(path: Path, passphrase: str = "", kind: str = "ed25519", comment: str = "test") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", passphrase, "-C", comment, "-f", str(path)], check=True,
                   timeout=30)
    return path


def sign_host_key(ca: Path, host_pub: Path, principals: str, validity: Optional[str] = None,
                  serial: int = 1) -> Path:
    """`ssh-keygen -s CA -h`: HOST-cert.pub beside the host key."""
    argv = ["ssh-keygen", "-q", "-s", str(ca), "-h", "-I", f"host-{serial}", "-z", str(serial), "-n", principals]
    if validity:
        argv += ["-V", validity]
    subprocess.run(argv + [str(host_pub)], check=True, timeout=30, capture_output=True)
    return Path(str(host_pub)[: -len(".pub")] + "-cert.pub")


def public_line(pub: Path) -> str:
    """`TYPE BASE64` of a .pub file (no comment)."""
    return " ".join(pub.read_text().split()[:2])


@dataclass
class Server:
    name: str
    port: int
    host_key: Path
    process: subprocess.Popen
    directory: Path

    @property
    def host_pub(self) -> str:
        return public_line(Path(f"{self.host_key}.pub"))


class Servers:
    """sshds and agents under one temporary directory, all stopped by stop()."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.servers: list[Server] = []
        self.agents: list[subprocess.Popen] = []
        self.client_key = keygen(directory / "client_key")

    def sshd(self, name: str, *, cert_by: Optional[Path] = None, principals: str = "127.0.0.1",
             validity: Optional[str] = None, authorized: tuple = (), options: str = "") -> Server:
        home = self.dir / f"sshd-{name}"
        home.mkdir()
        host_key = keygen(home / "host_ed25519", comment=f"host {name}")
        keys = [public_line(Path(f"{self.client_key}.pub"))] + [public_line(Path(f"{p}.pub")) for p in authorized]
        (home / "authorized_keys").write_text("".join(k + "\n" for k in keys))
        lines = ["ListenAddress 127.0.0.1", f"HostKey {host_key}", f"AuthorizedKeysFile {home}/authorized_keys",
                 f"PidFile {home}/sshd.pid", "StrictModes no", "UsePAM no", "PasswordAuthentication no",
                 "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password", "AllowTcpForwarding yes",
                 # the default post-quantum exchange costs ~0.3 s of CPU per connection here: tests only need trust
                 "KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256",
                 "Subsystem sftp internal-sftp", "LogLevel ERROR", options]
        if cert_by is not None:
            lines.append(f"HostCertificate {sign_host_key(cert_by, Path(f'{host_key}.pub'), principals, validity)}")
        for _ in range(5):
            port = free_port()
            config = home / "sshd_config"
            config.write_text("\n".join([f"Port {port}"] + lines) + "\n")
            process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL,
                                       stderr=open(home / "sshd.log", "wb"))
            if _wait_for_port(port, process):
                server = Server(name, port, host_key, process, home)
                self.servers.append(server)
                return server
            _stop(process)
        raise RuntimeError(f"sshd {name} did not start: {(home / 'sshd.log').read_text()}")

    def agent(self, *keys: Path, passphrase: str = "") -> str:
        """An ssh-agent holding `keys`; returns its socket path."""
        path = self.dir / f"agent-{len(self.agents)}.sock"
        process = subprocess.Popen(["ssh-agent", "-D", "-a", str(path)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        self.agents.append(process)
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        env = {**os.environ, "SSH_AUTH_SOCK": str(path), "SSH_ASKPASS_REQUIRE": "force",
               "SSH_ASKPASS": str(self._askpass(passphrase)), "DISPLAY": "none"}
        for key in keys:
            subprocess.run(["ssh-add", str(key)], env=env, check=True, capture_output=True, timeout=30,
                           stdin=subprocess.DEVNULL, start_new_session=True)
        return str(path)

    def _askpass(self, passphrase: str) -> Path:
        script = self.dir / "askpass.sh"
        (self.dir / "askpass.txt").write_text(passphrase)
        script.write_text(f"#!/bin/sh\ncat '{self.dir / 'askpass.txt'}'\n")
        script.chmod(0o700)
        return script

    def stop(self) -> None:
        for server in self.servers:
            _stop(server.process)
        for agent in self.agents:
            _stop(agent)
        self.servers, self.agents = [], []


def _wait_for_port(port: int, process: subprocess.Popen, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.02)
    return False


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def openssh_accepts(config: Path, alias: str, env: Optional[dict] = None, timeout: float = 20) -> tuple[bool, str]:
    """OpenSSH's own verdict: `ssh -F config -o BatchMode=yes -o StrictHostKeyChecking=yes alias`,
    opening the in-process sftp subsystem (it ends at stdin's EOF: no login shell to wait for)."""
    proc = subprocess.run(["ssh", "-F", str(config), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                           "-o", "ConnectTimeout=5", "-s", alias, "sftp"], env=env or dict(os.environ),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    return proc.returncode == 0, proc.stderr.strip()
