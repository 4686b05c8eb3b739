"""The health record where the other flows meet it (issue #36): the events they saw written
(`record_events`, `record_run_end`), and the hosts a plan may use (`plannable`).

Writing never stops the flow that saw the events: a record that cannot be written (locked, from a
newer clusterctl, damaged) comes back as a sentence for the caller to say, and nothing recorded is
lost. Planning reads the record only where one exists (a first `run --plan` creates no file)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Optional, Sequence

from clusterctl.errors import ClusterctlError, StateError
from clusterctl.health.events import JOB, Event, GpuId
from clusterctl.models import Inventory


def record_events(db_path: Path, inventory: Inventory, events: Sequence[Event],
                  gpus: Optional[Mapping[str, Sequence[GpuId]]] = None, once: bool = False,
                  all_gpus: bool = True) -> Optional[str]:
    """Keep `events` (and the GPUs each host reports now); None, or why the record was not updated.
    `once`: events the record already has for their run are not kept again; not `all_gpus` (the
    preflight's view, a container's): no GPU is taken for gone because `gpus` lacks it."""
    from clusterctl.health.record import HealthRecord

    if not events and not gpus:
        return None
    try:
        with HealthRecord.open(db_path, inventory.name, inventory.health) as record:
            for host, ids in (gpus or {}).items():
                if ids:
                    record.observe_gpus(host, list(ids), complete=all_gpus)
            if events:
                record.record(*events, once=once)
    except ClusterctlError as error:
        return f"the health record was not updated ({error.args[0] if error.args else error}); {len(events)} event(s) lost"
    return None


def job_side(events: Sequence[Event], hosts: Optional[Sequence[str]]) -> list[Event]:
    """Events a detached run's own side reported (its supervisor's document, its keepers' samples: what
    the job can write): kept for the run's hosts only (`hosts`, from the controller's own record of the
    run, never from those documents) and marked JOB, which alone never quarantines (rules.py). `hosts`
    None: the controller's own evidence (an attached run), as it is."""
    if hosts is None:
        return list(events)
    return [replace(event, source=JOB) for event in events if event.host in hosts]


def run_hosts(record: Mapping) -> list[str]:
    """The hosts of a run as the controller planned it (its record's topology, written at the launch, and
    the hosts it kept, spares included)."""
    hosts = [str(n.get("host")) for n in record.get("topology") or [] if isinstance(n, dict) and n.get("host")]
    hosts += [str(h.get("name")) for h in record.get("hosts") or [] if isinstance(h, dict) and h.get("name")]
    return list(dict.fromkeys(hosts))


def record_run_end(store, inventory: Inventory, record: Mapping, hosts: Optional[Sequence[str]] = None) -> Optional[str]:
    """The one place a run's end reaches the health record (attached: backends/run_flow.py; detached:
    supervision.refresh_record, once the supervisor's state is final, with the run's `hosts`: job_side).
    `store`: the State."""
    from clusterctl.health.seen import run_events

    return record_events(store.health_db, inventory, job_side(run_events(record), hosts))


def record_stragglers(store, inventory: Inventory, run_id: str, found: Sequence[Mapping],
                      hosts: Optional[Sequence[str]] = None) -> Optional[str]:
    """Each rank named late during a run (attached: backends/run_flow.py; detached: at its end, as
    supervision.refresh_record learns it, job_side): a `straggler` event of its node (its GPU, where known)."""
    return record_events(store.health_db, inventory, job_side([
        Event(str(s["host"]), "straggler", "straggler", f"rank {s['rank']}: {s['evidence']}",
              gpu=GpuId(index=s["gpu"]) if s.get("gpu") is not None else None, run_id=run_id) for s in found], hosts))


def record_checks(store, inventory: Inventory, checks: Sequence[Mapping], source: str,
                  gpus: Optional[Mapping[str, Sequence]] = None) -> Optional[str]:
    """Preflight verdicts (`up`, `check`): CheckResult.to_json() documents; `gpus`: the GPUs each
    node reported ({host: preflight facts.Gpu}), kept by UUID where the node gives one."""
    from clusterctl.health.seen import check_events

    seen = {host: [GpuId(index=g.index, uuid=g.uuid) for g in found if g.uuid] for host, found in (gpus or {}).items()}
    return record_events(store.health_db, inventory, check_events(checks, source, [h.name for h in inventory.hosts]),
                         {host: ids for host, ids in seen.items() if ids}, all_gpus=False)


@dataclass(frozen=True)
class Plannable:
    """The inventory a plan may use, and the hosts left out of it with why ({host: reason})."""

    inventory: Inventory
    left_out: Mapping[str, str]
    unread: str = ""  # why the record could not be read (then every host is planned)
    included: Mapping[str, str] = field(default_factory=dict)  # quarantined, planned by --include-quarantined

    def note(self) -> str:
        """The one line a command says when it left hosts out, planned quarantined ones because the
        operator said so, or could not read the record ("" when there is nothing to say)."""
        if self.unread:
            return f"health: {self.unread}; planning every host"
        if self.included:
            hosts = ", ".join(f"{host} ({reason})" for host, reason in self.included.items())
            return f"health: planning quarantined {hosts} as --include-quarantined asks"
        if not self.left_out:
            return ""
        hosts = ", ".join(f"{host} ({reason})" for host, reason in self.left_out.items())
        return (f"health: leaving out quarantined {hosts}; --include-quarantined to use them, or "
                f"`clusterctl health check HOST` then `clusterctl health release HOST`")


def plannable(db_path: Path, inventory: Inventory, include_quarantined: bool = False) -> Plannable:
    """`inventory` without its quarantined hosts. Refused (StateError naming each node, its reason
    and the fix) where too few are left: none, or fewer than the job's `nodes` where it sets one."""
    if not inventory.hosts or not Path(db_path).exists():
        return Plannable(inventory, {})
    try:
        quarantined = states_of(db_path, inventory)
    except ClusterctlError as error:  # a damaged or newer record stops no run: said, and left as it is
        return Plannable(inventory, {}, f"the health record could not be read ({error.args[0] if error.args else error})")
    if not quarantined or include_quarantined:
        return Plannable(inventory, {}, included=quarantined if include_quarantined else {})
    kept = [h.name for h in inventory.hosts if h.name not in quarantined]
    wanted = inventory.job.healing.nodes or 1
    if len(kept) < wanted:
        first = next(iter(quarantined))
        named = "; ".join(f"{host}: {reason}" for host, reason in quarantined.items())
        raise StateError(f"too few healthy nodes: {len(kept)} left of {len(inventory.hosts)}, the job needs "
                         f"{wanted}; quarantined {named}", where=", ".join(quarantined),
                         fix=f"repair it, then `clusterctl health check {first}` and `clusterctl health release "
                             f"{first}`; or --include-quarantined if you know better")
    return Plannable(_without(inventory, kept), quarantined)


def states_of(db_path: Path, inventory: Inventory) -> dict[str, str]:
    """{host: reason} of the inventory's quarantined hosts."""
    from clusterctl.health.record import HealthRecord

    with HealthRecord.open(db_path, inventory.name, inventory.health) as record:
        found = record.quarantined([h.name for h in inventory.hosts])
    return {h.name: found[h.name] for h in inventory.hosts if h.name in found}


def suspect_hosts(db_path: Path, inventory: Inventory) -> frozenset:
    """The inventory's hosts the record calls suspect (issue 48: chosen last where spares exist); none
    without a record or where it cannot be read (a damaged record stops no run)."""
    from clusterctl.health.record import HealthRecord
    from clusterctl.health.rules import SUSPECT

    if not Path(db_path).exists():
        return frozenset()
    try:
        with HealthRecord.open(db_path, inventory.name, inventory.health) as record:
            return frozenset(n.host for n in record.states([h.name for h in inventory.hosts]) if n.state == SUSPECT)
    except ClusterctlError:
        return frozenset()


def quarantined_nodes(db_path: Path, inventory: Inventory) -> dict[str, str]:
    """{host: reason} of every host of this cluster the record calls quarantined, listed in the
    inventory or not (a Slurm allocation's nodes); {} without a record or where it cannot be read."""
    from clusterctl.health.record import HealthRecord

    if not Path(db_path).exists():
        return {}
    try:
        with HealthRecord.open(db_path, inventory.name, inventory.health) as record:
            return record.quarantined()
    except ClusterctlError:  # said where plans read it (plannable); a refused allocation helps no one
        return {}


def _without(inventory: Inventory, kept: list[str]) -> Inventory:
    limited = inventory.limited(kept)
    hosts = tuple(h for h in inventory.hosts if h.name in kept)  # by name only: a group names no host here
    return replace(limited, hosts=hosts)


def judged(store, inventory: Inventory, checks: Sequence[Mapping], source: str,
           gpus: Optional[Mapping[str, Sequence]] = None) -> tuple[Optional[str], list[dict]]:
    """`check`: its verdicts recorded, then each host's state as the record now has it
    (NodeHealth.to_json() without events): (why the record was not updated, or None; the states)."""
    from clusterctl.health.record import HealthRecord

    note = record_checks(store, inventory, checks, source, gpus)
    try:
        with HealthRecord.open(store.health_db, inventory.name, inventory.health) as record:
            nodes = record.states([h.name for h in inventory.hosts])
    except ClusterctlError as error:
        return note or f"the health record could not be read ({error.args[0] if error.args else error})", []
    names = {h.name for h in inventory.hosts}
    return note, [{k: v for k, v in n.to_json().items() if k != "events"} for n in nodes if n.host in names]


def partner_for(db_path: Path, inventory: Inventory, host: str) -> Optional[str]:
    """A node of the inventory other than `host` that the record calls healthy (the first), or None."""
    from clusterctl.health.record import HealthRecord
    from clusterctl.health.rules import HEALTHY

    others = [h.name for h in inventory.hosts if h.name != host]
    if not others:
        return None
    with HealthRecord.open(db_path, inventory.name, inventory.health) as record:
        healthy = {node.host for node in record.states(others) if node.state == HEALTHY}
    return next((name for name in others if name in healthy), None)
