"""The straggler watch's evidence over NCCL: flight-recorder rounds (node/collective_waits.py), attached.

Every WAITS_ROUND_S (waits_verdict), one `collective-waits` operation per running node
(plan/node_files.py), in the background: each rank's dump since the last round is read on its node (its
collectives' GPU time over its latest WINDOW_S) and the next dump asked for. The shares of one round go to the
nodes' verdict (waits_verdict.judge_waits); a rank it names WAITS_ROUNDS rounds in a row is the straggler,
and it keeps pace again once WAITS_ROUNDS rounds in a row do not name it. Jobs without NCCL (gloo) or without
a torch that has the dump pipe make no FIFO: the rounds find nothing, come further apart
(verdict.waits_pause_s, every 2 minutes at most: never stopping, since a process group made after a long preparation
makes its FIFO late); the py-spy samples (watch/straggler_watch.py) go on either way.
"""
from __future__ import annotations

import json
import time
from typing import Optional

from clusterctl.executor import Background, Connections, run_commands
from clusterctl.models import Host, Inventory
from clusterctl.node import waits_verdict as verdict
from clusterctl.node.layout import node_run_dir
from clusterctl.plan import node_files
from clusterctl.plan.marker import marker_env

FIRST_AFTER_S = verdict.WAITS_FIRST_AFTER_S  # the keepers' pace too (detached)
MAX_LINES = 512  # JSON lines read back from one node (a rank each)
UNREAD_ROUNDS = 3  # a rank's rounds in a row without figures before the watch says so (the first has no dump yet)


class CollectiveWatch:
    def __init__(self, inventory: Inventory, run_id: str, connections: Connections):
        self.inventory, self.run_id, self.connections = inventory, run_id, connections
        self.enabled = bool(inventory.job.outputs)  # the run dir holds the FIFOs: no outputs, no dumps
        self.judged = verdict.WaitsRounds()  # the latest rounds' verdicts (the supervisor's rule too)
        self.problems: dict = {}  # (host, rank) -> (why its latest rounds said nothing, how many rounds in a row)
        self._round: Optional[Background] = None
        self._next_at = time.monotonic() + FIRST_AFTER_S
        self._idle = 0

    def check(self, hosts: list[Host]) -> bool:
        """Called on every poll with the hosts whose ranks still run: True when a round was judged."""
        if not self.enabled:
            return False
        if self._round is None:
            if hosts and time.monotonic() >= self._next_at:
                self._round = Background(hosts, self._action, self.connections)
            return False
        if not self._round.wait(0):
            return False
        results, self._round = self._round.results, None
        measured, fifos = {}, 0
        for host, result in results.items():
            for line in parse_round(result.stdout if result.succeeded else ""):
                fifos += 1
                key = (host, line["rank"])
                if "wait_s" in line:
                    measured[key] = verdict.measured_figures(line)
                    self.problems.pop(key, None)
                else:
                    self.problems[key] = (line.get("problem", ""), self.problems.get(key, ("", 0))[1] + 1)
        self._scheduled(fifos)
        self.judged.add(measured)
        return True

    def _scheduled(self, fifos: int) -> None:
        """The next round after one that found `fifos` FIFOs: WAITS_ROUND_S on, backing off while none is found
        (verdict.waits_pause_s)."""
        self._idle = 0 if fifos else self._idle + 1
        self._next_at = time.monotonic() + verdict.waits_pause_s(self._idle)

    def _action(self, transport, host: Host):
        run_dir = node_run_dir(self.inventory.job.outputs, self.run_id, host.name)
        marker = [f"{key}={value}" for key, value in marker_env(self.inventory.name, host.name, self.run_id)]
        return run_commands(transport, host, [node_files.command(self.inventory, run_dir, "collective-waits", *marker,
                                                                 timeout=30)])

    def found(self) -> Optional[verdict.WaitsVerdict]:
        """The rank the latest WAITS_ROUNDS rounds all named (the nodes' rule, as the supervisor's), else None."""
        return self.judged.named()

    def unread(self) -> str:
        """`g1 r1: dump not readable (...)`: a rank whose FIFO answers but whose dumps said nothing for UNREAD_ROUNDS
        rounds in a row (a truncated or refused dump, no timing), the first one; "" when none."""
        for (host, rank), (why, rounds) in sorted(self.problems.items(), key=lambda item: (item[0][0], item[0][1])):
            if rounds >= UNREAD_ROUNDS:
                return f"{host} r{rank}: {why}"
        return ""

    def recovered(self, host: str, rank: int) -> bool:
        """The latest WAITS_ROUNDS rounds named someone else or nobody (the nodes' rule)."""
        return self.judged.let_go(host, rank)


def parse_round(stdout: str) -> list[dict]:
    """The node's JSON lines (run_files.py collective-waits): each {rank, wait_s, window_s, collectives[, cpu_s, at[,
    gpu_own, gpu_foreign, gpu_neighbour[, gpu_slowing]]]} or {rank, problem}; a line that is not one is skipped, never
    raised."""
    lines = []
    for text in stdout.splitlines()[:MAX_LINES]:
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if not isinstance(line, dict) or not _count(line.get("rank")):
            continue
        if verdict.seconds_value(line.get("wait_s")) and verdict.seconds_value(line.get("window_s")):
            count = line.get("collectives") if _count(line.get("collectives")) else 0
            cpu = {"cpu_s": float(line["cpu_s"]), "at": float(line["at"])} if verdict.seconds_value(
                line.get("cpu_s")) and verdict.seconds_value(line.get("at")) else {}
            gpu = {"gpu_own": float(line["gpu_own"]), "gpu_foreign": float(line["gpu_foreign"]),
                   "gpu_neighbour": line["gpu_neighbour"]} if cpu and verdict.share_value(line.get("gpu_own")) \
                and verdict.share_value(line.get("gpu_foreign")) and _count(line.get("gpu_neighbour")) else {}
            if gpu and verdict.bits_value(line.get("gpu_slowing"), 16) and line["gpu_slowing"]:
                gpu["gpu_slowing"] = line["gpu_slowing"]
            lines.append({"rank": line["rank"], "wait_s": float(line["wait_s"]), "window_s": float(line["window_s"]),
                          "collectives": count, **cpu, **gpu})
        else:
            lines.append({"rank": line["rank"], "problem": str(line.get("problem") or "no figures")[:200]})
    return lines


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10_000_000

