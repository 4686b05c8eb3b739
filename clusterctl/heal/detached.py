"""What a detached run that heals itself hands the cluster (issue 35), and what its record learns back.

At hand-over the controller decides all it can: the cause -> response table (ground/healing.py's, with
the inventory's `job.heal`), `restarts`, `min_nodes`, the backoff, the hosts in use and the spares,
each host's ranks and job-network address (a plan of every host of the fleet), `job.checkpoint`, and
each host's launch TEMPLATE: its launcher's argv and environment as this run's runner makes them
(plan/launch_plan.py: torchrun, mpirun, deepspeed or none), with tokens (the nonce is per run, so no
prompt meets one by chance) for what a relaunch changes. The engine on the master node (node/engine.py)
decides; the keepers (node/node_healing.py) fill the tokens in and launch.

Back on the controller (`status`, `attach`, `stop`), `attempts_of` turns the supervisor's attempts
into the record's `attempts` (the same shape as an attached run's) and `remember_excluded` keeps
every host left out in the fleet's health record.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import Mapping, Optional

from clusterctl.plan import leasing, wrapper as agent
from clusterctl.node.heal_policy import BACKOFF_S, TABLE
from clusterctl.plan.launcher import shaped
from clusterctl.plan.launch_plan import template
from clusterctl.plan.topology import plan
from clusterctl.models import Host, Inventory
from clusterctl.plan.marker import marker_env


@dataclass(frozen=True)
class DetachedHealing:
    """The "heal" part of each node's supervision.json: `rules` shared by all, each host's own
    `templates` entry (its environment holds the job's secrets: only that host's file gets it)."""

    rules: Mapping
    templates: Mapping[str, Mapping]
    spares: tuple[Host, ...]

    def config_for(self, host: str) -> dict:
        return {**self.rules, **self.templates[host]}

    def record(self) -> dict:
        """What the local run record keeps: every host of the fleet (`stop` ends the keepers of the spares too)."""
        return {"fleet": [*self.rules["active"], *self.rules["spares"]], "restarts": self.rules["restarts"]}


def plan_healing(inventory: Inventory, active: list, spares: list, facts: Mapping, run_id: str, prompt: str,
                 strict: bool = False, backoff_s: tuple = BACKOFF_S) -> DetachedHealing:
    """The hand-over of a run on `active` (the first is the master) with `spares`, from every host's facts."""
    from clusterctl.plan.metrics_sampler import sampler_args

    healing = inventory.job.healing
    fleet = replace(inventory, hosts=tuple(active) + tuple(spares),
                    job=replace(inventory.job, world_size_divides=None))  # checked on each replan instead
    topology = shaped(inventory, plan(fleet, facts, strict=strict))
    token = secrets.token_hex(6)
    templates = {node.host.name: _templates(inventory, topology, node, run_id, prompt, token) for node in topology.nodes}
    rules = {"token": token, "table": {**TABLE, **dict(healing.heal)}, "restarts": healing.restarts,
             "min_nodes": healing.min_nodes, "world_size_divides": inventory.job.world_size_divides,
             "backoff_s": list(backoff_s), "active": [h.name for h in active], "spares": [h.name for h in spares],
             "nproc": {n.host.name: n.nproc for n in topology.nodes},
             "addresses": {n.host.name: n.local_addr for n in topology.nodes},
             "gpus": {n.host.name: list(n.gpu_ids) if n.gpu_ids else None for n in topology.nodes},
             "checkpoint": {"dir": healing.checkpoint.dir, "complete": healing.checkpoint.complete,
                            "replicas": healing.checkpoint.replicas, "keep": healing.checkpoint.keep,
                            "bandwidth": healing.checkpoint.bandwidth} if healing.checkpoint else None,
             "wrapper": agent.WRAPPER, "workdir": inventory.job.workdir or "",
             "sampler_args": list(sampler_args(inventory)),  # the wrapper's metrics sampler (agent.start_command)
             "marker_names": [name for name, _ in marker_env("", "", "")],
             # a spare joining takes its GPU leases before it launches (node_healing.launch, issue 48)
             "lease": {"operator": leasing.operator(), "window_s": leasing.window_s(inventory)}}
    return DetachedHealing(rules, templates, tuple(spares))


def _templates(inventory: Inventory, topology, node, run_id: str, prompt: str, token: str) -> dict:
    """`node`'s launch as a non-master ("template") and, where its launcher starts otherwise there
    (mpirun), as the master ("template_master")."""
    worker = template(inventory, topology, node, run_id, prompt, token, as_master=False)
    master = template(inventory, topology, node, run_id, prompt, token, as_master=True)
    return {"template": worker, **({"template_master": master} if master != worker else {})}


def attempts_of(state: dict, last_failure: Optional[dict] = None) -> Optional[list]:
    """The record's `attempts` from the supervisor's state (None: not a run that heals itself); the
    last attempt's first failure is the controller's own diagnosis where it has one."""
    attempts = state.get("attempts")
    if not isinstance(attempts, list):
        return None
    entries = [_with_fixes(a) for a in attempts if isinstance(a, dict)]
    if entries and last_failure is not None and state.get("final"):
        entries[-1]["first_failure"] = last_failure
    if entries and state.get("final") and entries[-1].get("exit_code") is None and state.get("state") != "stopped":
        entries[-1]["exit_code"] = 0 if state.get("state") == "succeeded" else 1
    return entries


def _with_fixes(attempt: dict) -> dict:
    """An attempt the supervisor recorded: the node side names each cause; its fix is the diagnosis'
    one-line fix of that cause (diagnose/fixes.py), which the node side does not carry."""
    from clusterctl.diagnose.fixes import BRIEF

    first = attempt.get("first_failure")
    if not isinstance(first, dict) or not isinstance(first.get("diagnosis"), list):
        return dict(attempt)
    diagnosis = [{**d, "fix": d.get("fix") or BRIEF.get(str(d.get("cause")), "read the node's log (clusterctl logs)")}
                 for d in first["diagnosis"] if isinstance(d, dict)]
    return {**attempt, "first_failure": {**first, "diagnosis": diagnosis}}


def remember_excluded(store, inventory: Inventory, run_id: str, attempts: list, hosts: list) -> Optional[str]:
    """Every host of the run (`hosts`: the controller's record of it) the run left out, a `heal_excluded`
    event of the fleet's health record, job-side: the supervisor's document says so (health/fleet.job_side)."""
    from clusterctl.health.events import Event
    from clusterctl.health.fleet import job_side, record_events

    events = [Event(str(e["host"]), "heal_excluded", "heal", evidence=f"left out of run {run_id}: {e['cause']}",
                    cause=str(e["cause"]), run_id=run_id) for a in attempts for e in a.get("excluded") or []
              if isinstance(e, dict) and e.get("host")]
    events = job_side(events, hosts)
    return record_events(store.health_db, inventory, events) if events else None

