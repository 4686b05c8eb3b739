"""The only package that talks to hosts: SSH (paramiko), Docker's engine API, or local; the only
importer of paramiko, docker and Fabric.

A `Transport` runs a `Command` (an argv tuple) on one host and returns a `CommandResult`.
Quoting happens here and only here (`shlex.join`). Connection problems raise
`UnreachableError` / `HostKeyError`; the executor turns them into per-host results.

Where and how to connect is what the user's own OpenSSH would do (`ssh -G`, the inventory's
values on its command line), and host keys are judged as OpenSSH judges them (user and global
known_hosts, hashed, wildcard and negated names, @cert-authority, @revoked), never auto-added
under `strict`; `accept-new` records unknown keys and still refuses changed ones. Keys are offered
by a subclass of paramiko's `AuthStrategy` (`ssh_auth.key_strategy`), agent first, certificates too.

Docker over SSH: docker-py's API requests ride the host's existing SSH connection (`docker system
dial-stdio` channels), so host-key policy and `~/.ssh/config` apply once. `docker_engine.py` is what
the stages need of the Docker SDK besides the client: its API errors translated (`with
translated():` raises `EngineError`, `EngineNotFound` for a 404) and a container's typed arguments.
Where paramiko or docker-py is reached past its public API (paramiko's host key order, its channel
buffers, an agent socket of ssh_config's own; docker-py's channel pool over our connection), the
place says why no public API serves, and tests/unit/test_library_canaries.py fails loudly when a release
changes it. `fabric_group.py`: Fabric Connections for `Cluster.group()`.

To change SSH behaviour (config, keys, host keys): `ssh_files.py`, `ssh.py`; what a stage needs of
the Docker SDK (an error, a type): `docker_engine.py`."""
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
