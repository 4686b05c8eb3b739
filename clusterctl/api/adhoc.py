"""An ad-hoc command on every host (`clusterctl exec`, `Cluster.exec`), like `ansible all -m shell`."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

from clusterctl.models import HostResult, Inventory


def exec_on_hosts(session, inventory: Inventory, argv: Sequence[str], timeout: Optional[float] = None,
                  stream: bool = False) -> dict[str, HostResult]:
    """{host: HostResult whose data has stdout, stderr, exit_code}; one word runs through sh -c."""
    from clusterctl.executor import for_each_host, run_commands
    from clusterctl.modules.shell import exec_command

    def action(transport, host):
        command = exec_command(list(argv), timeout=timeout or host.ssh.command_timeout)
        result = run_commands(transport, host, [command], session.renderer.on_event, stream=stream)
        return replace(result, data={"stdout": result.stdout, "stderr": result.stderr, "exit_code": result.exit_code})

    return for_each_host(list(inventory.hosts), action, session.connections)
