"""Where a node-side command runs: in the job's container (`docker exec`) or on the host.

Also maps container paths to host paths through bind mounts, so that reading a log or
touching a lease on a bind-mounted outputs dir needs no `docker exec` at all.
"""
from __future__ import annotations

import posixpath
from typing import Optional

from clusterctl.models import Inventory


def in_container(inventory: Inventory, argv: tuple[str, ...], *, detach: bool = False,
                 interactive: bool = False, workdir: Optional[str] = None) -> tuple[str, ...]:
    """argv run inside the container when the inventory has one, else unchanged (on the host)."""
    if not inventory.uses_container:
        return tuple(argv)
    flags = (("-d",) if detach else ()) + (("-i",) if interactive else ()) + (("-w", workdir) if workdir else ())
    return ("docker", "exec", *flags, inventory.container.name, *argv)


def host_path(inventory: Inventory, container_path: str) -> Optional[str]:
    """The host path behind a container path when it sits on a bind mount, else None."""
    if not inventory.uses_container:
        return container_path
    best: Optional[tuple[str, str]] = None
    for volume in inventory.container.volumes:
        parts = volume.split(":")
        if len(parts) < 2 or not parts[0].startswith("/"):
            continue
        src, dst = parts[0], parts[1].rstrip("/") or "/"
        if container_path == dst or container_path.startswith(dst + "/"):
            if best is None or len(dst) > len(best[1]):
                best = (src, dst)
    if best is None:
        return None
    return posixpath.normpath(posixpath.join(best[0], posixpath.relpath(container_path, best[1])))


def on_host_or_in_container(inventory: Inventory, container_path: str, argv_for) -> tuple[str, ...]:
    """argv_for(path) run on the host through the bind mount when possible, else in the container."""
    on_host = host_path(inventory, container_path)
    if on_host is not None:
        return tuple(argv_for(on_host))
    return in_container(inventory, tuple(argv_for(container_path)))
