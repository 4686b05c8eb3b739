"""group_vars/ and host_vars/ beside an inventory, read as Ansible's host_group_vars plugin reads
them: for a group or host NAME, the first of `NAME` (a file, or a directory of files),
`NAME.yml`, `NAME.yaml`, `NAME.json`; a directory's files (sorted, recursively, hidden files
and backups skipped, extension .yml/.yaml/.json or none) each add to the variables, later files
winning. Every value keeps its file and line."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from clusterctl.errors import InventoryError
from clusterctl.inventory.ansible_tree import AnsibleTree, Var
from clusterctl.inventory.yamlsource import format_key_path, parse_yaml, read_text

EXTENSIONS = (".yml", ".yaml", ".json")


def read_vars_dirs(tree: AnsibleTree, base: Path) -> None:
    """Add `base`/group_vars and `base`/host_vars to `tree` for every group and host it has."""
    for group in tree.all_groups():
        found = _vars_for(base / "group_vars", group)
        if found:
            tree.dir_group_vars.setdefault(group, {}).update(found)
    for host in tree.hosts:
        found = _vars_for(base / "host_vars", host)
        if found:
            tree.dir_host_vars.setdefault(host, {}).update(found)


def vars_files(directory: Path, name: str) -> list[Path]:
    """The files Ansible would read for `name` under `directory`, in order."""
    for suffix in ("",) + EXTENSIONS:
        candidate = directory / f"{name}{suffix}"
        if candidate.is_dir():
            return _dir_files(candidate)
        if candidate.is_file():
            return [candidate]
    return []


def _dir_files(directory: Path) -> list[Path]:
    found: list[Path] = []
    for entry in sorted(os.listdir(directory)):
        if entry.startswith(".") or entry.endswith("~"):
            continue
        path, ext = directory / entry, os.path.splitext(entry)[1]
        if path.is_dir() and not ext:
            found += _dir_files(path)
        elif path.is_file() and (not ext or ext in EXTENSIONS):
            found.append(path)
    return found


def _vars_for(directory: Path, name: str) -> dict[str, Var]:
    variables: dict[str, Var] = {}
    for path in vars_files(directory, name):
        variables.update(read_vars_file(path))
    return variables


def read_vars_file(path: Path) -> dict[str, Var]:
    """A YAML (or JSON) file of top-level variables -> {name: Var with file and line}."""
    text = read_text(path, InventoryError, what="variables file")
    data, locator = parse_yaml(text, str(path), error_cls=InventoryError)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InventoryError(f"a variables file must be a mapping of name: value, got {type(data).__name__}",
                             where=locator.where(()), fix="write one `name: value` per line (YAML)")
    return {str(key): Var(value, locator.line((key,)) or 1, format_key_path((key,)), str(path))
            for key, value in data.items()}


def vars_base(source: Path) -> Optional[Path]:
    """Where group_vars/ and host_vars/ are looked for: beside a file, inside a directory."""
    return source if source.is_dir() else source.parent
