"""The catalog of playbook modules: each domain registers its functions here by name
(`@module("docker.container")`). A module of its own so that a domain needs only the catalog, not
the package that loads every domain (which would make each domain and `modules/__init__` a loop)."""
from __future__ import annotations

from typing import Any, Callable

REGISTRY: dict[str, Callable[..., Any]] = {}


def module(name: str, cluster_scope: bool = False):
    """Register a module function under its playbook name (e.g. `docker.container`).

    A cluster-scoped module is called once with a `ClusterContext` for all the task's hosts
    and returns {host: HostResult} (for checks that compare nodes).
    """

    def register(fn):
        fn.cluster_scope = cluster_scope
        REGISTRY[name] = fn
        return fn

    return register
