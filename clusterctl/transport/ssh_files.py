"""One host's SSH settings put together, and its host key judged.

The inventory's values win over ssh_config's: user, port, identity_file, proxy_jump, config_file
and options (ProxyCommand, ...) go to ssh itself (`ssh -G -l -p -i -J -F -o`, openssh_config.py);
known_hosts, host_key_policy and connect_timeout replace UserKnownHostsFile,
StrictHostKeyChecking and ConnectTimeout where the inventory sets them. ssh_config's
StrictHostKeyChecking applies otherwise: yes and ask (no one to ask) are `strict`;
accept-new is `accept-new`; `no` is `accept-new` too (an unknown key is recorded; a changed or
revoked key is refused, where ssh would connect anyway).

The host key is judged as OpenSSH would (known_hosts.py), against the user files and
GlobalKnownHostsFile (/etc/ssh/ssh_known_hosts), for the node and every jump host alike.
"""
from __future__ import annotations

import base64
import hashlib
import os
import threading
from dataclasses import dataclass
from typing import Optional

from clusterctl.errors import HostKeyError
from clusterctl.models import Host
from clusterctl.transport import known_hosts
from clusterctl.transport.host_certs import CERT_SUFFIX, CertificateError, parse_certificate
from clusterctl.transport.openssh_config import Query, SSHTarget, resolve

_write_lock = threading.Lock()


def query_for(host: Host) -> Query:
    ssh = host.ssh
    config = os.path.expanduser(ssh.config_file) if ssh.config_file else os.environ.get("CLUSTERCTL_SSH_CONFIG") or None
    return Query(host.address, ssh.user, ssh.port, os.path.expanduser(ssh.identity_file) if ssh.identity_file else None,
                 ssh.proxy_jump, config, tuple(ssh.options))


def target_for(host: Host) -> SSHTarget:
    """Where and how to reach `host` (and its jump hosts), as the user's ssh would."""
    return resolve(query_for(host))


@dataclass(frozen=True)
class Trust:
    """How host keys are judged for one host: the policy and the files."""

    policy: str  # strict | accept-new
    user_files: tuple[str, ...]
    global_files: tuple[str, ...]
    hash_names: bool

    @property
    def files(self) -> tuple[str, ...]:
        return self.user_files + self.global_files


def trust_for(host: Host, target: SSHTarget) -> Trust:
    ssh = host.ssh
    if "known_hosts" in ssh.explicit or not target.user_known_hosts:
        user_files = (os.path.expanduser(ssh.known_hosts),)
    else:
        user_files = target.user_known_hosts
    if "host_key_policy" in ssh.explicit:
        policy = ssh.host_key_policy
    else:
        policy = "accept-new" if target.strict_host_key_checking in ("accept-new", "no") else "strict"
    # HashKnownHosts applies to ssh's own files; a known_hosts the inventory names gets plain lines, as before
    hashed = target.hash_known_hosts and "known_hosts" not in ssh.explicit
    return Trust(policy, user_files, target.global_known_hosts, hashed)


def connect_timeout(host: Host, target: SSHTarget) -> float:
    if "connect_timeout" in host.ssh.explicit or target.connect_timeout is None:
        return host.ssh.connect_timeout
    return target.connect_timeout


def fingerprint(blob: bytes) -> str:
    """SHA256:... as ssh prints it."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def server_key(key) -> known_hosts.ServerKey:
    """paramiko's view of the server's host key -> its plain key and certificate."""
    blob = getattr(key, "public_blob", None)
    if blob is not None and blob.key_type.endswith(CERT_SUFFIX):
        try:
            cert = parse_certificate(blob.key_blob)
            return known_hosts.ServerKey(known_hosts._blob_type(cert.plain_key), cert.plain_key, cert)
        except CertificateError:
            pass
    plain = key.asbytes()
    return known_hosts.ServerKey(known_hosts._blob_type(plain) or key.get_name(), plain)


class HostKeyCheck:
    """A paramiko missing-host-key policy that judges every key (the client is given no known
    keys, so paramiko asks this for each connection)."""

    def __init__(self, host_name: str, target: SSHTarget, trust: Trust):
        self.host_name, self.target, self.trust = host_name, target, trust

    def missing_host_key(self, client, hostname, key) -> None:
        target, trust = self.target, self.trust
        if target.revoked_host_keys:
            raise HostKeyError(f"ssh_config sets RevokedHostKeys {target.revoked_host_keys} for {target.name}, "
                               "a key revocation list clusterctl cannot read: refusing to connect",
                               where=self.host_name, fix="list revoked keys as @revoked lines in known_hosts instead")
        server = server_key(key)
        verdict = known_hosts.judge(server, target.hostname, target.port, target.host_key_alias, trust.files)
        if verdict.status == "ok":
            return
        name = target.known_hosts_name
        shown = f"{server.key_type} {fingerprint(server.plain)}"
        if verdict.status == "revoked":
            raise HostKeyError(
                f"host key for {name} ({shown}) is REVOKED ({verdict.line.where}): refusing to connect",
                where=self.host_name, fix="treat this as a possible attack; if the host was re-keyed, get its new "
                "key from its administrator")
        if verdict.status == "changed":
            raise HostKeyError(
                f"host key for {name} CHANGED (got {shown}, {verdict.line.where} lists a different key): "
                "refusing to connect", where=self.host_name,
                fix=f"if the host was really reinstalled: ssh-keygen -f {verdict.line.path} -R '{name}'; "
                "otherwise treat this as a possible man-in-the-middle")
        if trust.policy == "accept-new" and trust.user_files:
            self._record(name, server)
            return
        note = f" ({verdict.note})" if verdict.note else ""
        if target.known_hosts_command:
            note += f" (KnownHostsCommand {target.known_hosts_command} is not run by clusterctl)"
        port = f"-p {target.port} " if target.port != 22 else ""
        raise HostKeyError(
            f"unknown host key for {name} ({shown}) and host_key_policy is strict{note}; looked in "
            f"{', '.join(trust.files)}", where=self.host_name,
            fix=f"check the key, then add it: ssh-keyscan {port}{target.hostname} >> {trust.user_files[0] if trust.user_files else '~/.ssh/known_hosts'} "
            "(or set ssh.host_key_policy: accept-new for the first connection)")

    def _record(self, name: str, server: known_hosts.ServerKey) -> None:
        path = self.trust.user_files[0]
        line = known_hosts.known_hosts_line(name, server.key_type, server.plain, self.trust.hash_names)
        with _write_lock:
            os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a") as handle:
                handle.write(line)


def host_key_order(target: SSHTarget, trust: Trust, offered: tuple[str, ...]) -> tuple[str, ...]:
    return known_hosts.preferred_algorithms(offered, target.known_hosts_name, trust.files)


def describe(target: Optional[SSHTarget]) -> str:
    """user@host:port via hops, for messages."""
    if target is None:
        return "?"
    via = f" via {' -> '.join(hop.hostname for hop in target.hops)}" if target.jump else ""
    proxy = f" via ProxyCommand `{target.proxy_command}`" if target.proxy_command else ""
    return f"{target.user}@{target.hostname}:{target.port}{via}{proxy}"
