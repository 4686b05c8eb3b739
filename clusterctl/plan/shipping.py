"""Files a run ships to its nodes (nccl-test's benchmark, a prompt file): where they land on every
node (node/layout.py's `files_dir`) and the command that writes one there (`put_file_command`)."""
from __future__ import annotations

import re

from clusterctl.plan import node_files
from clusterctl.models import Command, Inventory

_FILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def put_file_command(inventory: Inventory, directory: str, name: str, data: bytes) -> Command:
    """Write `data` to directory/name where the ranks run (in the container when there is one)."""
    if not _FILE_NAME_RE.fullmatch(name):
        raise ValueError(f"not a plain file name: {name!r}")
    from clusterctl.node.layout import FILES

    # node/run_files.py `put`: an exclusive temp file renamed over the name (nodes sharing one filesystem
    # write the same file at once; a rank never reads half of one), the same bytes there already are
    # success. The run's .files as root (sudo, or in the container): nothing another user made runs on a
    # node (issue 47); a node's own run dir as the user who owns it.
    return node_files.command(inventory, directory, "put", name, stdin=data,
                              in_container_only=directory.rstrip("/").rsplit("/", 1)[-1] != FILES)
