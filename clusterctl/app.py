"""What every command needs: parsed args, environment, state, renderer, inventory, connections."""
from __future__ import annotations

import argparse
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from clusterctl.errors import UsageError
from clusterctl.executor import Connections
from clusterctl.models import Inventory
from clusterctl.render import Renderer
from clusterctl.state import State


def add_cluster_options(parser: argparse.ArgumentParser, limit: bool = True) -> None:
    parser.add_argument("-i", "--inventory", help="inventory file (default: the active cluster of `up`)")
    if limit:
        parser.add_argument("--limit", help="comma-separated host names or groups to act on")


# The commands that work on an inventory whose nodes are a Slurm allocation's (`scheduler:`, no hosts).
ON_ALLOCATIONS = ("run", "check", "status", "export", "collect-logs", "logs", "stop", "inventory")


def _check_hosts_listed(inventory: Inventory, command: Optional[str]) -> None:
    if inventory.hosts or inventory.scheduler is None or command in ON_ALLOCATIONS or command is None:
        return
    raise UsageError(f"the inventory lists no hosts (its nodes are a Slurm allocation's), and `clusterctl {command}` "
                     "acts on hosts", where=str(inventory.source or "the inventory"),
                     fix="list the nodes under hosts: (they then become the allocation's --nodelist, reached over SSH "
                         f"by `{command}`), or use {', '.join(f'`{c}`' for c in ON_ALLOCATIONS[:5])} on the allocation")


@dataclass
class App:
    args: argparse.Namespace
    env: dict
    state: State
    renderer: Renderer
    _connections: Optional[Connections] = field(default=None, repr=False)
    _contexts: ExitStack = field(default_factory=ExitStack, repr=False)  # what lasts as long as the command

    @classmethod
    def create(cls, args: argparse.Namespace, env: dict) -> "App":
        return cls(args, env, State.here(env), Renderer(json_mode=args.json, verbose=args.verbose))

    def inventory_path(self, explicit: Optional[str] = None) -> Path:
        given = explicit or getattr(self.args, "inventory", None)
        return Path(given) if given else self.state.active_inventory()

    def inventory(self, explicit: Optional[str] = None) -> Inventory:
        from clusterctl.inventory.load import load_inventory

        inventory = load_inventory(self.inventory_path(explicit))
        _check_hosts_listed(inventory, getattr(self.args, "command", None))
        for warning in inventory.warnings:  # read but not used (an ssh option, an Ansible variable): said
            self.renderer.message(f"warning: {warning}", style="yellow")
        limit = getattr(self.args, "limit", None)
        if limit:
            wanted = [name.strip() for name in limit.split(",") if name.strip()]
            known = {h.name for h in inventory.hosts} | {g for h in inventory.hosts for g in h.groups}
            unknown = [name for name in wanted if name not in known]
            if unknown:
                raise UsageError(f"--limit names unknown hosts or groups: {', '.join(unknown)}",
                                 where="--limit", fix=f"choose from: {', '.join(sorted(known))}")
            inventory = inventory.limited(wanted)
        return inventory

    @property
    def connections(self) -> Connections:
        if self._connections is None:
            from clusterctl.transport import connect

            self._connections = Connections(connect)
        return self._connections

    @contextmanager
    def reaching(self, connections: Connections) -> Iterator[None]:
        """`connections` as this command's way to the nodes for the block (Slurm: srun steps of an
        allocation, slurm/run.py), instead of SSH."""
        saved, self._connections = self._connections, connections
        try:
            yield
        finally:
            self._connections = saved

    def enter(self, context):
        """Enter `context` for the rest of the command (left by `close`), e.g. a Slurm allocation."""
        return self._contexts.enter_context(context)

    def close(self) -> None:
        self._contexts.close()
        if self._connections is not None:
            self._connections.close()
