"""Is a run of this cluster already going? The look for its ranks on every node, and its answer
(a message naming the node and the run, or None): `run` refuses to start a second one."""
from __future__ import annotations

import re
from typing import Mapping, Optional

from clusterctl.executor import Connections, for_each_host, run_commands
from clusterctl.models import Command, Host, HostResult, Inventory
from clusterctl.modules import process

def ensure_no_run_in_progress(inventory: Inventory, connections: Connections) -> Optional[str]:
    """A message naming a node where this cluster's ranks already run, else None."""

    def action(transport, host: Host) -> HostResult:
        return run_commands(transport, host, [run_scan_command(inventory, host)])

    return run_in_progress({name: r.stdout for name, r in for_each_host(list(inventory.hosts), action,
                                                                         connections).items()})


def run_scan_command(inventory: Inventory, host: Host) -> Command:
    """The look for this cluster's ranks on `host` (read by `run_in_progress`)."""
    return process.scan_command(inventory.name, host.name, inventory.rendezvous.port, "list")


def run_in_progress(scans: Mapping[str, str]) -> Optional[str]:
    """From each node's output of run_scan_command: a message naming the first node where this
    cluster's ranks already run, else None."""
    for name, stdout in scans.items():
        ours = process.parse_scan(stdout)["ours"]
        if ours:
            run_ids = [m.group(1) for p in ours for m in [_RDZV_ID_RE.search(p["command"])] if m]
            which = f"run {run_ids[0]} " if run_ids else ""
            return (f"{which}({len(ours)} process(es) of this cluster already run on {name}, pid {ours[0]['pid']}: "
                    f"{ours[0]['command'][:80]})")
    return None


_RDZV_ID_RE = re.compile(r"--rdzv-id=([A-Za-z0-9._-]+)")
