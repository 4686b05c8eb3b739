"""How the session reaches a host (`inventory show`): each value, the file:line that set it, and ssh_config's
answer, as the SSH transport will open the connection."""
from __future__ import annotations

from typing import Any

from clusterctl.errors import ClusterctlError

SHOWN = ("address", "port", "user", "identity_file", "proxy_jump", "ssh_options", "ssh_config", "connection",
         "groups", "become", "become_user", "become_method")


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


def host_entry(index: int, host, locator) -> dict:
    """`inventory show`'s entry of a host: its values, the file:line that set each, and where ssh goes."""
    values: dict[str, Any] = {
        "address": host.address, "port": host.ssh.port, "user": host.ssh.user,
        "identity_file": host.ssh.identity_file, "proxy_jump": host.ssh.proxy_jump,
        "ssh_options": dict(host.ssh.options), "ssh_config": host.ssh.config_file, "connection": host.connection,
        "groups": list(host.groups), "become": host.become, "become_user": host.become_user,
        "become_method": host.become_method,
    }
    origins = {key: _origin(locator, index, key) for key in SHOWN}
    entry = {"name": host.name, **values, "from": {k: v for k, v in origins.items() if v}}
    if not host.is_local:
        entry["ssh"] = reached_as(host)
    return entry


def _origin(locator, index: int, key: str) -> str:
    """file:line of the key for this host, or of the inventory's ssh: section; "" for a default."""
    ssh_key = {"ssh_config": "config_file", "ssh_options": "options"}.get(key, key)
    for path in (("hosts", index, key), ("ssh", ssh_key)):
        if hasattr(locator, "recorded"):  # an Ansible inventory: the variables' own files and lines
            if locator.recorded(path):
                return locator.where(path)
            continue
        position = locator.position(path)
        if position is not None and position != locator.position(path[:-1]):
            return locator.where(path)
    return ""
