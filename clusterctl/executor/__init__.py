"""The engine: the only place with threads, clocks and retries (besides transport/'s I/O edge and
the programs that run on the nodes as their own processes; tests/test_architecture.py holds the
list and docs/architecture.md why).

`connections.py` keeps one persistent transport per host for the whole invocation, opened lazily
and in parallel. `pool.py`: `for_each_host` runs one action on many hosts through a bounded pool and
returns one `HostResult` per host (an unreachable host or a crashed action is a value, never an
exception that unwinds the pool); `run_commands` runs one host's commands in order. `plays.py`:
`run_plan` runs a playbook's tasks with a barrier between tasks; a host that fails leaves the play,
the others carry on. `streams.py`: `Streams` reads every host's long-running command (a run's live
log, `logs --follow`) in one thread. `background.py`: `Background` runs per-host actions beside the
caller, at most the pool's width at once. `clock.py`: every wait of the controller (`Ticker`,
`ticks`, `wait_until`, `attempts`). `events.py`: `Event`, what the core tells the renderer.

Every name below is importable from `clusterctl.executor`, as it was when this was one module.
"""
from clusterctl.executor.background import Background
from clusterctl.executor.clock import Ticker, attempts, ticks, wait_until
from clusterctl.executor.connections import (CONNECT_RETRIES, MAX_OPEN, Connections, _unreachable,
                                             raise_descriptor_limit)
from clusterctl.executor.events import Event, OnEvent, _ignore
from clusterctl.executor.plays import (ClusterContext, ModuleOutput, PlannedTask, PlayReport, TaskContext,
                                       TaskReport, _merge, _slug, apply_module_output, run_plan, select_hosts)
from clusterctl.executor.pool import (DEFAULT_WIDTH, HostAction, HostLog, _as_result, _failure_detail,
                                      _line_forwarder, _on_host, _shorten, for_each_host, run_commands)
from clusterctl.executor.streams import Streams, _Followed

__all__ = [
    "Background", "CONNECT_RETRIES", "ClusterContext", "Connections", "DEFAULT_WIDTH", "Event", "HostAction",
    "HostLog", "MAX_OPEN", "ModuleOutput", "OnEvent", "PlannedTask", "PlayReport", "TaskContext", "TaskReport",
    "Ticker", "Streams", "apply_module_output", "attempts", "for_each_host", "raise_descriptor_limit",
    "run_commands", "run_plan", "select_hosts", "ticks", "wait_until",
]
