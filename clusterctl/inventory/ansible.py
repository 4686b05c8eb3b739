"""Ansible inventory files (INI and YAML) read into an AnsibleTree (ansible_tree.py), with the
line of every value.

Ansible semantics kept: a host without `ansible_host` is reached by its name; host patterns
like `node[01:04]` expand; several files (an inventory directory) add to one tree.
"""
from __future__ import annotations

import re
import shlex
from typing import Any, Optional

from clusterctl.inventory.ansible_tree import AnsibleTree, Var
from clusterctl.inventory.formats import SECTION, fail
from clusterctl.inventory.values import did_you_mean
from clusterctl.inventory.yamlsource import Locator, format_key_path

_GROUP_KEYS = ("hosts", "vars", "children")
_MAX_EXPANDED = 4096
_RANGE = re.compile(r"\[([0-9]+|[a-zA-Z]):([0-9]+|[a-zA-Z])(?::([0-9]+))?\]")


# --------------------------------------------------------------------- host patterns


def expand_host_pattern(pattern: str, where: str) -> list[str]:
    """node[01:03] -> node01 node02 node03 (Ansible's numeric and letter ranges)."""
    match = _RANGE.search(pattern)
    if not match:
        if "[" in pattern or "]" in pattern:
            fail(where, f"bad host range in '{pattern}'", "write ranges as name[01:10] or name[a:f], start:end[:step]")
        return [pattern]
    start, end, step = match.group(1), match.group(2), int(match.group(3) or 1)
    head, tail = pattern[: match.start()], pattern[match.end():]
    if start.isdigit() != end.isdigit() or step < 1:
        fail(where, f"bad host range in '{pattern}'",
              "both ends must be numbers or both letters, and the step positive")
    if start.isdigit():
        width = len(start) if start.startswith("0") and len(start) > 1 else 0
        values = [str(n).zfill(width) for n in range(int(start), int(end) + 1, step)]
    else:
        values = [chr(c) for c in range(ord(start), ord(end) + 1, step)]
    if not values:
        fail(where, f"empty host range in '{pattern}'", "write the range start before its end, e.g. node[01:04]")
    rests = expand_host_pattern(tail, where)
    if len(values) * len(rests) > _MAX_EXPANDED:
        fail(where, f"host range '{pattern}' expands to {len(values) * len(rests)} hosts",
              f"keep ranges under {_MAX_EXPANDED} hosts")
    return [head + value + rest for value in values for rest in rests]


# --------------------------------------------------------------------- Ansible INI


def read_ini(tree: AnsibleTree, text: str, source_name: str) -> None:
    """Add an INI inventory file's hosts, groups and variables to `tree`."""
    tree.current_source = source_name
    section, kind = "ungrouped", "hosts"
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        header = SECTION.match(line)
        if header:
            section, kind = _section(header.group(1).strip(), tree.where(number))
            tree.note_group(section, number)
            tree.group_vars.setdefault(section, {})
        elif kind == "hosts":
            _ini_host_line(tree, section, line, number)
        elif kind == "vars":
            name, var = _ini_var_line(tree, section, line, number)
            tree.group_vars[section][name] = var
        else:
            child = _words(line, tree.where(number))[0]
            tree.add_child(section, child, number)


def _section(title: str, where: str) -> tuple[str, str]:
    name, _, suffix = title.partition(":")
    if not name:
        fail(where, "empty section name", "write a group name, e.g. [gpu]")
    if suffix and suffix not in ("vars", "children"):
        fail(where, f"unknown section kind ':{suffix}'{did_you_mean(suffix, ['vars', 'children'])}",
              f"write [{name}], [{name}:vars] or [{name}:children]")
    return name, suffix or "hosts"


def _words(line: str, where: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError as exc:
        fail(where, f"cannot split the line: {exc}", "close the quotes on this line")


def _split_port(pattern: str) -> tuple[str, Optional[str]]:
    """"node1:2222" -> ("node1", "2222"); IPv6 literals and bare names keep their text."""
    match = re.match(r"^(.+):(\d+)$", pattern)
    if match and ":" not in _RANGE.sub("", match.group(1)):
        return match.group(1), match.group(2)
    return pattern, None


def _ini_host_line(tree: AnsibleTree, group: str, line: str, number: int) -> None:
    where = tree.where(number)
    words = _words(line, where)
    pattern, port = _split_port(words[0])
    variables = {}
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if not eq or not key:
            fail(f"{where} {pattern}", f"expected key=value after the host name, got '{word}'",
                  "write host variables as key=value, e.g. ansible_user=root (no spaces around '=')")
        variables[key] = value
    for name in expand_host_pattern(pattern, where):
        host_vars = {k: tree.var(v, number, f"{name} {k}") for k, v in variables.items()}
        if port is not None:
            host_vars.setdefault("ansible_port", tree.var(port, number, f"{name} port"))
        tree.add_host(name, group, number, host_vars)


def _ini_var_line(tree: AnsibleTree, group: str, line: str, number: int) -> tuple[str, Var]:
    key, eq, value = line.partition("=")
    key, value = key.strip(), value.strip()
    if not eq or not key:
        fail(tree.where(number, f"[{group}:vars]"), f"expected key=value, got '{line}'",
              "write group variables one per line as key=value")
    if value[:1] in ("'", '"'):
        words = _words(value, tree.where(number))
        value = words[0] if words else ""
    return key, tree.var(value, number, f"[{group}:vars] {key}")


# --------------------------------------------------------------------- Ansible YAML


_CLUSTERCTL_TOP = {"name", "ssh", "hosts", "container", "rendezvous", "job", "checks"}


def looks_like_ansible_yaml(data: Any) -> bool:
    """True for `all: {hosts: {...}, children: {...}}` and group-keyed documents."""
    if not isinstance(data, dict) or not data or isinstance(data.get("hosts"), list):
        return False
    if "all" in data and isinstance(data["all"], (dict, type(None))) and not set(data) & _CLUSTERCTL_TOP:
        return True
    return all(isinstance(b, dict) and b and set(b) <= set(_GROUP_KEYS) for b in data.values())


def read_yaml(tree: AnsibleTree, data: Any, locator: Locator) -> None:
    """Add a parsed YAML inventory file's hosts, groups and variables to `tree`."""
    tree.current_source = locator.source_name
    if data is None:
        return
    if not isinstance(data, dict):
        fail(locator.where(()), "an Ansible YAML inventory must be a mapping of groups",
             "start with `all:` and put hosts under all: hosts:")
    for group, body in data.items():
        _yaml_group(tree, locator, str(group), body, (group,))


def _yaml_group(tree: AnsibleTree, locator: Locator, group: str, body: Any, path: tuple) -> None:
    tree.note_group(group, locator.line(path) or 1)
    if body is None:
        return
    where = f"{locator.where(path)} {format_key_path(path)}"
    if not isinstance(body, dict):
        fail(where, f"group '{group}' must be a mapping with hosts/vars/children",
              f"write `{group}: {{hosts: {{node1: {{ansible_host: 10.0.0.1}}}}}}`")
    for key in body:
        if key not in _GROUP_KEYS:
            fail(f"{locator.where(path + (key,))} {format_key_path(path + (key,))}",
                  f"unknown key '{key}' in group '{group}'{did_you_mean(key, _GROUP_KEYS)}",
                  "an Ansible group has only hosts:, vars: and children:")
    _yaml_hosts(tree, locator, group, body.get("hosts"), path + ("hosts",))
    tree.group_vars.setdefault(group, {}).update(_yaml_vars(tree, locator, body.get("vars"), path + ("vars",)))
    children = body.get("children") or {}
    if not isinstance(children, dict):
        fail(f"{locator.where(path + ('children',))} {format_key_path(path + ('children',))}",
              "children must be a mapping of group names", "write `children: {gpu: {hosts: {...}}}`")
    for child, child_body in children.items():
        tree.add_child(group, str(child), locator.line(path + ("children", child)) or 1)
        _yaml_group(tree, locator, str(child), child_body, path + ("children", child))


def _yaml_hosts(tree: AnsibleTree, locator: Locator, group: str, hosts: Any, path: tuple) -> None:
    if hosts is None:
        return
    where = f"{locator.where(path)} {format_key_path(path)}"
    if not isinstance(hosts, dict):
        fail(where, "in an Ansible YAML inventory, hosts must be a mapping of host names",
              "write `hosts: {node1: {ansible_host: 10.0.0.1}, node2: }` (name: variables), not a list")
    for name, variables in hosts.items():
        host_path = path + (name,)
        line = locator.line(host_path) or 1
        for expanded in expand_host_pattern(str(name), f"{locator.where(host_path)} {format_key_path(host_path)}"):
            tree.add_host(expanded, group, line, _yaml_vars(tree, locator, variables, host_path))


def _yaml_vars(tree: AnsibleTree, locator: Locator, variables: Any, path: tuple) -> dict[str, Var]:
    if variables is None:
        return {}
    if not isinstance(variables, dict):
        fail(f"{locator.where(path)} {format_key_path(path)}", "variables must be a mapping of name: value",
              "write `ansible_host: 10.0.0.1` style entries")
    return {str(k): tree.var(v, locator.line(path + (k,)) or 1, format_key_path(path + (k,))) for k, v in variables.items()}
