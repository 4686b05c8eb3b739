"""Foreign inventory formats -> clusterctl inventory data: which format a file is, and what
the readers share. The readers: ansible.py (INI and YAML), hostfile.py (MPI/DeepSpeed).

Ansible INI, Ansible YAML and MPI/DeepSpeed hostfiles are translated into the same plain
data a clusterctl YAML inventory holds (`{"hosts": [{"name", "address", "port", ...}]}`),
plus a `Locator` that points every translated key back at the line that set it. The
clusterctl validator then checks the result, so an error in `hosts.ini` names
`hosts.ini:7 [gpu:vars] ansible_port`, not a key path the user never wrote.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import NoReturn, Optional

from clusterctl.errors import InventoryError

SECTION = re.compile(r"^\[([^\[\]]*)\]\s*$")
HOSTFILE_LINE = re.compile(r"^[^\s:#=\[\]]+(:\d+)?(\s+[\w-]+=\S*)*$")


def fail(where: str, what: str, fix: str) -> NoReturn:
    raise InventoryError(what, where=where, fix=fix)





def sniff_format(text: str, path: Optional[Path] = None) -> str:
    """"yaml", "ini" or "hostfile": by extension first, then by the shape of the lines."""
    suffix = path.suffix.lower() if path else ""
    if suffix in (".yaml", ".yml", ".json"):
        return "yaml"
    if suffix in (".ini", ".cfg"):
        return "ini"
    lines = [strip_comment(raw) for raw in text.splitlines()]
    lines = [ln for ln in lines if ln.strip()]
    if not lines:
        return "yaml"
    if any(SECTION.match(ln) and not ln.startswith((" ", "\t")) and "," not in ln for ln in lines):
        return "ini"
    if any(re.search(r"(^|\s)ansible_\w+=", ln) for ln in lines) and not any(": " in ln or ln.endswith(":")
                                                                         for ln in lines):
        return "ini"
    if all(HOSTFILE_LINE.match(ln.strip()) for ln in lines):
        return "hostfile"
    return "yaml"


def strip_comment(line: str) -> str:
    stripped = line.strip()
    if stripped.startswith(("#", ";")):
        return ""
    return line.split(" #", 1)[0].rstrip()
