"""Bytes the straggler watch sends per round: py-spy shipped every round vs once per node per run.

  python3 bench/pyspy_bytes.py [--nodes 100] [--rounds 10]

Counts what each round's command carries to a node (stdin + argv, as watch/sampler.py builds it)
through the real `sample_action`, the nodes answered by a stand-in that says what a node says
(`kept <sha256>` after a ship round, `tool kept ...` after a digest round). "every round" is
`clusterctl stacks`'s way (no KeptPySpy: the binary each time), as every watch round was before.
A count, not a timing: the SSH framing and the answers are left out. Prints one JSON document.
"""
from __future__ import annotations

import argparse
import json

from clusterctl.watch import sampler
from clusterctl.watch.pyspy_kept import KeptPySpy
from clusterctl.models import CommandResult, Host, Inventory


class StandInNode:
    """Answers as a node whose /tmp keeps what it is shipped; counts the bytes it is sent."""

    def __init__(self):
        self.sent = []

    def run(self, command):
        self.sent.append(len(command.stdin or b"") + sum(len(a.encode()) + 1 for a in command.argv))
        sha = command.argv[-2]
        said = f"kept {sha}" if command.argv[-1] == "ship" and sha else "tool kept py-spy"
        return CommandResult(0, f"{sampler.MARK}{said}\n")


def per_round(nodes: int, rounds: int, keep: bool) -> list[int]:
    hosts = [Host(f"node{i}", f"10.0.0.{i}") for i in range(1, nodes + 1)]
    inventory, stand_ins = Inventory("bench", tuple(hosts)), {h.name: StandInNode() for h in hosts}
    action = sampler.sample_action(inventory, "20261127-120000-abcdef", 15, 1.0, nonblocking=True,
                                   kept=KeptPySpy("bench", "20261127-120000-abcdef") if keep else None)
    for _ in range(rounds):
        for host in hosts:
            action(stand_ins[host.name], host)
    return [sum(n.sent[i] for n in stand_ins.values()) for i in range(rounds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    every, once = per_round(args.nodes, args.rounds, False), per_round(args.nodes, args.rounds, True)
    print(json.dumps({"nodes": args.nodes, "rounds": args.rounds, "gzipped_pyspy_bytes": len(sampler.payload()[0]),
                      "every_round": {"first": every[0], "later": every[-1], "total": sum(every)},
                      "once_per_run": {"first": once[0], "later": once[-1], "total": sum(once)}}, indent=1))


if __name__ == "__main__":
    main()
