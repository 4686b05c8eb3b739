"""The controller's side of the GPU leases on the nodes (node/leases.py, issue 48): the commands that
run it on a node, what they answer as values, and the words that name a holder.

The node program runs the one way every node program does for one command (node `inline_argv`:
`python -I -S -c TEXT`, with the two files it imports, layout.py and safe_files.py, loaded as modules
beside it): nothing is left on the node but the lease directory, and `up`/`status` need no run
directory. It runs where the job's outputs are: on the host through the bind mount (as the poll does,
privileged: root in the container wrote the run dirs), else in the container.
"""
from __future__ import annotations

import getpass
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Optional

from clusterctl.models import Command, Host, Inventory
from clusterctl.node import inline_argv
from clusterctl.plan.container import host_path, in_container
from clusterctl.plan.wrapper import LEASE_S

def operator() -> str:
    """Who runs this clusterctl, as leases name it: user@controller host (`CLUSTERCTL_OPERATOR` overrides:
    a shared service account can say who is behind it)."""
    return os.environ.get("CLUSTERCTL_OPERATOR") or f"{getpass.getuser()}@{socket.gethostname()}"


STOP_GRACE_S = 7.0  # the wrapper's own lease counts whole `sleep 1`s, then gives the ranks 5 s from TERM to KILL


def window_s(inventory: Inventory) -> float:
    """How long a lease outlives its last beat: the run's lost-node window (job.lost_after), never less than
    the wrapper's own lease, plus the time the wrapper takes to end the ranks once that ran out: a lease
    never lapses while the run's ranks may still be on the GPUs."""
    return float(max(inventory.job.healing.lost_after, LEASE_S)) + STOP_GRACE_S


def keys_for(gpu_ids, nproc: int) -> list[str]:
    """A node's keys in a run: its GPUs, else its rank slots (node/leases.key_names)."""
    from clusterctl.node.leases import key_names

    return key_names(list(gpu_ids or ()), nproc)


def lease_command(inventory: Inventory, host: Host, op: str, timeout: float = 30, **args) -> Command:
    """node/leases.py `op` on `host`, with the job's outputs as that side sees them."""
    outputs = inventory.job.outputs
    on_host = host_path(inventory, outputs)

    def leases_argv(python: str, where: str) -> tuple:
        return inline_argv(python, ("layout", "safe_files"), "leases", op,
                           json.dumps({"outputs": where, "host": host.name, **args}), argv0=True)

    if on_host is not None:
        argv = leases_argv("python3" if inventory.uses_container else inventory.job.python, on_host)
    else:
        argv = in_container(inventory, leases_argv(inventory.job.python, outputs))
    return Command(argv, timeout=timeout, privileged=on_host is not None)


@dataclass(frozen=True)
class Answer:
    """What a node said: its document, or why it could not (refused: its path, why and fix)."""

    host: str
    document: Optional[dict]
    error: str = ""
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.document is not None


def parse(host: str, stdout: str, stderr: str = "", exit_code: Optional[int] = 0) -> Answer:
    last = (stdout.strip().splitlines() or [""])[-1]
    try:
        document = json.loads(last)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        said = (stderr.strip().splitlines() or stdout.strip().splitlines() or [f"exit {exit_code}"])[-1]
        return Answer(host, None, f"{host}: the lease program did not answer ({said[:200]})",
                      "the node needs python3 (job.python in the container) to hold GPU leases")
    if not document.get("ok"):
        refused = document.get("refused") or {}
        return Answer(host, None, f"{host}: lease directory refused: {refused.get('path')}: {refused.get('why')}",
                      refused.get("fix") or "")
    return Answer(host, document)


def when(stamp) -> str:
    """A node's unix time as the local wall clock's HH:MM (a day ago or more: the date too)."""
    try:
        value = float(stamp)
    except (TypeError, ValueError):
        return "?"
    fmt = "%H:%M" if time.time() - value < 86400 else "%Y-%m-%d %H:%M"
    return time.strftime(fmt, time.localtime(value))


def holder(lease: dict) -> str:
    """`run R (alice@ctl-2, since 10:02)`; a garbage lease file says so."""
    if lease.get("garbage"):
        return (f"an unreadable lease file {lease.get('key')} ({lease['garbage']}), expiring in "
                f"{lease.get('expires_in_s', 0):.0f}s")
    return f"run {lease.get('run_id')} ({lease.get('operator') or 'operator unknown'}, since {when(lease.get('since'))})"


def fleet_runs(hosts: dict[str, dict]) -> list[dict]:
    """Every run holding live leases on these nodes, whoever started it (`status`'s fleet view), from each
    node's `process.leases` data: [{run_id, operator, since, gpus: {host: [keys]}}], oldest first."""
    runs: dict[str, dict] = {}
    for name, data in hosts.items():
        for lease in data.get("leases") or ():
            if not lease.get("alive") or not lease.get("run_id"):
                continue
            run = runs.setdefault(lease["run_id"], {"run_id": lease["run_id"], "operator": lease.get("operator"),
                                                    "since": lease.get("since"), "gpus": {}})
            run["since"] = min(run["since"] or lease.get("since") or 0, lease.get("since") or run["since"] or 0)
            run["gpus"].setdefault(name, []).append(lease["key"])
    return sorted(runs.values(), key=lambda r: (r["since"] or 0, r["run_id"]))


def fleet_waiting(hosts: dict[str, dict]) -> list[dict]:
    """The runs queued for leases (`run --wait`), in the nodes' order: [{run_id, operator, hosts}]."""
    waiting: dict[str, dict] = {}
    for name, data in hosts.items():
        for ticket in data.get("waiting") or ():
            entry = waiting.setdefault(ticket["run_id"], {"run_id": ticket["run_id"], "operator": ticket.get("operator"),
                                                          "stamp": ticket.get("stamp") or 0, "hosts": []})
            entry["hosts"].append(name)
    return [{k: v for k, v in w.items() if k != "stamp"}
            for w in sorted(waiting.values(), key=lambda w: (w["stamp"], w["run_id"]))]


def ended_by(hosts: dict[str, dict]) -> dict[str, dict]:
    """run id -> who ended it by force, where and how (`up`/`down --force`, logged on the node)."""
    found: dict[str, dict] = {}
    for name, data in hosts.items():
        for record in data.get("ended_by") or ():
            if isinstance(record, dict) and record.get("run_id"):
                found.setdefault(record["run_id"], {**record, "host": name})
    return found
