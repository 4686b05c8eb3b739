"""Directories only their owner reads: run records, step logs and saved stacks hold command lines and
outputs (secrets masked, but still nobody else's business)."""
from __future__ import annotations

from pathlib import Path


def private_dir(path: Path) -> Path:
    """mkdir -p where every directory created gets mode 0700 (Path.mkdir gives the parents it
    creates the default mode, so a fresh .clusterctl/ would be world-readable)."""
    missing, parent = [], path
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:  # another process made it meanwhile
            pass
    return path
