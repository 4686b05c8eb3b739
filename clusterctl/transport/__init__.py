"""The only package that talks to hosts: SSH (paramiko), Docker's engine API, or local.

A `Transport` runs a `Command` (an argv tuple) on one host and returns a `CommandResult`.
Quoting happens here and only here (`shlex.join`). Connection problems raise
`UnreachableError` / `HostKeyError`; the executor turns them into per-host results.

Where and how to connect is what the user's own OpenSSH would do (`ssh -G`, the inventory's
values on its command line), and host keys are judged as OpenSSH judges them (user and global
known_hosts, hashed, wildcard and negated names, @cert-authority, @revoked), never auto-added
under `strict`; `accept-new` records unknown keys and still refuses changed ones.

- base.py: the `Transport` interface, argv folding, batches, line splitting
- ssh.py: `SSHTransport`, one persistent connection per host (commands, streams, Docker)
- ssh_files.py: one host's settings put together (inventory over ssh_config), the host-key check
- openssh_config.py: `ssh -G` (or ssh_config_file.py without ssh), cached (ssh_g_cache.py)
- known_hosts.py, host_certs.py: known_hosts files and host certificates, as ssh judges them
- ssh_keys.py, ssh_auth.py: which keys to offer (agent first), and why none worked
- proxy_command.py: ProxyCommand as a socket
- paramiko_setup.py: paramiko imported once and tuned; the TCP socket
- local.py: `LocalTransport` (`connection: local`)
"""
from __future__ import annotations

from clusterctl.models import Host
from clusterctl.transport.base import (BATCH_MARK, DOCKER_API_VERSION, OnLine, TcpForwardingDisabled, Transport,
                                       batch_command, remote_argv, split_batch)
from clusterctl.transport.local import LocalTransport
from clusterctl.transport.ssh import SSHTransport

__all__ = ["BATCH_MARK", "DOCKER_API_VERSION", "LocalTransport", "OnLine", "SSHTransport", "TcpForwardingDisabled",
           "Transport", "batch_command", "connect", "remote_argv", "split_batch"]


def connect(host: Host) -> Transport:
    """Open a transport to `host`. Raises UnreachableError or HostKeyError."""
    transport = LocalTransport(host) if host.is_local else SSHTransport(host)
    return transport.open()
