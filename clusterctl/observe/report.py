"""`clusterctl report`: the run report written (observe/report_data.py reads, report_html.py draws)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from clusterctl.errors import UsageError
from clusterctl.ground.masking import OUTBOUND


def write_report(state, given: Optional[str], output: Optional[Path]) -> dict:
    """The report of run `given` (an id, a collected directory, or the last run) written; what was written."""
    from clusterctl.observe.report_data import load
    from clusterctl.observe.report_html import render

    data = load(state, given, output)
    _learn_secrets(data.record.get("inventory"))
    try:
        data.output.parent.mkdir(parents=True, exist_ok=True)
        data.output.write_text(OUTBOUND(render(data)), encoding="utf-8")  # masked as the final text
    except OSError as error:
        raise UsageError(f"cannot write {data.output}: {error.strerror or error}", where="-o",
                         fix="choose a writable file") from None
    return {"ok": True, "run_id": data.run_id, "report": str(data.output),
            "bundle": str(data.bundle) if data.bundle else None,
            "metrics_of": [m.host for m in data.metrics if m.samples],
            "logs_linked": sum(1 for link in data.logs if link.href)}


def _learn_secrets(inventory: Optional[str]) -> None:
    """The run's inventory, where it can still be read, for its secrets: masked in the report's final text
    (a record or a bundle written before they were masked there still has them)."""
    from clusterctl.errors import ClusterctlError
    from clusterctl.inventory.load import load_inventory

    if isinstance(inventory, str) and inventory and not inventory.startswith("ansible:"):
        try:
            load_inventory(inventory)
        except (ClusterctlError, OSError, ValueError):
            pass
