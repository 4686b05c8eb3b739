"""The `image_pull` check: can every node pull container.image with the credentials it will use?

Asked of each node's engine (clusterctl.registry.pulling.check_node), in parallel. `up` runs it
as its first step (docker.pull_check); `clusterctl check` runs it with the other checks.
"""
from __future__ import annotations

from collections.abc import Sequence

from clusterctl.executor import Connections, for_each_host
from clusterctl.models import (
    CheckResult,
    CheckStatus,
    Host,
    HostResult,
    HostStatus,
    Inventory,
)


def image_pull_checks(inventory: Inventory, hosts: Sequence[Host], connections: Connections) -> list[CheckResult]:
    from clusterctl.registry.pulling import CHECK, check_node

    if not inventory.uses_container or not hosts:
        return []
    checks: dict[str, CheckResult] = {}

    def action(transport, host: Host) -> HostResult:
        checks[host.name] = check_node(inventory, transport, host)
        return HostResult(host.name, HostStatus.OK)

    results = for_each_host(list(hosts), action, connections)
    out = []
    for host in hosts:
        if host.name in checks:
            out.append(checks[host.name])
        else:  # the connection was lost meanwhile, or the check itself broke: say so, never pass
            out.append(CheckResult(host.name, CHECK, CheckStatus.FAIL, results[host.name].detail or "no answer",
                                   "rerun `clusterctl check`; if it persists, `docker pull` the image there by hand"))
    return out
