"""An attached run's checkpoint replicas (issue 50, `job.checkpoint.replicas: N`), on the controller's side.

The copying is the nodes' (node/checkpoint_replica.py's Replicator, which a detached run's keepers host
and an attached attempt's wrapper hosts through node/node_replica.py); the controller only says what
each attempt's copier needs, in each host's `replica.json` (0600, written with the env): the run's
checkpoint spec, its keys for this attempt (one per pair of hosts, from a secret of the attempt that no
node holds: checkpoint_wire.pair_key, so a node's job signs as that node and no other), the hosts in use
and their job-network addresses, and for a relaunch the restore order. The order is the engine's own
choice (node/checkpoint_copies.choose, as a detached run's engine makes it): the newest step that every
host of the failed attempt has complete on a host of the new attempt (its own disk or a replica), read
from each host with the `checkpoints` operation (node/run_files.py, plan/node_files.checkpoints_command).
Nothing is copied through the controller.
"""
from __future__ import annotations

import json
import secrets
from typing import Mapping, Optional

from clusterctl.node.checkpoint_copies import choose
from clusterctl.node.checkpoint_wire import pair_keys
from clusterctl.node.heal_policy import checkpoint_name_ok


def wanted(inventory, detached: bool) -> bool:
    """Whether the wrapper hosts the copier: an attached run (a detached one's keepers do) with replicas."""
    spec = inventory.job.healing.checkpoint
    return bool(spec is not None and spec.replicas and inventory.job.healing.enabled and not detached)


def parse_holdings(text: str) -> dict:
    """The `checkpoints` operation's output as checkpoint_copies reads a keeper's report: {"own": [steps], "held":
    {owner: [steps]}}; a line of any other shape, or a name that is not a plain one, is passed over."""
    own, held = [], {}
    for line in text.splitlines():
        words = line.split(" ")
        if len(words) == 2 and words[0] == "own" and checkpoint_name_ok(words[1]):
            own.append(words[1])
        elif len(words) == 3 and words[0] == "held" and checkpoint_name_ok(words[1]) and checkpoint_name_ok(words[2]):
            held.setdefault(words[1], []).append(words[2])
    return {"own": own, "held": held}


def holdings(inventory, connections, hosts: list, run_id: str) -> dict:
    """{host: parse_holdings} of every host of `hosts` (Host values) that answered."""
    from clusterctl.executor import for_each_host, run_commands
    from clusterctl.plan.node_files import checkpoints_command

    command = checkpoints_command(inventory, inventory.job.healing.checkpoint.dir, run_id)
    results = for_each_host(hosts, lambda transport, host: run_commands(transport, host, [command]), connections)
    return {name: parse_holdings(r.stdout) for name, r in results.items() if r.succeeded}


def restore_order(inventory, connections, topology, run_id: str, owners: list, renderer) -> Optional[dict]:
    """The relaunch's restore order {"step", "sources": {owner: [hosts]}} over the hosts of `topology`,
    or None (no step complete across them for every one of `owners`: the attempt starts from the beginning)."""
    held = holdings(inventory, connections, [n.host for n in topology.nodes], run_id)
    step, sources = choose(held, owners, list(held))
    if step is None:
        renderer.message(f"checkpoint replicas: no step is complete across the copies on {', '.join(held) or 'any host'}"
                         f" for every host of the last attempt ({', '.join(owners)}); starting from the beginning",
                         "yellow")
        return None
    renderer.message(f"checkpoint replicas: every host restores {step} before its ranks start", "dim")
    return {"step": step, "sources": sources}


def configs(inventory, topology, run_id: str, attempt: int, order: Optional[dict],
            earlier: Mapping[str, str]) -> dict[str, bytes]:
    """Each host's replica.json for this attempt; `earlier`: {host: job-network address} of the hosts of
    the attempts before (a lost host's replicas are still served under its name)."""
    spec = inventory.job.healing.checkpoint
    secret = secrets.token_hex(32)
    addresses = {**{h: a for h, a in earlier.items() if a}, **{n.host.name: n.local_addr for n in topology.nodes}}
    base = {"run_id": run_id, "port": topology.port + 1, "attempt": attempt, "restore": order,
            "heal": {"checkpoint": {"dir": spec.dir, "complete": spec.complete, "replicas": spec.replicas,
                                    "keep": spec.keep, "bandwidth": spec.bandwidth},
                     "addresses": addresses, "active": [n.host.name for n in topology.nodes]}}
    return {n.host.name: json.dumps({**base, "host": n.host.name,
                                     "replica_keys": pair_keys(secret, n.host.name, list(addresses))}).encode()
            for n in topology.nodes}
