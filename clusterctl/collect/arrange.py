"""collect-logs: the fetched tree arranged as users read it, without holding any file in memory.

torchrun's tree (`<host>/outputs/logs/<run>/<host>/...`) -> `<host>/logs/<host>-agent.log` and
`<host>-r<global rank>.log` (the rank's stdout, then its stderr). A log that is one file on the
node (agent.log; a rank that wrote nothing to one of its streams) is a hard link to it: stored once,
whatever its size. A rank with both streams is copied through a 1 MiB buffer (rank logs of GiBs
were once read whole, twice: 1.4 GiB of logs cost 2.8 GiB of memory).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from clusterctl.node import layout


def arrange_logs(host_dir: Path, run_id: str, host: str, first_rank: int) -> None:
    raw = host_dir.parent / layout.bundle_run_dir(run_id, host)
    logs = host_dir / layout.BUNDLE_LOGS
    logs.mkdir(parents=True, exist_ok=True)
    if (raw / "agent.log").is_file():
        store(logs / f"{host}-agent.log", [raw / "agent.log"])
    for attempt in sorted(raw.glob(layout.launcher_dir_name(run_id, "*") + "/attempt_*")):
        # ASCII digits only: the names come from the node, and int() refuses '²', which isdigit() takes
        for local in sorted(p for p in attempt.iterdir() if p.is_dir() and p.name.isascii() and p.name.isdigit()):
            parts = [local / name for name in ("stdout.log", "stderr.log") if (local / name).is_file()]
            if parts:
                store(logs / f"{host}-r{first_rank + int(local.name)}.log", parts)


def store(target: Path, parts: list[Path]) -> None:
    """`target` = the parts one after the other, replaced whole or not at all."""
    parts = [p for p in parts if p.stat().st_size] or parts[:1]
    if len(parts) == 1 and target.exists() and os.path.samefile(parts[0], target):
        return  # already that file (rename() would do nothing and leave the temporary name behind)
    tmp = target.with_name(target.name + ".tmp")
    try:
        tmp.unlink(missing_ok=True)
        if len(parts) == 1 and _linked(parts[0], tmp):
            os.replace(tmp, target)
            return
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as source:
                    shutil.copyfileobj(source, out, 1 << 20)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _linked(source: Path, link: Path) -> bool:
    try:
        os.link(source, link)
    except OSError:  # a file system without hard links: copied instead
        return False
    return True


def move_shared_outputs(host_dir: Path, dest: Path) -> None:
    """The run's outputs (not its logs) from the node that fetched them to `dest/outputs`, once for all nodes."""
    source = host_dir / "outputs"
    target = dest / "outputs"
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if path.is_file() and rel.parts[:1] != ("logs",):
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            path.replace(target / rel)
