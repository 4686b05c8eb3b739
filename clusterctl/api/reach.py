"""How the session reaches a host: ssh_config's answer, as the SSH transport will open the connection."""
from __future__ import annotations

from clusterctl.errors import ClusterctlError


def reached_as(host) -> dict:
    """Where ssh_config sends the connection to `host`, as the transport will open it (`inventory show`)."""
    from clusterctl.transport.ssh_files import target_for, trust_for

    try:
        target = target_for(host)
    except ClusterctlError as exc:
        return {"error": str(exc)}
    trust = trust_for(host, target)
    return {"hostname": target.hostname, "port": target.port, "user": target.user,
            "identity_files": list(target.identity_files),
            "jump": [f"{hop.user}@{hop.hostname}:{hop.port}" for hop in target.hops],
            "proxy_command": target.proxy_command, "host_key_alias": target.host_key_alias,
            "known_hosts": list(trust.files), "host_key_policy": trust.policy, "source": target.source}
