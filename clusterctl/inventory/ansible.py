"""Ansible inventories (INI and YAML) -> clusterctl inventory data, with the line of every value.

Ansible semantics kept: a host without `ansible_host` is reached by its name; variables
apply from `all` through parent groups to child groups (by depth, then name), and host
variables win over all of them; host patterns like `node[01:04]` expand.
"""
from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Optional

from clusterctl.inventory.formats import SECTION, fail
from clusterctl.inventory.values import did_you_mean
from clusterctl.inventory.yamlsource import Locator, format_key_path

# Ansible variable -> clusterctl host key. Legacy spellings first: modern ones win.
_LEGACY_VARS = {"ansible_ssh_host": "address", "ansible_ssh_port": "port", "ansible_ssh_user": "user",
                "ansible_private_key_file": "identity_file"}
_MODERN_VARS = {"ansible_host": "address", "ansible_port": "port", "ansible_user": "user",
                "ansible_ssh_private_key_file": "identity_file", "ansible_connection": "connection"}
# clusterctl's own host keys, usable as plain host or group variables
_CLUSTERCTL_VARS = {"gpus": "gpus", "nic": "nic", "slots": "slots",
                    "clusterctl_gpus": "gpus", "clusterctl_nic": "nic", "clusterctl_slots": "slots"}
# Ansible variables that mean nothing to clusterctl (privilege escalation, interpreters)
_IGNORED_VARS = {
    "ansible_python_interpreter", "ansible_become", "ansible_become_user", "ansible_become_method",
    "ansible_become_pass", "ansible_become_password", "ansible_become_exe", "ansible_become_flags",
    "ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_sftp_extra_args", "ansible_scp_extra_args",
    "ansible_shell_type", "ansible_shell_executable", "ansible_ssh_pipelining", "ansible_pipelining",
    "ansible_ssh_executable", "ansible_timeout", "ansible_ssh_timeout", "ansible_host_key_checking",
    "ansible_ssh_retries", "ansible_remote_tmp",
}
_PASSWORD_VARS = {"ansible_password", "ansible_ssh_pass", "ansible_ssh_password"}
_KNOWN_ANSIBLE = sorted(set(_LEGACY_VARS) | set(_MODERN_VARS) | _IGNORED_VARS | _PASSWORD_VARS)
_CONNECTIONS = {"ssh": "ssh", "paramiko": "ssh", "paramiko_ssh": "ssh", "smart": "ssh", "local": "local"}
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


# --------------------------------------------------------------------- the Ansible model


@dataclass
class _Var:
    value: Any
    line: int
    label: str


@dataclass
class AnsibleTree:
    """Hosts, groups and variables as Ansible sees them, with where each was written."""

    source_name: str
    hosts: dict[str, int] = field(default_factory=dict)  # name -> first line (insertion order)
    host_vars: dict[str, dict[str, _Var]] = field(default_factory=dict)
    host_groups: dict[str, list[str]] = field(default_factory=dict)
    group_vars: dict[str, dict[str, _Var]] = field(default_factory=dict)
    parents: dict[str, list[str]] = field(default_factory=dict)
    group_lines: dict[str, int] = field(default_factory=dict)
    depths: dict[str, int] = field(default_factory=dict)  # memo of depth()

    def where(self, line: int, label: str = "") -> str:
        return f"{self.source_name}:{line}" + (f" {label}" if label else "")

    def add_host(self, name: str, group: str, line: int, variables: dict[str, _Var]) -> None:
        self.hosts.setdefault(name, line)
        self.host_vars.setdefault(name, {}).update(variables)
        groups = self.host_groups.setdefault(name, [])
        if group not in groups:
            groups.append(group)
        self.group_lines.setdefault(group, line)

    def add_child(self, parent: str, child: str, line: int) -> None:
        self.group_lines.setdefault(parent, line)
        self.group_lines.setdefault(child, line)
        if parent not in self.parents.setdefault(child, []):
            self.parents[child].append(parent)

    def depth(self, group: str, seen: tuple = ()) -> int:
        """Distance from `all` along the longest parent chain (Ansible orders group vars by it)."""
        if group == "all":
            return 0
        if group in seen:
            cycle = " -> ".join(seen[seen.index(group):] + (group,))
            fail(self.where(self.group_lines.get(group, 1)), f"groups contain each other: {cycle}",
                  "remove one of the children entries so that groups form a tree")
        if group not in self.depths:
            parents = self.parents.get(group) or ["all"]
            self.depths[group] = 1 + max(self.depth(p, seen + (group,)) for p in parents)
        return self.depths[group]

    def ancestry(self, host: str) -> list[str]:
        """Every group of `host`, parents included, most general first (Ansible's var order)."""
        found: set[str] = set()
        todo = list(self.host_groups.get(host, []))
        while todo:
            group = todo.pop()
            if group not in found:
                found.add(group)
                todo.extend(self.parents.get(group, []))
        found.add("all")
        return sorted(sorted(found), key=self.depth)  # by name first: deterministic errors

    def to_data(self) -> tuple[dict, Locator]:
        locator = Locator(self.source_name)
        locator.record(("hosts",), min(self.hosts.values(), default=1), label="hosts")
        hosts = [self._host_data(name, index, locator) for index, name in enumerate(self.hosts)]
        return {"hosts": hosts}, locator

    def _host_data(self, name: str, index: int, locator: Locator) -> dict:
        path = ("hosts", index)
        locator.record(path, self.hosts[name], label=name)
        locator.record(path + ("name",), self.hosts[name], label=name)
        groups = self.ancestry(name)
        merged: dict[str, _Var] = {}
        for group in groups:
            merged.update(self.group_vars.get(group, {}))
        merged.update(self.host_vars.get(name, {}))
        data: dict[str, Any] = {"name": name, "address": name}
        locator.record(path + ("address",), self.hosts[name], label=name)
        for table in (_LEGACY_VARS, _MODERN_VARS, _CLUSTERCTL_VARS):
            for var_name, key in table.items():
                if var_name in merged:
                    var = merged[var_name]
                    data[key] = self._translate(key, var)
                    locator.record(path + (key,), var.line, label=var.label)
        for var_name, var in merged.items():
            self._check_var(var_name, var)
        data["groups"] = [g for g in sorted(groups) if g not in ("all", "ungrouped")]
        return data

    def _translate(self, key: str, var: _Var) -> Any:
        value = var.value
        if isinstance(value, str) and "{{" in value:
            fail(self.where(var.line, var.label), f"Jinja template {value!r} is not evaluated by clusterctl",
                  "write the value literally")
        if key == "connection" and isinstance(value, str):
            return _CONNECTIONS.get(value, value)
        if key in ("port", "slots") and isinstance(value, str) and value.strip().isdigit():
            return int(value)
        if key == "gpus":
            return _gpus_from_text(value)
        return value

    def _check_var(self, name: str, var: _Var) -> None:
        where = self.where(var.line, var.label)
        if name in _PASSWORD_VARS:
            fail(where, "a password variable: clusterctl connects with SSH keys only, not passwords",
                  "remove the password variable; set ansible_ssh_private_key_file (or use ssh-agent)")
        if name.startswith("ansible_") and name not in _KNOWN_ANSIBLE:
            fail(where, f"unknown Ansible variable '{name}'{did_you_mean(name, _KNOWN_ANSIBLE)}",
                  "use ansible_host, ansible_port, ansible_user, ansible_ssh_private_key_file or ansible_connection")
        if name not in _CLUSTERCTL_VARS and not name.startswith("ansible_"):
            hint = difflib.get_close_matches(name, list(_CLUSTERCTL_VARS), n=1, cutoff=0.75)
            if hint:
                fail(where, f"unknown variable '{name}' (did you mean '{hint[0]}'?)",
                      f"rename it to {hint[0]}, or to a name clusterctl does not read")


def _gpus_from_text(value: Any) -> Any:
    """INI gives text: "all", "none", "4", "0,1,2" or "[0, 1]" -> the YAML value."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.isdigit():
        return int(text)
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    parts = [p.strip() for p in inner.split(",")]
    if inner and all(p.isdigit() for p in parts):
        return [int(p) for p in parts]
    return text


# --------------------------------------------------------------------- Ansible INI


def parse_ansible_ini(text: str, source_name: str) -> tuple[dict, Locator]:
    """An Ansible INI inventory -> (clusterctl inventory data, Locator)."""
    tree = AnsibleTree(source_name)
    section, kind = "ungrouped", "hosts"
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        header = SECTION.match(line)
        if header:
            section, kind = _section(header.group(1).strip(), tree.where(number))
            tree.group_lines.setdefault(section, number)
            tree.group_vars.setdefault(section, {})
        elif kind == "hosts":
            _ini_host_line(tree, section, line, number)
        elif kind == "vars":
            name, var = _ini_var_line(tree, section, line, number)
            tree.group_vars[section][name] = var
        else:
            child = _words(line, tree.where(number))[0]
            tree.add_child(section, child, number)
    if not tree.hosts:
        fail(f"{source_name}:1", "the Ansible inventory lists no hosts",
              "add host lines under a [group] section, e.g. `node1 ansible_host=10.0.0.1`")
    return tree.to_data()


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
        host_vars = {k: _Var(v, number, f"{name} {k}") for k, v in variables.items()}
        if port is not None:
            host_vars.setdefault("ansible_port", _Var(port, number, f"{name} port"))
        tree.add_host(name, group, number, host_vars)


def _ini_var_line(tree: AnsibleTree, group: str, line: str, number: int) -> tuple[str, _Var]:
    key, eq, value = line.partition("=")
    key, value = key.strip(), value.strip()
    if not eq or not key:
        fail(tree.where(number, f"[{group}:vars]"), f"expected key=value, got '{line}'",
              "write group variables one per line as key=value")
    if value[:1] in ("'", '"'):
        words = _words(value, tree.where(number))
        value = words[0] if words else ""
    return key, _Var(value, number, f"[{group}:vars] {key}")


# --------------------------------------------------------------------- Ansible YAML


_CLUSTERCTL_TOP = {"name", "ssh", "hosts", "container", "rendezvous", "job", "checks"}


def looks_like_ansible_yaml(data: Any) -> bool:
    """True for `all: {hosts: {...}, children: {...}}` and group-keyed documents."""
    if not isinstance(data, dict) or not data or isinstance(data.get("hosts"), list):
        return False
    if "all" in data and isinstance(data["all"], (dict, type(None))) and not set(data) & _CLUSTERCTL_TOP:
        return True
    return all(isinstance(b, dict) and b and set(b) <= set(_GROUP_KEYS) for b in data.values())


def convert_ansible_yaml(data: dict, locator: Locator) -> tuple[dict, Locator]:
    """Parsed Ansible YAML (with its Locator) -> (clusterctl inventory data, Locator)."""
    tree = AnsibleTree(locator.source_name)
    for group, body in data.items():
        _yaml_group(tree, locator, str(group), body, (group,))
    if not tree.hosts:
        fail(locator.where(()), "the Ansible inventory lists no hosts",
              "add hosts under all: hosts:, e.g. `node1: {ansible_host: 10.0.0.1}`")
    return tree.to_data()


def _yaml_group(tree: AnsibleTree, locator: Locator, group: str, body: Any, path: tuple) -> None:
    tree.group_lines.setdefault(group, locator.line(path) or 1)
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
    tree.group_vars.setdefault(group, {}).update(_yaml_vars(locator, body.get("vars"), path + ("vars",)))
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
            tree.add_host(expanded, group, line, _yaml_vars(locator, variables, host_path))


def _yaml_vars(locator: Locator, variables: Any, path: tuple) -> dict[str, _Var]:
    if variables is None:
        return {}
    if not isinstance(variables, dict):
        fail(f"{locator.where(path)} {format_key_path(path)}", "variables must be a mapping of name: value",
              "write `ansible_host: 10.0.0.1` style entries")
    return {str(k): _Var(v, locator.line(path + (k,)) or 1, format_key_path(path + (k,))) for k, v in variables.items()}
