"""Playbook modules (Ansible's word): one file per domain.

A module is a function `(ctx: TaskContext, **args)` that returns the commands to run on
`ctx.host`, a `Skip` with its reason, or a `HostAction` (a callable taking the transport)
for work that talks to the Docker engine's API. Modules never touch the network
themselves; the executor runs what they return. A domain registers its functions in
`catalog.py`; this package loads every domain (by `importlib`) and resolves names, so no
domain imports the package that loads it.

`process.py` is the marker-scoped stale-rank cleanup, `docker.py` the container, `checks.py`
preflight as a playbook step, `lock.py` the cluster lock on the master. Container idempotence: the
wanted configuration is hashed into a label; a different hash recreates the container and says
which keys changed; foreign containers with the same name are left alone unless `--force`. memlock
is `-1` (unlimited) as NCCL recommends; where the node's hard limit is lower, the container gets
that limit and `up` says so. To change the container's options: `docker.py`."""
from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Mapping

from clusterctl.modules.catalog import REGISTRY as _REGISTRY
from clusterctl.modules.catalog import module  # noqa: F401 - where domains registered before the catalog

_DOMAINS = ("shell", "copy", "process", "docker", "checks")
_loaded = False


def _load_all() -> None:
    """Import every domain once (a domain imported directly elsewhere registers only itself)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for domain in _DOMAINS:
        try:
            importlib.import_module(f"clusterctl.modules.{domain}")
        except ModuleNotFoundError as exc:  # a domain not built yet
            if exc.name != f"clusterctl.modules.{domain}":
                raise


def names() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def resolve(name: str) -> Callable[..., Any]:
    _load_all()
    return _REGISTRY[name]


def argument_problems(name: str, args: Mapping[str, Any]) -> list[str]:
    """What is wrong with `args` for module `name` (empty when fine). No I/O."""
    fn = resolve(name)
    params = list(inspect.signature(fn).parameters.values())[1:]  # skip ctx
    accepted = {p.name for p in params}
    problems = [f"unknown argument '{key}' (accepted: {', '.join(sorted(accepted)) or 'none'})"
                for key in args if key not in accepted]
    for param in params:
        if param.default is inspect.Parameter.empty and param.name not in args:
            problems.append(f"missing required argument '{param.name}'")
    return problems
