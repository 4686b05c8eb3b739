"""The cluster session: what a command (or a `Cluster` of the Python API) works with. It owns the
inventory source (a value, parsed once), the connections to the nodes (SSH, or for the nodes of a
Slurm allocation an srun step each: a route per host, never a swap), the records (`State`) and the
renderer. The node facts are the preflight's (probed, or remembered from `up`: preflight/node_facts.py)."""
from __future__ import annotations

import argparse
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

from clusterctl.api.source import InventorySource
from clusterctl.errors import UsageError
from clusterctl.executor import Connections
from clusterctl.models import Host, Inventory
from clusterctl.render import Renderer
from clusterctl.state import State

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
class Session:
    """args: the parsed command line (its `inventory`, `limit`, `command`, `json`, `verbose` are read)."""

    args: argparse.Namespace
    env: dict
    state: State
    renderer: Renderer
    _connections: Optional[Connections] = field(default=None, repr=False)
    _routes: dict = field(default_factory=dict, repr=False)  # host name -> opener(host) for non-SSH nodes
    _contexts: ExitStack = field(default_factory=ExitStack, repr=False)  # what lasts as long as the session
    parser: Optional[argparse.ArgumentParser] = field(default=None, repr=False)  # the CLI's (`completion` reads it)
    _health_said: set = field(default_factory=set, repr=False)  # plannable's lines said already (one each)

    @classmethod
    def create(cls, args: argparse.Namespace, env: dict) -> "Session":
        return cls(args, env, State.here(env), Renderer(json_mode=args.json, verbose=args.verbose))

    @classmethod
    def for_command(cls, args: argparse.Namespace, env: dict,
                    parser: Optional[argparse.ArgumentParser] = None) -> "Session":
        """The session of one CLI command: the process's open-files limit lifted first, and with --json
        no prompt for an SSH key's passphrase (a program reads stdout)."""
        from clusterctl.executor import raise_descriptor_limit

        raise_descriptor_limit()  # a socket per node (two through a jump host): 1024 would break first at scale
        session = cls.create(args, env)
        session.parser = parser
        if args.json:
            from clusterctl.transport.ssh_keys import allow_prompts

            allow_prompts(False)
        return session

    # ---- the inventory
    def inventory_path(self, explicit: Optional[str] = None) -> Path:
        """The inventory as given (-i, else the active cluster's): what records and documents show."""
        given = explicit or getattr(self.args, "inventory", None)
        return Path(given) if given else self.state.active_inventory()

    def source(self, explicit: Optional[str] = None) -> InventorySource:
        """The inventory source as a value: -i (or `explicit`) parsed here, else the one `up` remembered."""
        given = explicit or getattr(self.args, "inventory", None)
        if given:
            return InventorySource.parse(given)
        remembered = self.state.active_source()
        if remembered is not None:
            return InventorySource.from_json(remembered)
        return InventorySource.parse(self.state.active_inventory())

    def inventory(self, explicit: Optional[str] = None) -> Inventory:
        from clusterctl.inventory.load import load_inventory

        inventory = load_inventory(self.inventory_path(explicit))  # as written: its errors name the file so
        _check_hosts_listed(inventory, getattr(self.args, "command", None))
        for warning in inventory.warnings:  # read but not used (an ssh option, an Ansible variable): said
            self.renderer.message(f"warning: {warning}", style="yellow")
        limit = getattr(self.args, "limit", None)
        return _limited(inventory, limit) if limit else inventory

    def plannable(self, inventory: Inventory) -> Inventory:
        """`inventory` without the hosts the health record quarantined (said in one line), unless
        --include-quarantined; too few left is refused (health/fleet.py: plannable)."""
        from clusterctl.health.fleet import plannable

        found = plannable(self.state.health_db, inventory, bool(getattr(self.args, "include_quarantined", False)))
        note = found.note()
        if note and note not in self._health_said:  # a plan that heals asks twice: said once
            self._health_said.add(note)
            self.renderer.message(note, "yellow")
        return found.inventory

    def inventory_of_run(self, given: Optional[str], run_id: str, record: dict,
                         hosts: Optional[list] = None) -> Inventory:
        """The inventory of a recorded run (-i, else the one the run was started with) with the hosts
        its record keeps, as the run reached them. A record of an older clusterctl keeps none: the
        inventory must then have every host the run ran on (`hosts`, default: its topology's), else one
        clear error naming them. A run made on a Slurm allocation by an inventory that lists no hosts:
        its nodes, reached through Slurm."""
        from dataclasses import replace

        from clusterctl.backends.base import hosts_of_record

        source = given or record.get("inventory")
        inventory = self.nodes_of_run(source, run_id, record)
        kept = hosts_of_record(record, inventory)  # as the run reached them (the inventory's own where it has them)
        if kept is not None:
            inventory = replace(inventory, hosts=kept)
        if hosts is None:
            hosts = [h.name for h in kept] if kept else [n.get("host") for n in record.get("topology") or []]
        names = {h.name for h in inventory.hosts}
        missing = [name for name in hosts if name not in names]
        if missing or not hosts:
            raise UsageError(f"run {run_id} ran on {', '.join(map(str, missing)) or 'no recorded node'}, which the "
                             "inventory does not have", where=str(self.inventory_path(source)),
                             fix="give the run's inventory with -i")
        return inventory

    def nodes_of_run(self, given: Optional[str], run_id: str, record: dict) -> Inventory:
        """The inventory to reach a recorded run's nodes with: as it is, or, for a run made on a Slurm
        allocation by an inventory that lists no hosts, the run's nodes reached through Slurm for the
        rest of the session (slurm/run.py: nodes_of_recorded_run)."""
        inventory = self.inventory(given or record.get("inventory"))
        if inventory.scheduler is None or inventory.hosts:
            return inventory
        from clusterctl.slurm.run import nodes_of_recorded_run

        return nodes_of_recorded_run(inventory, record, self, run_id)

    # ---- the connections
    @property
    def connections(self) -> Connections:
        if self._connections is None:
            self._connections = Connections(self._open)
        return self._connections

    def _open(self, host: Host):
        opener = self._routes.get(host.name)
        if opener is not None:
            return opener(host)
        from clusterctl.transport import connect

        return connect(host)

    def route(self, hosts: Iterable[Host], opener: Callable[[Host], object]) -> None:
        """Reach `hosts` through `opener` (e.g. an srun step of a Slurm allocation) instead of SSH,
        for the rest of the session."""
        for host in hosts:
            self._routes[host.name] = opener

    def enter(self, context):
        """Enter `context` for the rest of the session (left by `close`), e.g. a Slurm allocation."""
        return self._contexts.enter_context(context)

    def close(self) -> None:
        self._contexts.close()
        if self._connections is not None:
            self._connections.close()


def _limited(inventory: Inventory, limit: str) -> Inventory:
    wanted = [name.strip() for name in limit.split(",") if name.strip()]
    known = {h.name for h in inventory.hosts} | {g for h in inventory.hosts for g in h.groups}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise UsageError(f"--limit names unknown hosts or groups: {', '.join(unknown)}",
                         where="--limit", fix=f"choose from: {', '.join(sorted(known))}")
    return inventory.limited(wanted)
