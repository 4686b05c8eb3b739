"""Where an inventory comes from, as a value: a file, an Ansible inventory directory, or a source read by
ansible-inventory (`-i ansible:SOURCE`). Parsed once where the user wrote it (the CLI's -i, `Cluster.load`,
the active cluster `up` remembered) and stored as itself in the records, never as a rewritten path."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Union

from clusterctl.documents import parts
from clusterctl.documents.convert import as_document

ANSIBLE_PREFIX = "ansible:"  # the same spelling as inventory/ansible_source.py reads

SourceKind = Literal["file", "directory", "ansible"]


@dataclass(frozen=True)
class InventorySource:
    """kind: file | directory | ansible; location: an absolute path (ansible: the source given to
    ansible-inventory, absolute where it names a path here)."""

    kind: SourceKind
    location: str

    @classmethod
    def parse(cls, given: Union[str, os.PathLike], cwd: Union[str, os.PathLike, None] = None) -> "InventorySource":
        """What the user wrote (relative to `cwd`, default the working directory) -> a source."""
        text = os.path.expanduser(str(given))
        base = Path(cwd) if cwd is not None else Path.cwd()
        if text.startswith(ANSIBLE_PREFIX):
            rest = os.path.expanduser(text[len(ANSIBLE_PREFIX):])
            return cls("ansible", str(base / rest) if rest and not os.path.isabs(rest) else rest)
        legacy = "/" + ANSIBLE_PREFIX  # records written before this type: `up` stored CWD/ansible:SOURCE
        if legacy in text and not os.path.exists(text):
            before, _, rest = text.partition(legacy)
            return cls("ansible", rest if rest.startswith("/") else os.path.join(before, rest))
        path = (base / text).resolve()
        return cls("directory" if path.is_dir() else "file", str(path))

    @classmethod
    def from_json(cls, data: dict) -> "InventorySource":
        kind = data.get("kind")
        if kind not in ("file", "directory", "ansible") or not isinstance(data.get("location"), str):
            raise ValueError(f"not an inventory source: {data!r}")
        return cls(kind, data["location"])

    def to_json(self) -> dict:
        return as_document(parts.InventorySourceEntry, self)

    def loader_argument(self) -> str:
        """What inventory/load.py's load_inventory reads for this source."""
        return ANSIBLE_PREFIX + self.location if self.kind == "ansible" else self.location

    def __str__(self) -> str:
        return self.loader_argument()
