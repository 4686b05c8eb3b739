"""Fabric Connections to the inventory's hosts, exactly as clusterctl reaches them (`Cluster.group()`).

Each host is connected by clusterctl's own SSHTransport (ssh_config read as ssh does, ProxyJump and
ProxyCommand, the keys in ssh's order, known_hosts judged strictly as ssh does: never Fabric's
AutoAddPolicy), and the authenticated paramiko client is handed to a `fabric.Connection` through its
documented `client` and `transport` attributes; `Connection.open()` then has nothing to do. Fabric is
imported here only, when a group is asked for: its import cost stays off every command."""
from __future__ import annotations

from typing import Iterable

from clusterctl.models import Host


def threading_group(hosts: Iterable[Host]):
    """A `fabric.ThreadingGroup` of `hosts`, connected now; raises UnreachableError/HostKeyError for
    the first host that cannot be reached (the ones already connected are closed). `close()` closes
    the jump hosts and proxy commands of each connection too."""
    import fabric

    from clusterctl.transport.ssh import SSHTransport

    class ClusterGroup(fabric.ThreadingGroup):
        """A ThreadingGroup that also closes clusterctl's transports under its connections."""

        transports: list = []

        def close(self) -> None:
            super().close()
            for transport in self.transports:
                transport.close()

    group = ClusterGroup()
    group.transports = []
    try:
        for host in hosts:
            transport = SSHTransport(host).open()
            group.transports.append(transport)
            group.append(_connection(fabric, transport))
    except BaseException:
        group.close()
        raise
    return group


def _connection(fabric, transport):
    target = transport.target
    connection = fabric.Connection(host=target.hostname, user=target.user, port=target.port)
    client = transport._client  # our own SSHTransport's (this package's), authenticated, its host key judged
    connection.client = client  # by known_hosts.py
    connection.transport = client.get_transport()
    return connection
