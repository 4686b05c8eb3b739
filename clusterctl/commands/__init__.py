"""One module per CLI command: `add_arguments(parser)` and `execute(args, app) -> Outcome`."""
from __future__ import annotations

from typing import Mapping

from clusterctl.models import HostResult, HostStatus


def hosts_document(results: Mapping[str, HostResult], **extra) -> dict:
    """The CONTRACT.md shape shared by up/exec/down/status: {"ok", "hosts": {name: {...}}}."""
    hosts = {}
    for name, result in results.items():
        entry = {"status": result.status.value, "detail": result.detail, "duration_s": round(result.duration, 3)}
        entry.update({k: v for k, v in result.data.items() if _jsonable(v)})
        if result.log_path:
            entry["log"] = result.log_path
        hosts[name] = entry
    ok = all(r.succeeded for r in results.values())
    return {"ok": ok, "hosts": hosts, **extra}


def any_unreachable(results: Mapping[str, HostResult]) -> bool:
    return any(r.status is HostStatus.UNREACHABLE for r in results.values())


def run_inventory(app, given, run_id: str, record: dict, hosts: list):
    """The inventory of a recorded run (-i, else the one the run was started with), which must have every
    host in `hosts` (those the run ran on): else one clear error naming them."""
    from clusterctl.errors import UsageError

    inventory = nodes_of_run(app, app.inventory(given or record.get("inventory")), record, run_id)
    names = {h.name for h in inventory.hosts}
    missing = [name for name in hosts if name not in names]
    if missing or not hosts:
        raise UsageError(f"run {run_id} ran on {', '.join(map(str, missing)) or 'no recorded node'}, which the "
                         "inventory does not have", where=str(app.inventory_path(given or record.get("inventory"))),
                         fix="give the run's inventory with -i")
    return inventory


def _jsonable(value) -> bool:
    return isinstance(value, (str, int, float, bool, list, dict, type(None)))


def nodes_of_run(app, inventory, record: dict, run_id: str):
    """The inventory to reach a recorded run's nodes with: as it is, or, for a run made on a Slurm
    allocation by an inventory that lists no hosts, the run's nodes reached through Slurm for the
    rest of the command (slurm/run.py: nodes_of_recorded_run)."""
    if inventory.scheduler is None or inventory.hosts:
        return inventory
    from clusterctl.slurm.run import nodes_of_recorded_run

    return nodes_of_recorded_run(inventory, record, app, run_id)
