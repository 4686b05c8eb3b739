"""Plays: a playbook's tasks one after another (a barrier between tasks), each on its hosts in
parallel through the pool; a host that fails leaves the play, the others carry on."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from clusterctl.executor.connections import Connections
from clusterctl.executor.events import Event, OnEvent, _ignore
from clusterctl.executor.pool import DEFAULT_WIDTH, for_each_host, run_commands
from clusterctl.models import Host, HostResult, HostStatus, Inventory, Skip


@dataclass(frozen=True)
class TaskContext:
    """What a module sees: the host, the inventory, and the invocation's variables."""

    host: Host
    inventory: Inventory
    vars: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterContext:
    """What a cluster-scoped module sees (one call for all hosts, e.g. cross-node checks)."""

    hosts: Sequence[Host]
    inventory: Inventory
    vars: Mapping[str, Any]
    connections: "Connections"
    on_event: OnEvent


# A module returns commands to run, a Skip, or a HostAction for engine-level work (Docker API).
ModuleOutput = Any


@dataclass(frozen=True)
class PlannedTask:
    name: str
    module: str
    args: Mapping[str, Any]
    hosts: str = "all"  # all | master | workers | a group | a host name
    where: str = ""  # file:line, for messages


@dataclass
class TaskReport:
    task: PlannedTask
    results: dict[str, HostResult]


@dataclass
class PlayReport:
    tasks: list[TaskReport] = field(default_factory=list)
    hosts: dict[str, HostResult] = field(default_factory=dict)  # each host's final state

    @property
    def ok(self) -> bool:
        return all(r.succeeded for r in self.hosts.values())


def select_hosts(inventory: Inventory, selector: str) -> list[Host]:
    if selector in ("all", "*"):
        return list(inventory.hosts)
    master = inventory.master
    if selector == "master":
        return [master]
    if selector == "workers":
        return [h for h in inventory.hosts if h.name != master.name]
    return [h for h in inventory.hosts if h.name == selector or selector in h.groups]


def run_plan(
    tasks: Sequence[PlannedTask],
    inventory: Inventory,
    connections: Connections,
    resolve_module: Callable[[str], Callable[..., ModuleOutput]],
    variables: Mapping[str, Any] = None,
    on_event: OnEvent = _ignore,
    log_dir: Optional[Path] = None,
    width: int = DEFAULT_WIDTH,
) -> PlayReport:
    """Run tasks one after another (a barrier between tasks) on their hosts in parallel."""
    report = PlayReport()
    variables = {"on_event": on_event, **(variables or {}), "report": report}  # modules may read earlier results
    for index, task in enumerate(tasks, 1):
        alive = [h for h in select_hosts(inventory, task.hosts) if report.hosts.get(h.name, _OK).succeeded]
        on_event(Event("task", text=task.name, data={"index": index, "hosts": [h.name for h in alive]}))
        module = resolve_module(task.module)
        step_dir = log_dir / f"{index:02d}-{_slug(task.name)}" if log_dir else None

        def action(transport, host: Host, task=task, module=module, step_dir=step_dir) -> HostResult:
            ctx = TaskContext(host, inventory, variables)
            output = module(ctx, **task.args)
            log_path = step_dir / f"{host.name}.log" if step_dir else None
            return apply_module_output(output, transport, host, on_event, log_path)

        if getattr(module, "cluster_scope", False):
            ctx = ClusterContext(alive, inventory, variables, connections, on_event)
            results = module(ctx, **task.args)
        else:
            results = for_each_host(alive, action, connections, width)
        for result in results.values():
            on_event(Event("host_done", result.host, result.detail, {"result": result, "task": task.name}))
            previous = report.hosts.get(result.host)
            report.hosts[result.host] = _merge(previous, result)
        report.tasks.append(TaskReport(task, results))
    return report


_OK = HostResult("", HostStatus.OK)


def apply_module_output(output: ModuleOutput, transport, host: Host, on_event: OnEvent, log_path: Optional[Path]) -> HostResult:
    if isinstance(output, Skip):
        return HostResult(host.name, HostStatus.SKIPPED, output.reason)
    if isinstance(output, HostResult):
        return output
    if callable(output):
        return output(transport, host)
    return run_commands(transport, host, output, on_event, log_path)


def _merge(previous: Optional[HostResult], current: HostResult) -> HostResult:
    """A host's state across tasks: failures stick, `changed` beats `ok`, data accumulates."""
    if previous is None:
        return current
    if not current.succeeded:
        return current
    status = HostStatus.CHANGED if HostStatus.CHANGED in (previous.status, current.status) else (
        HostStatus.OK if HostStatus.OK in (previous.status, current.status) else current.status
    )
    data = {**previous.data, **current.data}
    return HostResult(current.host, status, current.detail or previous.detail, current.exit_code,
                      current.stdout, current.stderr, previous.duration + current.duration, data, current.log_path)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "task"

