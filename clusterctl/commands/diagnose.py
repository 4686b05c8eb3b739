"""`clusterctl diagnose PATH`: the root cause and fix from a log file or a collected run directory,
ranked (top 3, each with a confidence), and the nearest known public cases (`similar`)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional

from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="a log file (plain torchrun, DeepSpeed, docker, kubectl logs...) "
                                                "or a directory from collect-logs")


def execute(args, app) -> Outcome:
    from clusterctl.diagnose.engine import diagnose
    from clusterctl.diagnose.reader import check_readable

    check_readable(args.path)  # a missing or unreadable path: one line, exit 2
    result = diagnose(args.path, record=_run_record(args.path, app))
    findings = result.findings
    app.renderer.findings(findings, title=f"diagnosis of {args.path}", similar=result.similar)
    known = bool(findings) and findings[0].cause != "unknown"
    return Outcome({"ok": True, "path": str(args.path), "root_cause": findings[0].cause if findings else None,
                    "findings": [f.to_json() for f in findings], "identified": known,
                    "similar": [case.to_json() for case in result.similar]})


def _run_record(path: Path, app) -> Optional[dict]:
    """The run record of a collected directory: ./.clusterctl/runs/<run id>/run.json, the run id being
    the manifest's or the directory's name (collect-logs' default destination is ./logs/<run id>)."""
    if not path.is_dir():
        return None
    run_ids = [path.resolve().name]
    try:
        manifest = json.loads((path / "manifest.json").read_text())
        if isinstance(manifest, dict) and isinstance(manifest.get("run_id"), str):
            run_ids.insert(0, manifest["run_id"])
    except (OSError, ValueError):
        pass
    from clusterctl.ground.records import RunStore

    for run_id in run_ids:
        try:
            return RunStore(app.state).read(run_id).to_json()
        except (OSError, ValueError):
            continue
    return None
