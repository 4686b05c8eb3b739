"""Playbook YAML -> a list of `PlannedTask`s, validated before any connection.

```yaml
- name: Say hello
  hosts: all            # all (default) | master | workers | a group | a host name
  shell: echo hello
- name: Put the config
  copy: {content: "x=1\n", dest: /etc/myjob.conf}
```
A file may also be a mapping `{name: ..., hosts: ..., tasks: [...]}`; its `hosts`
is the default of its tasks. Unknown modules, unknown task keys and bad module
arguments are errors with the playbook's file:line.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from clusterctl import modules
from clusterctl.errors import PlaybookError
from clusterctl.executor import PlannedTask
from clusterctl.inventory.yamlsource import load_yaml

TASK_KEYWORDS = ("name", "hosts")
# Inside the package, so that a wheel install carries them; the checkout's top-level playbooks/ is a
# symlink to this directory, where users see them. Named from the package, wherever this module lives.
BUILTIN_DIR = Path(str(resources.files("clusterctl") / "playbooks"))
# Modules whose arguments may be written as a bare scalar/list, and the argument it fills.
FREE_FORM = {"shell": "cmd", "command": "argv"}


@dataclass(frozen=True)
class Playbook:
    name: str
    tasks: tuple[PlannedTask, ...]
    path: Path


def builtin(name: str) -> Path:
    """The path of a built-in flow (`up`, `down`, ...) that users can copy and extend."""
    return BUILTIN_DIR / f"{name}.yaml"


def load_playbook(path: Path) -> Playbook:
    path = Path(path)
    data, locator = load_yaml(path, error_cls=PlaybookError)
    name, default_hosts, raw_tasks, tasks_path = _top_level(data, locator, path)
    tasks = tuple(
        _task(raw, (*tasks_path, index), locator, default_hosts)
        for index, raw in enumerate(raw_tasks)
    )
    if not tasks:
        raise PlaybookError("the playbook has no tasks", where=locator.where(()), fix="add at least one task")
    return Playbook(name, tasks, path)


def _top_level(data: Any, locator, path: Path) -> tuple[str, str, list, tuple]:
    if isinstance(data, list):
        return path.stem, "all", data, ()
    if isinstance(data, dict):
        unknown = [k for k in data if k not in ("name", "hosts", "tasks")]
        if unknown:
            raise PlaybookError(f"unknown key '{unknown[0]}' at the top level", where=locator.where((unknown[0],)),
                                fix="a playbook is a list of tasks, or a mapping with name, hosts and tasks")
        if not isinstance(data.get("tasks"), list):
            raise PlaybookError("'tasks' must be a list of tasks", where=locator.where(("tasks",)),
                                fix="tasks:\n  - name: ...\n    shell: ...")
        return str(data.get("name", path.stem)), str(data.get("hosts", "all")), data["tasks"], ("tasks",)
    raise PlaybookError("a playbook must be a list of tasks", where=locator.where(()),
                        fix="start the file with `- name: ...` entries")


def _task(raw: Any, key_path: tuple, locator, default_hosts: str) -> PlannedTask:
    where = locator.where(key_path)
    if not isinstance(raw, dict):
        raise PlaybookError(f"a task must be a mapping, got {type(raw).__name__}", where=where,
                            fix="write the task as `- name: ...` followed by one module, e.g. `shell: echo hi`")
    module_keys = [k for k in raw if k not in TASK_KEYWORDS]
    known = modules.names()
    for key in module_keys:
        if key not in known:
            guess = difflib.get_close_matches(str(key), known + list(TASK_KEYWORDS), n=1)
            hint = f"did you mean '{guess[0]}'? " if guess else ""
            raise PlaybookError(f"unknown module or task key '{key}'", where=locator.where((*key_path, key)),
                                fix=f"{hint}modules: {', '.join(known)}")
    if len(module_keys) != 1:
        raise PlaybookError(f"a task needs exactly one module, found {len(module_keys) or 'none'}"
                            + (f" ({', '.join(module_keys)})" if module_keys else ""),
                            where=where, fix="split it into one task per module")
    module_name = module_keys[0]
    args = _module_args(module_name, raw[module_name], locator.where((*key_path, module_name)))
    name = raw.get("name", module_name)
    hosts = raw.get("hosts", default_hosts)
    if not isinstance(name, str) or not isinstance(hosts, str):
        raise PlaybookError("task name and hosts must be strings", where=where, fix="e.g. hosts: all")
    return PlannedTask(name=name, module=module_name, args=args, hosts=hosts, where=where)


def _module_args(module_name: str, raw: Any, where: str) -> dict:
    if raw is None:
        args = {}
    elif isinstance(raw, dict):
        args = dict(raw)
    elif module_name in FREE_FORM:
        args = {FREE_FORM[module_name]: raw}
    else:
        raise PlaybookError(f"{module_name}: arguments must be a mapping", where=where,
                            fix=f"{module_name}: {{key: value}}")
    problems = modules.argument_problems(module_name, args)
    if problems:
        raise PlaybookError(f"{module_name}: {problems[0]}", where=where,
                            fix="; ".join(problems[1:]) or f"see the `{module_name}` module's arguments in docs/playbooks.md")
    return args


def find_playbook(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.exists():
        return path
    if builtin(name_or_path).exists():
        return builtin(name_or_path)
    raise PlaybookError(f"no playbook at {name_or_path}", where=name_or_path,
                        fix=f"give a file path, or a built-in flow: "
                        f"{', '.join(sorted(p.stem for p in BUILTIN_DIR.glob('*.yaml')))}")
