"""An Ansible inventory as Ansible sees it: hosts, groups, and every variable with the file and
line that set it, merged in Ansible's order (VariableManager.get_vars, default precedence):

  inventory-file vars of `all` < of the host's other groups (by depth, ansible_group_priority,
  name) < group_vars/all < group_vars/<group> (same order) < inventory-file host vars <
  host_vars/<host>

and translated into clusterctl host data (ansible_vars_map.py says which variable means what).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from clusterctl.inventory.formats import fail
from clusterctl.inventory.yamlsource import KeyPath, Locator


@dataclass
class Var:
    value: Any
    line: int
    label: str
    source: Optional[str] = None  # the file, when it is not the inventory file itself


class FileLocator(Locator):
    """A Locator whose keys may come from several files (inventory files, group_vars, host_vars)."""

    def __init__(self, source_name: str):
        super().__init__(source_name)
        self._sources: dict[KeyPath, str] = {}
        self.set_by_var: set = set()

    def record_var(self, path: KeyPath, var: Var) -> None:
        self.record(path, var.line, label=var.label)  # line 0: from ansible-inventory, which gives none
        self.set_by_var.add(tuple(path))
        if var.source:
            self._sources[tuple(path)] = var.source

    def recorded(self, path: KeyPath) -> bool:
        """True when a variable set exactly this key (not a parent's position)."""
        return tuple(path) in self.set_by_var

    def source_of(self, path: KeyPath) -> str:
        path = tuple(path)
        for end in range(len(path), -1, -1):
            if path[:end] in self._sources:
                return self._sources[path[:end]]
            if path[:end] in self._positions:
                return self.source_name
        return self.source_name

    def where(self, path: KeyPath = ()) -> str:
        line = self.line(path)
        source = self.source_of(path)
        return f"{source}:{line}" if line else source


@dataclass
class AnsibleTree:
    """Hosts, groups and variables as Ansible sees them, with where each was written."""

    source_name: str
    hosts: dict[str, int] = field(default_factory=dict)  # name -> first line (insertion order)
    host_sources: dict[str, str] = field(default_factory=dict)  # name -> the file that listed it first
    host_vars: dict[str, dict[str, Var]] = field(default_factory=dict)  # from inventory files
    host_groups: dict[str, list[str]] = field(default_factory=dict)
    group_vars: dict[str, dict[str, Var]] = field(default_factory=dict)  # from inventory files
    parents: dict[str, list[str]] = field(default_factory=dict)
    group_lines: dict[str, int] = field(default_factory=dict)
    group_sources: dict[str, str] = field(default_factory=dict)
    dir_group_vars: dict[str, dict[str, Var]] = field(default_factory=dict)  # group_vars/ files
    dir_host_vars: dict[str, dict[str, Var]] = field(default_factory=dict)  # host_vars/ files
    depths: dict[str, int] = field(default_factory=dict)  # memo of depth()
    current_source: Optional[str] = None  # the inventory file being read (a directory has several)

    def where(self, line: int, label: str = "", source: Optional[str] = None) -> str:
        place = source or self.current_source or self.source_name
        return place + (f":{line}" if line else "") + (f" {label}" if label else "")

    def var(self, value: Any, line: int, label: str) -> Var:
        return Var(value, line, label, self.current_source if self.current_source != self.source_name else None)

    def add_host(self, name: str, group: str, line: int, variables: dict[str, Var]) -> None:
        self.hosts.setdefault(name, line)
        self.host_sources.setdefault(name, self.current_source or self.source_name)
        self.host_vars.setdefault(name, {}).update(variables)
        groups = self.host_groups.setdefault(name, [])
        if group not in groups:
            groups.append(group)
        self.note_group(group, line)

    def note_group(self, group: str, line: int) -> None:
        if group not in self.group_lines:
            self.group_lines[group] = line
            self.group_sources[group] = self.current_source or self.source_name

    def add_child(self, parent: str, child: str, line: int) -> None:
        self.note_group(parent, line)
        self.note_group(child, line)
        if parent not in self.parents.setdefault(child, []):
            self.parents[child].append(parent)

    def depth(self, group: str, seen: tuple = ()) -> int:
        """Distance from `all` along the longest parent chain (Ansible orders group vars by it)."""
        if group == "all":
            return 0
        if group in seen:
            cycle = " -> ".join(seen[seen.index(group):] + (group,))
            fail(self.where(self.group_lines.get(group, 1), source=self.group_sources.get(group)),
                 f"groups contain each other: {cycle}", "remove one of the children entries so that groups form a tree")
        if group not in self.depths:
            parents = self.parents.get(group) or ["all"]
            self.depths[group] = 1 + max(self.depth(p, seen + (group,)) for p in parents)
        return self.depths[group]

    def priority(self, group: str) -> int:
        var = self.group_vars.get(group, {}).get("ansible_group_priority")
        try:
            return int(var.value) if var is not None else 1
        except (TypeError, ValueError):
            return 1

    def groups_of(self, host: str) -> list[str]:
        """Every group of `host` but `all`, parents included, in Ansible's order (depth, priority, name)."""
        found: set[str] = set()
        todo = list(self.host_groups.get(host, []))
        while todo:
            group = todo.pop()
            if group not in found and group != "all":
                found.add(group)
                todo.extend(self.parents.get(group, []))
        return sorted(sorted(found), key=lambda g: (self.depth(g), self.priority(g), g))  # by name first: deterministic errors

    def merged(self, host: str) -> dict[str, Var]:
        """The host's variables, each the value Ansible would use, with where it was set."""
        groups = self.groups_of(host)
        merged: dict[str, Var] = dict(self.group_vars.get("all", {}))
        for group in groups:
            merged.update(self.group_vars.get(group, {}))
        merged.update(self.dir_group_vars.get("all", {}))
        for group in groups:
            merged.update(self.dir_group_vars.get(group, {}))
        merged.update(self.host_vars.get(host, {}))
        merged.update(self.dir_host_vars.get(host, {}))
        return merged

    def all_groups(self) -> list[str]:
        return sorted(set(self.group_lines) | {"all"})
