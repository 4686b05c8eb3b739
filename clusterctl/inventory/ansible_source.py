"""Ansible inventory sources as Ansible takes them: a file with the group_vars/ and host_vars/
beside it, a directory of inventory files (Ansible's InventoryManager: sorted, recursive,
hidden files, group_vars/, host_vars/ and ignored extensions skipped) with its own
group_vars/ and host_vars/, or, with `ansible:` before the path, whatever `ansible-inventory
--list` itself makes of it (scripts, plugins, vaults, Jinja: needs ansible-core)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from clusterctl.errors import InventoryError
from clusterctl.inventory.ansible import looks_like_ansible_yaml, read_ini, read_yaml
from clusterctl.inventory.ansible_tree import AnsibleTree, FileLocator, Var
from clusterctl.inventory.ansible_vars import read_vars_dirs
from clusterctl.inventory.ansible_vars_map import tree_data
from clusterctl.inventory.formats import sniff_format
from clusterctl.inventory.hostfile import parse_hostfile
from clusterctl.inventory.yamlsource import parse_yaml, read_text

ANSIBLE_PREFIX = "ansible:"
# Ansible's INVENTORY_IGNORE_EXTS (REJECT_EXTS + .orig .cfg .retry) and its always-ignored names
_IGNORED = re.compile(r"^\.|^host_vars$|^group_vars$|^vars_plugins$|"
                      r"(\.pyc|\.pyo|\.swp|\.bak|~|\.rpm|\.md|\.txt|\.rst|\.orig|\.cfg|\.retry)$")
_YAML_EXTENSIONS = ("", ".yml", ".yaml", ".json")


def read_inventory_text(text: str, source_name: str, fmt: str, vars_base: Path | None) -> tuple:
    """Inventory text -> (clusterctl data, Locator): Ansible files with the group_vars/host_vars of
    `vars_base` (the file's directory; None for text that is no file), hostfiles, clusterctl YAML."""
    if fmt == "ini":
        return read_ansible_text(text, source_name, "ini", vars_base=vars_base)
    if fmt == "hostfile":
        return parse_hostfile(text, source_name)
    data, locator = parse_yaml(text, source_name, error_cls=InventoryError)
    if looks_like_ansible_yaml(data):
        return read_ansible_text(text, source_name, "yaml", data, locator, vars_base=vars_base)
    return data, locator


def read_ansible_text(text: str, source_name: str, fmt: str, data=None, locator=None,
                      vars_base: Path | None = None) -> tuple[dict, FileLocator]:
    """One Ansible file (INI text, or parsed YAML) plus the group_vars/host_vars of `vars_base`."""
    tree = AnsibleTree(source_name)
    if fmt == "ini":
        read_ini(tree, text, source_name)
    else:
        read_yaml(tree, data, locator)
    if vars_base is not None:
        read_vars_dirs(tree, vars_base)
    return tree_data(tree)


def read_ansible_dir(directory: Path) -> tuple[dict, FileLocator]:
    tree = AnsibleTree(str(directory))
    read_any = False
    for path in _inventory_files(directory):
        read_any = _read_file(tree, path) or read_any
    if not read_any:
        raise InventoryError(f"the directory {directory} holds no Ansible inventory file", where=str(directory),
                             fix="put an INI or YAML inventory in it (hosts.ini, hosts.yml), or name the file itself")
    read_vars_dirs(tree, directory)
    return tree_data(tree)


def _inventory_files(directory: Path) -> list[Path]:
    found: list[Path] = []
    for entry in sorted(os.listdir(directory)):
        if _IGNORED.search(entry):
            continue
        path = directory / entry
        found += _inventory_files(path) if path.is_dir() else [path]
    return found


def _read_file(tree: AnsibleTree, path: Path) -> bool:
    if os.access(path, os.X_OK):
        raise InventoryError(f"{path} is executable: a dynamic inventory script, which only Ansible can run",
                             where=str(path), fix=f"read the inventory through ansible-core: -i {ANSIBLE_PREFIX}"
                             f"{path.parent} (pip install ansible-core), or chmod -x it if it is a plain file")
    text = read_text(path, InventoryError, what="inventory")
    if not text.strip():
        return False
    fmt = sniff_format(text, path)
    if path.suffix.lower() in _YAML_EXTENSIONS and fmt != "ini":
        data, locator = parse_yaml(text, str(path), error_cls=InventoryError)
        if not looks_like_ansible_yaml(data):
            raise InventoryError(f"{path} is not an Ansible inventory (Ansible's yaml and ini plugins would both "
                                 "refuse it)", where=str(path), fix="move it out of the inventory directory")
        read_yaml(tree, data, locator)
    else:
        read_ini(tree, text, str(path))
    return True


def read_with_ansible(source: str) -> tuple[dict, FileLocator]:
    """`ansible-inventory -i SOURCE --list`, translated as our own reading is: Ansible's hosts,
    groups and merged variables (its precedence, plugins, scripts, vault, Jinja)."""
    program = shutil.which("ansible-inventory")
    if program is None:
        raise InventoryError("ansible-inventory is not installed", where=f"{ANSIBLE_PREFIX}{source}",
                             fix=f"pip install ansible-core, or drop the `{ANSIBLE_PREFIX}` prefix to use clusterctl's "
                             "own reader")
    try:
        proc = subprocess.run([program, "-i", source, "--list"], capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL, env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
    except subprocess.TimeoutExpired:
        raise InventoryError("ansible-inventory --list did not finish in 300 s", where=source,
                             fix="check the inventory's scripts and plugins") from None
    said = " ".join(line.strip() for line in proc.stderr.splitlines() if line.strip())[-800:]
    if proc.returncode != 0:
        raise InventoryError(f"ansible-inventory refuses the inventory: {said}", where=source,
                             fix=f"run `ansible-inventory -i {source} --list` to see it")
    try:
        listing = json.loads(proc.stdout)
    except ValueError:
        raise InventoryError("ansible-inventory --list printed no JSON", where=source, fix=said or "check ansible.cfg")
    return tree_data(tree_from_listing(listing, f"ansible-inventory -i {source}"))


def tree_from_listing(listing: dict, label: str) -> AnsibleTree:
    """An AnsibleTree of `ansible-inventory --list` output: each host's merged variables as its own."""
    tree = AnsibleTree(label)
    tree.current_source = label
    for group, body in listing.items():
        if group == "_meta" or not isinstance(body, dict):
            continue
        tree.note_group(group, 0)
        for child in body.get("children", []):
            tree.add_child(group, child, 0)
        for host in body.get("hosts", []):
            tree.add_host(host, group, 0, {})
    for host, variables in listing.get("_meta", {}).get("hostvars", {}).items():
        tree.hosts.setdefault(host, 0)
        tree.host_groups.setdefault(host, ["ungrouped"])
        tree.host_vars[host] = {name: Var(value, 0, f"{host} {name}", label) for name, value in variables.items()}
    return tree
