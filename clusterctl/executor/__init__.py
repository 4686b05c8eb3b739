"""The engine: the only place with threads, clocks and retries (besides transport/'s I/O edge, the
rehearsal cluster and the programs that run on the nodes as their own processes;
tests/unit/test_architecture.py holds the list, each failure naming the module and the line).

`connections.py` keeps one persistent transport per host for the whole invocation, opened lazily
and in parallel (up to MAX_OPEN = 256 kept for the command's run, per action past that; a dropped
handshake retried once; the open-files limit lifted). `pool.py`: `for_each_host` runs one action on
many hosts through a bounded pool (64) and returns one `HostResult` per host (an unreachable host
or a crashed action is a value, never an exception that unwinds the pool); `run_commands` runs one
host's commands in order. `plays.py`: `run_plan` runs a playbook's tasks with a barrier between
tasks; a host that fails leaves the play, the others carry on. `streams.py`: `Streams` reads every
host's long-running command (a run's live log, `logs --follow`) in one thread polling the channels.
`background.py`: `Background` runs per-host actions beside the caller, at most the pool's width at
once. `clock.py`: every wait of the controller (`ticks` for a deadline loop, `wait_until` for a
condition, `attempts` for a bounded retry, `Ticker` for a fixed period): a stage says what it waits
for, never holds a clock. `beside.py`: calls that must never hold the caller up (a notification's
delivery, its growing pause). `events.py`: `Event`, what the core tells the renderer.

Threads and clocks, the allowed places: here; transport/, the I/O edge (paramiko runs a reader
thread per connection and its keepalive, a tunnelled connection's liveness probe is a thread of its
own, a local command or a ProxyCommand is a pipe that must be read while its other end writes: the
libraries' and the operating system's own threads, kept where the library is); the programs in
node/ (marked `RUNS_ON_NODES = True`: their threads and clocks are that process's, never the
controller's); sandbox/, which starts daemons on this machine and waits for them to answer, on no
run's path. What counts: creating a thread or a pool (`threading.Thread`/`Timer`; importing
`concurrent.futures`, `_thread`, `multiprocessing`, `asyncio`), `time.sleep`, and a `while` whose
condition reads a clock or waits (`x.wait(...)`, `x.join(...)`). What does not: a `threading.Lock`
or `Event` (they make threads safe; they start none), reading a clock to measure a duration, one
bounded `wait(timeout)` on work the executor runs, and node programs shipped as text.

Every name below is importable from `clusterctl.executor`, as it was when this was one module."""
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
