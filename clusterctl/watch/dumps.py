"""The flight-recorder dumps of a failed run, read off the nodes before `run` reports (issue 39):
a collective that timed out leaves `nccl_trace_rank_<rank>` in each node's run dir (plan/torchrun.py
points torch's dump there), and the rank that did not join the collective is the first failure,
not the rank whose watchdog fired first. collect-logs and `diagnose` read the same files later
(diagnose/flight_recorder.py); this reads them at once, one round trip per node.

A dump travels as base64 on the node's stdout (the transport carries text), at most
MAX_DUMP_BYTES per file and MAX_DUMPS_PER_NODE files: the sizes a node can make us read are bounded."""
from __future__ import annotations

import base64
import binascii
from typing import Optional

from clusterctl.diagnose.flight_recorder import DUMP_NAME, MAX_DUMP_BYTES, Dump, load_dump
from clusterctl.models import Command, Inventory

MAX_DUMPS_PER_NODE = 16  # a node runs one rank per GPU: 16 covers the largest nodes
TIMEOUT_CAUSES = ("nccl_timeout_slow_rank", "rank_hang", "nccl_socket_error", "unknown")


def dumps_command(inventory: Inventory, run_dir: str) -> Command:
    """Every dump file of the node's run dir: its name on one line, its bytes (base64) on the next."""
    from clusterctl.plan import node_files

    return node_files.command(inventory, run_dir, "dumps", str(MAX_DUMPS_PER_NODE), str(MAX_DUMP_BYTES + 1),
                              timeout=60)


def parse_dumps(stdout: str, host: str) -> list[Dump]:
    """The dumps a node sent (dumps_command); a name that is not a dump's or bytes that do not decode are skipped."""
    lines = stdout.split("\n")
    dumps = []
    for name, data in zip(lines[0::2], lines[1::2]):
        match = DUMP_NAME.match(name.strip())
        if not match:
            continue
        try:
            raw = base64.b64decode(data.strip(), validate=True)
        except (binascii.Error, ValueError):
            continue
        dump = load_dump(raw, int(match.group(1)), host, f"{host}/{name.strip()}")
        if dump is not None:
            dumps.append(dump)
    return dumps


def named_by_dumps(first: dict, dumps: list[Dump]) -> Optional[dict]:
    """The first failure told again by the dumps: the rank that did not join the collective the others
    waited in, with the collective and its sequence number; None where the dumps name nobody."""
    from clusterctl.diagnose.flight_recorder import results_of

    named = [finding for stuck, finding in results_of(dumps) if stuck.missing]
    if not named:
        return None
    finding = named[0]
    return {**first, "host": finding.host or first.get("host"), "rank": finding.rank,
            "diagnosis": [finding.to_json(), *[f for f in first.get("diagnosis") or []][:4]],
            "named_by": "flight recorder"}


def worth_reading(first: dict) -> bool:
    """A failure that may be a collective timed out waiting on a rank: what the dumps can settle."""
    top = (first.get("diagnosis") or [{}])[0]
    return first.get("rank_exit_code") is None and top.get("cause") in TIMEOUT_CAUSES


def with_dumps(first: dict, inventory: Inventory, run_dirs: dict, connections) -> dict:
    """`first` as the dumps on the nodes tell it, where it is a failure they can settle; else as it is.
    `run_dirs`: {host name: (Host, its run dir)} of the nodes that still answer."""
    if not worth_reading(first) or not run_dirs:
        return first
    return named_by_dumps(first, read_off_nodes(inventory, run_dirs, connections)) or first


def read_off_nodes(inventory: Inventory, run_dirs: dict, connections) -> list[Dump]:
    from clusterctl.executor import for_each_host, run_commands

    def action(transport, host):
        return run_commands(transport, host, [dumps_command(inventory, run_dirs[host.name][1])])

    results = for_each_host([host for host, _ in run_dirs.values()], action, connections)
    return [dump for name, result in results.items() if result.succeeded for dump in parse_dumps(result.stdout, name)]
