"""The only package that talks to hosts: SSH (paramiko), Docker's engine API, or local.

A `Transport` runs a `Command` (an argv tuple) on one host and returns a `CommandResult`.
Quoting happens here and only here (`shlex.join`). Connection problems raise
`UnreachableError` / `HostKeyError`; the executor turns them into per-host results.

Host keys are verified against the inventory's known_hosts file, never auto-added:
`strict` refuses unknown and changed keys, `accept-new` records unknown keys (like
OpenSSH's StrictHostKeyChecking=accept-new) and still refuses changed ones.

- base.py: the `Transport` interface, argv folding, batches, line splitting
- ssh.py: `SSHTransport`, one persistent connection per host (commands, streams, Docker)
- ssh_files.py: ~/.ssh/config, known_hosts and host-key policies, private keys
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
