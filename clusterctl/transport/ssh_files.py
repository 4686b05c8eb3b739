"""What the user's SSH files say: ~/.ssh/config (HostName, User, Port, IdentityFile, ProxyJump,
ProxyCommand), known_hosts with the host-key policies (`strict`, `accept-new`), and private
keys. Each file is read once per process (again when it changes).
"""
from __future__ import annotations

import getpass
import os
import threading
from pathlib import Path
from typing import Any, Optional

from clusterctl.errors import HostKeyError
from clusterctl.transport.paramiko_setup import _paramiko

_known_hosts_lock = threading.Lock()


class _AcceptNewPolicy:
    """Record an unknown host key in known_hosts; paramiko itself refuses changed keys."""

    def __init__(self, path: Path):
        self.path = path

    def missing_host_key(self, client, hostname, key) -> None:
        with _known_hosts_lock:
            client.get_host_keys().add(hostname, key.get_name(), key)
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(self.path, "a") as handle:
                os.chmod(self.path, 0o600)
                handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class _RejectPolicy:
    def __init__(self, path: Path):
        self.path = path

    def missing_host_key(self, client, hostname, key) -> None:
        raise HostKeyError(
            f"unknown host key for {hostname} ({key.get_name()}) and host_key_policy is strict",
            fix=f"add the key to {self.path} (ssh-keyscan -p PORT HOST >> {self.path}) "
            "or set ssh.host_key_policy: accept-new for the first connection",
        )


_ssh_configs: dict = {}
_config_lock = threading.Lock()


_known_hosts_files: dict = {}


class _Target:
    """Where one SSH hop goes, after ~/.ssh/config: address, port, user, keys, and how to get there."""

    def __init__(self, hostname: str, port: int, user: str, identity_files: list, jumps: list, proxy_command):
        self.hostname, self.port, self.user = hostname, port, user
        self.identity_files, self.jumps, self.proxy_command = identity_files, jumps, proxy_command

    @property
    def known_hosts_name(self) -> str:
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def _ssh_config():
    """~/.ssh/config then /etc/ssh/ssh_config (or only $CLUSTERCTL_SSH_CONFIG), parsed once per process."""
    path = os.environ.get("CLUSTERCTL_SSH_CONFIG") or None
    paramiko = _paramiko()
    with _config_lock:
        if path not in _ssh_configs:
            config = paramiko.SSHConfig()
            for name in [path] if path else [os.path.expanduser("~/.ssh/config"), "/etc/ssh/ssh_config"]:
                if os.path.isfile(name):
                    with open(name) as handle:
                        config.parse(handle)
            _ssh_configs[path] = config
        return _ssh_configs[path]


_resolved: dict = {}


def _resolve(address: str, user: Optional[str], port: Optional[int], proxy_jump: Optional[str], depth: int = 0) -> _Target:
    """The hop after ~/.ssh/config, looked up once per process and config (a lookup expands every
    matching block's tokens: ~8 % of the client's CPU per new connection)."""
    key = (os.environ.get("CLUSTERCTL_SSH_CONFIG"), address, user, port, proxy_jump, depth)
    target = _resolved.get(key)
    if target is None:
        target = _resolved[key] = _lookup(address, user, port, proxy_jump, depth)
    return target


def _lookup(address: str, user: Optional[str], port: Optional[int], proxy_jump: Optional[str], depth: int) -> _Target:
    config = _ssh_config().lookup(address)
    hostname = config.get("hostname", address)
    user = user or config.get("user") or getpass.getuser()
    port = int(port or config.get("port", 22))
    files = [os.path.expanduser(f) for f in config.get("identityfile", [])]
    spec = proxy_jump or config.get("proxyjump")
    jumps, command = [], None
    if spec and spec.lower() != "none" and depth < 4:
        for index, hop in enumerate(h.strip() for h in spec.split(",")):
            hop_user, hop_host, hop_port = _split_hop(hop)
            if hop_host in (address, hostname):
                break  # a wildcard Host block naming its own jump host
            resolved = _resolve(hop_host, hop_user, hop_port, None, depth + 1)
            jumps += (resolved.jumps if index == 0 else []) + [resolved]
    elif config.get("proxycommand", "none").lower() != "none":
        command = config["proxycommand"]
    return _Target(hostname, port, user, files, jumps, command)


def _split_hop(hop: str) -> tuple:
    """ProxyJump's [user@]host[:port], with [v6]:port."""
    user, _, rest = hop.rpartition("@")
    port = None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else None
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    else:
        host = rest
    return user or None, host, int(port) if port else None


def _known_keys(path: Path, name: str) -> list:
    """The keys known_hosts lists for `name`. The file is parsed once per process (again when it
    changes), not once per host as SSHClient.load_host_keys does: that costs O(lines²) per host."""
    try:
        stat = path.stat()
    except OSError:
        return []
    stamp = (stat.st_mtime_ns, stat.st_size)
    _paramiko()
    with _known_hosts_lock:
        cached = _known_hosts_files.get(path)
        if cached is None or cached[0] != stamp:
            cached = _known_hosts_files[path] = (stamp, _parse_known_hosts(path))
    keys, types = [], set()
    for hostnames, key in cached[1]:
        if key.get_name() not in types and any(_host_matches(name, h) for h in hostnames):
            keys.append(key)
            types.add(key.get_name())  # the first line of a key type wins, as with HostKeys.lookup
    return keys


def _parse_known_hosts(path: Path) -> list:
    entry_type = _paramiko().hostkeys.HostKeyEntry
    entries = []
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                entry = entry_type.from_line(line, number)
            except Exception:  # unknown key types, @cert-authority lines: skipped, like paramiko does
                continue
            if entry is not None and entry.key is not None:
                entries.append((tuple(entry.hostnames), entry.key))
    return entries


def _host_matches(name: str, pattern: str) -> bool:
    if pattern == name:
        return True
    if pattern.startswith("|1|"):
        import hmac

        return hmac.compare_digest(_paramiko().HostKeys.hash_host(name, pattern), pattern)
    return False


_loaded_keys: dict = {}


_keys_lock = threading.Lock()


def _first_loadable_key(paths: list) -> tuple[Optional[str], Any]:
    """(path, key) of the first of `paths` that loads without a passphrase, read once per process
    (again when the file changes): given a file name, paramiko reads and parses it on every
    connection, trying RSA, ECDSA and Ed25519 in turn (~15 % of the client's CPU per new
    connection). Files with a certificate beside them are left to paramiko, which loads both."""
    paramiko = _paramiko()
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            continue
        if os.path.exists(f"{path}-cert.pub"):
            continue
        stamp = (path, stat.st_mtime_ns, stat.st_size)
        with _keys_lock:
            if stamp not in _loaded_keys:
                try:
                    _loaded_keys[stamp] = paramiko.PKey.from_path(path)
                except Exception:  # encrypted, or a type paramiko reads another way: its own way
                    _loaded_keys[stamp] = None
            key = _loaded_keys[stamp]
        if key is not None:
            return path, key
    return None, None
