"""Hand a running job over to the cluster (node/node_agent.py), and read back what became of it.

`establish` copies node_agent.py, the run's engine (engine.py, heal_policy.py), layout.py and a per-run
`supervision.json` (0600: it holds the run's key) into every node's run dir, starts the supervisor on the master node and a keeper on every node
(detached, marked like the ranks), and waits until the supervisor has heard every node: from then
on the leases are held on the cluster, and the controller may go (`run --detach`, a hang-up).
`read_state` reads the supervisor's `supervisor.json` from the master node; `record_from_state`
turns a final one into the local run record's end, diagnosis included (watch/failures.py).
"""
from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Callable, Optional

from clusterctl.documents import parts
from clusterctl.documents.convert import as_document
from clusterctl.executor import Connections, for_each_host, run_commands, ticks
from clusterctl.health import fleet as health
from clusterctl.plan import node_files, wrapper as agent
from clusterctl.watch import detached_health
from clusterctl.heal import detached as detached_healing
from clusterctl.plan.container import in_container
from clusterctl.ground.masking import masker  # noqa: F401  (supervision.masker)
from clusterctl.models import Command, Host, HostResult, HostStatus, Inventory
from clusterctl.ground.records import RunStore
from clusterctl.ground.run_record import RunRecord, recorded_end
from clusterctl.modules import process
from clusterctl.node import program

PORT_OFFSET = 1  # the supervisor listens on rendezvous.port + 1, on the rendezvous address
ESTABLISH_S = 30.0
_SCRIPT = program("node_agent.py")
_HEALTH_SCRIPT = program("node_health.py")  # the keeper's passive health watch (issue 36)
_HEALING = program("node_healing.py")
# the run's engine, which the supervisor hosts (node/engine.py, the heal it calls and the straggler verdict),
# the run's paths (node/layout.py), the no-follow layer (node/safe_files.py) every node program touches a run's
# files through, what a node's silence is measured by (node/rank_output.py), the supervisor's listener
# (node/listener.py), the GPU leases (node/leases.py: a keeper releases its run's leases) and a keeper's checkpoint replicas (issue 50), which node_agent.py imports as
# files beside it
BESIDE_AGENT = tuple(program(name) for name in ("engine.py", "heal_policy.py", "straggler_verdict.py", "waits_verdict.py", "layout.py",
                                                "rank_output.py", "safe_files.py", "listener.py", "leases.py",
                                                "checkpoint_replica.py", "checkpoint_wire.py", "checkpoint_copies.py"))
# the keeper's straggler watch (py-spy on its node's ranks), its flight-recorder rounds (NCCL), both finding the
# node's ranks in /proc, and the names of a GPU's throttle reasons the rounds read in the sampler's metrics
BESIDE_WATCH = tuple(program(name) for name in ("node_stragglers.py", "collective_waits.py", "rank_procs.py",
                                                "node_metrics.py"))


# $1 dir, $2 role, $3 python, then the marker env: the role's process, detached from this session,
# its output in $1/<role>.log
_START = r'''dir=$1 role=$2 py=$3; shift 3
exec </dev/null >>"$dir/$role.log" 2>&1
exec env "$@" "$py" "$dir/node_agent.py" "$role" "$dir"'''


@dataclass(frozen=True)
class Supervised:
    """Where a run's supervisor listens; recorded in the run record as "supervisor"."""
    host: str
    address: str
    port: int
    run_dir: str

    def to_json(self) -> dict:
        return as_document(parts.Supervisor, self)


def supervisor_of(record: dict) -> Optional[Supervised]:
    found = record.get("supervisor")
    if not isinstance(found, dict):
        return None
    try:
        return Supervised(str(found["host"]), str(found["address"]), int(found["port"]), str(found["run_dir"]))
    except (KeyError, TypeError, ValueError):
        return None


def put_private(inventory: Inventory, run_dir: str, name: str, data: bytes) -> Command:
    """stdin into a file only its owner reads (the key), in the node's run dir proven ours (node/run_files.py)."""
    return node_files.command(inventory, run_dir, "put-private", name, stdin=data, in_container_only=True)


def put_privates(inventory: Inventory, run_dir: str, files: list[tuple[str, bytes]]) -> Command:
    """put_private for each (name, bytes) of `files`, in one start on the node (issue 52: one `docker exec`
    and one `python3` in a container, not one per file)."""
    sizes = [str(part) for name, data in files for part in (name, len(data))]
    return node_files.command(inventory, run_dir, "put-private", *sizes, stdin=b"".join(data for _, data in files),
                              in_container_only=True)


def _start(inventory: Inventory, run_dir: str, role: str, marker: tuple[tuple[str, str], ...]) -> Command:
    argv = ("sh", "-c", _START, f"clusterctl-{role}", run_dir, role, inventory.job.python,
            *(f"{k}={v}" for k, v in marker))
    return Command(in_container(inventory, argv, detach=True) if inventory.uses_container else ("setsid", "-f", *argv),
                   timeout=60)


GONE_AFTER_S = 10.0  # the supervisor rewrites its state twice a second while it runs


def read_state_command(inventory: Inventory, run_dir: str) -> Command:
    from clusterctl.node.node_agent import STATE

    # a first line "<now> <the file's mtime>" (the node's clock: a supervisor that stopped writing is a
    # supervisor gone), then the file, read through the no-follow layer (node/run_files.py `state`)
    return node_files.command(inventory, run_dir, "state", STATE, timeout=20)


def parse_state(stdout: str) -> Optional[dict]:
    """The supervisor's state as read by read_state_command, with "age_s" (seconds since it was written)
    and "gone" (not final, and not written for GONE_AFTER_S: its supervisor ended without finishing)."""
    first, _, rest = stdout.partition("\n")
    try:
        now, written = (int(x) for x in first.split())
        document = json.loads(rest)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    age = max(0, now - written)
    return {**document, "age_s": age, "gone": not document.get("final") and age > GONE_AFTER_S}


def establish(inventory: Inventory, run_id: str, master: str, address: str, port: int,
              run_dirs: dict[str, str], hosts: dict[str, Host], connections: Connections,
              stall_timeout_s: float = 0.0, timeout_s: Optional[float] = None, lease_s: int = agent.LEASE_S,
              wait_s: float = ESTABLISH_S, since: Optional[float] = None, heal=None,
              files: Optional[dict[str, bytes]] = None, stragglers: bool = False) -> tuple[Optional[Supervised], dict]:
    """Start the supervisor and the keepers; (where it listens, {} ) once every node was heard, else
    (None, {host: HostResult}) naming what failed (the caller stops the run). `stall_timeout_s`: the
    supervisor reports the run stalled after that long without output from any rank (0: never);
    `timeout_s` (`run --timeout`, from the supervisor's start): the run is stopped past it; `since`:
    the run's start (unix time), from which the keepers' health watch reads the kernel log. `heal`
    (heal/detached.DetachedHealing): the run heals itself; its spares get a keeper too, and the
    run's shipped `files` (the launcher's own node programs: mpirun's gate) for the attempt they join.
    `stragglers`: each keeper samples its node's ranks with py-spy (node/node_stragglers.py; the binary the
    attached watch ships, gzipped, once per node) and the supervisor names the rank the others wait for."""
    from clusterctl.node.checkpoint_wire import pair_keys
    from clusterctl.node.node_agent import CONFIG, keeper_key
    from clusterctl.plan.shipping import stage_commands
    from clusterctl.node.layout import files_dir, node_run_dir

    key = secrets.token_hex(32)
    script = _SCRIPT.read_bytes()
    health_script = _HEALTH_SCRIPT.read_bytes()
    spares = {h.name: h for h in heal.spares} if heal else {}
    hosts = {**hosts, **spares}
    run_dirs = {**run_dirs, **{name: node_run_dir(inventory.job.outputs, run_id, name) for name in spares}}
    supervised = Supervised(master, address, port + PORT_OFFSET, run_dirs[master])
    base = {"run_id": run_id, "address": address, "port": supervised.port, "lease_s": lease_s,
            "lost_after_s": inventory.job.healing.lost_after, "hosts": list(run_dirs),
            "stall_timeout_s": stall_timeout_s, "timeout_s": timeout_s or 0, "since": since or time.time()}
    packed = b""
    if stragglers:
        from clusterctl.watch.sampler import payload

        packed, arch, sha = payload()
        base["stragglers"] = {"arch": arch, "sha": sha}
    watch = [(path.name, path.read_bytes()) for path in BESIDE_WATCH] + ([("py-spy.gz", packed)] if packed else []) \
        if stragglers else []

    replicas = bool(heal and ((heal.rules.get("checkpoint") or {}).get("replicas")))

    def action(transport, host: Host) -> HostResult:
        run_dir = run_dirs[host.name]
        marker = process.marker_env(inventory.name, host.name, run_id)
        own = {"key": keeper_key(key, host.name), **({"supervisor_key": key} if host.name == master else {}),
               **({"replica_keys": pair_keys(key, host.name, run_dirs)} if replicas else {})}
        config = json.dumps({**base, **own, "host": host.name, **({"heal": heal.config_for(host.name)} if heal else {})})
        spare = stage_commands(inventory, run_dir, (), files_dir(inventory.job.outputs, run_id),
                               files or {}) if host.name in spares else []
        commands = [*spare, put_privates(inventory, run_dir, [
            ("node_agent.py", script), ("node_health.py", health_script),
            *((path.name, path.read_bytes()) for path in BESIDE_AGENT),
            *([("node_healing.py", _HEALING.read_bytes())] if heal else []), *watch, (CONFIG, config.encode())])]
        if host.name == master:
            commands.append(_start(inventory, run_dir, "supervise", marker))
        commands.append(_start(inventory, run_dir, "keep", marker))
        return run_commands(transport, host, commands)

    started = for_each_host([hosts[name] for name in run_dirs], action, connections)
    failed = {name: r for name, r in started.items() if not r.succeeded}
    if failed:
        return None, failed
    state: dict = {}
    for _left in ticks(wait_s, 0.5):
        state = read_state(inventory, supervised, hosts[master], connections) or {}
        if state.get("final") and state.get("state") == "failed" and not state.get("nodes"):
            break  # it could not listen (the reason says why)
        nodes = state.get("nodes") or {}
        if nodes and all((nodes.get(n) or {}).get("seen_s_ago") is not None for n in run_dirs):
            return supervised, {}
    nodes = state.get("nodes") or {}
    unheard = [n for n in run_dirs if (nodes.get(n) or {}).get("seen_s_ago") is None]
    why = state.get("reason") or (f"the supervisor on {master} ({address}:{supervised.port}) did not hear from "
                                  f"{', '.join(unheard) or 'any node'} within {wait_s:.0f}s")
    return None, {name: HostResult(name, HostStatus.FAILED, why) for name in (unheard or [master])}


def read_state(inventory: Inventory, supervised: Supervised, master: Host, connections: Connections) -> Optional[dict]:
    """The supervisor's supervisor.json, or None where it cannot be read (not yet written, node down)."""
    result = for_each_host([master], lambda t, h: run_commands(t, h, [read_state_command(inventory, supervised.run_dir)]),
                           connections)[master.name]
    return parse_state(result.stdout) if result.succeeded else None


def await_ranks(inventory: Inventory, supervised: Supervised, master: Host, connections: Connections,
                nproc: dict[str, int], timeout_s: float, on_wait: Callable[[dict], None] = lambda state: None
                ) -> dict:
    """Wait until every node reports all its ranks started, or the run ended; the last state read."""
    state: dict = {}
    for _left in ticks(timeout_s, 1.0):
        state = read_state(inventory, supervised, master, connections) or state
        nodes = state.get("nodes") or {}
        if state.get("state") not in (None, "running"):
            return state
        if nodes and all((nodes.get(h) or {}).get("ranks", 0) >= n for h, n in nproc.items()):
            return state
        on_wait(state)
    return state


def outcome_of(state: dict, inventory: Inventory, mask: Callable[[str], str] = lambda t: t,
               first_ranks: Optional[dict] = None) -> tuple[int, Optional[dict]]:
    """(exit code, first failure) of a run from its supervisor's state; `first_ranks`: each host's
    first global rank in the plan (watch/failures.first_ranks_of)."""
    from clusterctl.watch.failures import Ended, first_failure

    if state.get("state") == "succeeded":
        return 0, None
    if state.get("timed_out"):
        return 1, {"host": None, "rank": None, "diagnosis": [{
            "cause": "unknown", "host": None, "rank": None, "evidence": str(state.get("reason")),
            "fix": "raise --timeout, or look at `clusterctl logs` for the rank that stopped progressing"}]}
    failures = [f for f in state.get("failures") or [] if isinstance(f, dict) and f.get("host")]
    if state.get("state") != "failed" or not failures:
        return 1, None
    ended = [Ended(str(f["host"]), float(f.get("at") or 0), bool(f.get("lost")), f.get("exit_code"),
                   mask(str(f.get("tail") or ""))) for f in failures]
    return 1, first_failure(inventory, ended, poll_s=1.0, lost_after_s=inventory.job.healing.lost_after,
                             first_ranks=first_ranks)


def finish_record(record: dict, state: dict, inventory: Inventory, mask: Callable[[str], str] = lambda t: t) -> dict:
    """The local run record once the supervisor's state is final: its end, its exit code and what failed."""
    from clusterctl.watch.failures import first_ranks_of
    from clusterctl.node.layout import node_run_dir

    code, first = outcome_of(state, inventory, mask, first_ranks_of(record.get("topology")))
    nodes = state.get("nodes") or {}
    run_dirs = record.get("nodes") if isinstance(record.get("nodes"), dict) else {}
    done = {**record, "ended": state.get("ended") or time.time(), "exit_code": code, "first_failure": first,
            "state": recorded_end(state.get("state")).value,
            "nodes": {h: {"exit_code": n.get("exit_code"), "lost": n.get("lost"),
                          # a spare that joined a run that healed itself: the run dir establish gave it
                          "run_dir": (run_dirs.get(h) or {}).get("run_dir")
                          or node_run_dir(inventory.job.outputs, record.get("run_id") or "", h)} for h, n in nodes.items()},
            "supervisor_reason": state.get("reason")}
    if state.get("stragglers"):
        done["stragglers"] = state["stragglers"]
    if state.get("state") == "stopped":
        done["stopped"] = True
    if record.get("started") and state.get("ended"):
        done["duration_s"] = round(float(state["ended"]) - float(record["started"]), 3)
    return done


def refresh_record(store, inventory: Inventory, connections: Connections, run_id: str, record: dict,
                   mask: Callable[[str], str] = lambda t: t) -> dict:
    """A detached run's record brought up to date from its supervisor: once the supervisor's state is
    final, the record gets the run's end (written to `store`, so this is asked once). A record of
    another kind, or a supervisor that cannot be read, is returned as it is."""
    supervised = supervisor_of(record)
    master = next((h for h in inventory.hosts if supervised and h.name == supervised.host), None)
    if record.get("state") != "running" or supervised is None or master is None:
        return record
    state = read_state(inventory, supervised, master, connections)
    if state is None:
        return record
    hosts = health.run_hosts(record)  # the controller's own list: the supervisor's document is the job's side
    detached_health.record_samples(store, inventory, run_id, state, hosts)  # issue 36: the keepers' health samples
    if state.get("gone"):
        return {**record, "supervisor_gone": True}
    attempts = detached_healing.attempts_of(state)  # a run that heals itself: its attempts so far
    if not state.get("final"):
        found = state.get("stragglers") or []  # the supervisor's straggler watch, shaped as the attached one's
        if state.get("stalled_s") != record.get("stalled_s") or (attempts and attempts != record.get("attempts")) \
                or (found and found != record.get("stragglers")):
            record = {**record, "stalled_s": state.get("stalled_s"), **({"attempts": attempts} if attempts else {}),
                      **({"stragglers": found} if found else {})}
            RunStore(store).write(RunRecord.from_json(record, run_id))
        return record
    done = finish_record(record, state, inventory, mask)
    if isinstance(done.get("first_failure"), dict):  # a collective timeout: the dumps name who did not join
        from clusterctl.watch.dumps import with_dumps

        nodes = done.get("nodes") or {}
        answering = {h.name: (h, nodes[h.name]["run_dir"]) for h in inventory.hosts
                     if isinstance(nodes.get(h.name), dict) and nodes[h.name].get("run_dir") and not nodes[h.name].get("lost")}
        done["first_failure"] = with_dumps(done["first_failure"], inventory, answering, connections)
    if attempts is not None:
        done.update(attempts=detached_healing.attempts_of(state, done.get("first_failure")),
                    **({"heal_refused": state["heal_refused"]} if state.get("heal_refused") else {}))
        detached_healing.remember_excluded(store, inventory, run_id, done["attempts"], hosts)
    RunStore(store).write(RunRecord.from_json(done, run_id))
    health.record_run_end(store, inventory, done, hosts)  # issue 36: the run's lost and blamed nodes, job-side
    health.record_stragglers(store, inventory, run_id, done.get("stragglers") or [], hosts)  # the supervisor's
    from clusterctl.observe.notify_hooks import ended_detached

    ended_detached(store, inventory, done)  # issue 41: the end's notification, as the controller learns it
    return done


def refresh_running(store, inventory: Inventory, connections: Connections,
                    mask: Callable[[str], str] = lambda t: t, limit: int = 20) -> None:
    """refresh_record for this cluster's detached runs among the latest `limit` records (`status`)."""
    for record in RunStore(store).list(limit):
        if record.detached and record.cluster == inventory.name:
            refresh_record(store, inventory, connections, record.run_id, record.to_json(), mask)
