"""`clusterctl diagnose PATH`: the root cause and fix from a log file or a collected run directory."""
from __future__ import annotations

import argparse
from pathlib import Path

from clusterctl.cli import Outcome
from clusterctl.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="a log file (plain torchrun, DeepSpeed, docker, kubectl logs...) "
                                                "or a directory from collect-logs")


def execute(args, app) -> Outcome:
    from clusterctl.diagnose import diagnose_path

    if not args.path.exists():
        raise UsageError(f"no such file or directory: {args.path}", where=str(args.path),
                         fix="give a log file or a directory written by `clusterctl collect-logs`")
    findings = diagnose_path(args.path)
    app.renderer.findings(findings, title=f"diagnosis of {args.path}")
    known = bool(findings) and findings[0].cause != "unknown"
    return Outcome({"ok": True, "path": str(args.path), "root_cause": findings[0].cause if findings else "unknown",
                    "findings": [f.to_json() for f in findings], "identified": known})
