"""Stall detection during `run`, and the stack documents that `run` and `clusterctl stacks` save.

When no rank has printed for `job.stall_timeout` seconds, every rank's stack is taken twice, a few
seconds apart (watch/sampler.py), in the background: the controller keeps polling the nodes and
renewing their leases meanwhile, and Ctrl-C still stops the run at once. The roll call
(watch/rollcall.py) then says hang (stop the run, name the rank elsewhere), moving (computing: said
once, watched on) or unknown (no stack could be read: said once, watched on). A line printed while
the stacks were taken cancels the verdict: the job was not silent after all.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from clusterctl.executor import Background, Connections, Event, OnEvent
from clusterctl.watch.pyspy_kept import ROUND_SETTLE_S, KeptPySpy
from clusterctl.watch.rollcall import HANG, MOVING, RollCall, Verdict, judge, roll_call
from clusterctl.watch.sampler import NodeStacks, merged_samples, node_stacks, sample_action
from clusterctl.watch.stacks import RankStack
from clusterctl.models import Host, Inventory

SAMPLES = 2
INTERVAL_S = 3.0


@dataclass(frozen=True)
class JobShape:
    """What the roll call needs to know of a run: its ranks, the master's store, who has which address."""

    expected: tuple[int, ...]
    master: tuple[str, int]
    host_of_address: dict = field(default_factory=dict, compare=False)
    host_of_rank: dict = field(default_factory=dict, compare=False)  # where the topology put each rank

    @classmethod
    def of_topology(cls, topology) -> "JobShape":
        addresses = {}
        for node in topology.nodes:
            addresses.setdefault(node.host.address, node.host.name)
            addresses[node.local_addr] = node.host.name
        where = {rank: node.host.name for node in topology.nodes for rank in node.ranks}
        return cls(tuple(range(topology.world_size)), (topology.master_addr, topology.port), addresses, where)

    @classmethod
    def of_record(cls, record: dict, inventory: Inventory) -> "JobShape":
        """From a run record (run.json): its topology and master."""
        addresses, expected, where = {}, [], {}
        for node in record.get("topology") or []:
            first, last = node["ranks"]
            expected += range(first, last + 1)
            where.update((rank, node["host"]) for rank in range(first, last + 1))
            addresses[node.get("local_addr") or ""] = node["host"]
        for host in inventory.hosts:
            addresses.setdefault(host.address, host.name)
        master = record.get("master") or {}
        return cls(tuple(expected), (str(master.get("address", "")), int(master.get("port", 0) or 0)), addresses, where)


class StallWatch:
    def __init__(self, inventory: Inventory, shape: JobShape, run_id: str, connections: Connections,
                 on_event: OnEvent, timeout_s: float, interval_s: float = INTERVAL_S, samples: int = SAMPLES,
                 kept: Optional[KeptPySpy] = None):
        self.kept = kept  # py-spy shipped once per node per run, shared with the straggler watch
        self.inventory, self.shape, self.run_id = inventory, shape, run_id
        self.connections, self.on_event = connections, on_event
        self.timeout_s, self.interval_s, self.samples = timeout_s, interval_s, samples
        self.last_output = time.monotonic()
        self.nodes: dict[str, NodeStacks] = {}  # the last stacks taken
        self._quiet_since = self.last_output  # silence counts from here (moved on after each look)
        self._sampling: Optional[Background] = None
        self._sampling_since = 0.0
        self._said: set[str] = set()

    def heard(self) -> None:
        """A line from any node (called from the log stream threads)."""
        self.last_output = time.monotonic()

    def settle(self, timeout_s: float = ROUND_SETTLE_S) -> None:
        """Wait up to `timeout_s` for stacks still being taken (the run's end; see StragglerWatch.settle)."""
        if self._sampling is not None:
            self._sampling.wait(timeout_s)

    @property
    def sampling(self) -> bool:
        return self._sampling is not None

    def silent_s(self) -> float:
        return time.monotonic() - self.last_output

    def check(self, hosts: list[Host]) -> Optional[Verdict]:
        """Called on every poll with the hosts whose torchrun still runs; a hang verdict once established."""
        if self.timeout_s <= 0:
            return None
        now = time.monotonic()
        if self._sampling is None:
            if hosts and now - max(self.last_output, self._quiet_since) >= self.timeout_s:
                self.on_event(Event("note", text=f"no output for {self.silent_s():.0f}s: taking every rank's stack "
                                                 f"({self.samples} samples {self.interval_s:g}s apart)"))
                self._sampling_since = now
                self._sampling = Background(hosts, sample_action(self.inventory, self.run_id, self.samples,
                                                                 self.interval_s, kept=self.kept), self.connections)
            return None
        if not self._sampling.wait(0):
            return None
        self.nodes = node_stacks(self._sampling.results)
        self._sampling = None
        self._quiet_since = time.monotonic()
        verdict = judge(merged_samples(self.nodes), self.interval_s, self.shape.expected, self.shape.master,
                        self.shape.host_of_address, self.shape.host_of_rank)
        if self.last_output > self._sampling_since:
            return None  # a rank printed while its stack was taken: not silent after all
        if verdict.kind == HANG:
            return verdict
        if verdict.kind == MOVING:
            self._say_once("moving", f"no output for {self.silent_s():.0f}s, but the stacks move ({verdict.detail}): "
                                     "the job is computing; watching on")
        else:
            problems = "; ".join(f"{n.host}: {n.problem}" for n in self.nodes.values() if n.problem)
            self._say_once("unknown", f"no output for {self.silent_s():.0f}s and the stacks cannot tell whether the "
                                      f"job hangs ({verdict.detail}{'; ' + problems if problems else ''}); watching on")
        return None

    def _say_once(self, key: str, text: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self.on_event(Event("note", text=text))


# --------------------------------------------------------------------------- documents


def stacks_document(run_id: str, nodes: dict[str, NodeStacks], reason: str, verdict: Optional[Verdict] = None,
                    call: Optional[RollCall] = None, first_failure: Optional[dict] = None,
                    only_host: Optional[str] = None) -> dict:
    """Every rank's stacks (all samples), the roll call and the verdict, as saved in the run directory
    (`only_host`: the ranks of that node only, for the copy written on the node)."""
    call = call or (verdict.roll_call if verdict else None)
    return {
        "run_id": run_id, "taken_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "reason": reason,
        "verdict": verdict.kind if verdict else "snapshot",
        "detail": verdict.detail if verdict else (call.evidence() if call else ""),
        "evidence": call.evidence() if call else "",
        "roll_call": call.to_json() if call else None,
        "first_failure": first_failure,
        "nodes": {name: {"tool": n.tool, "problem": n.problem,
                         "samples": [[rank_json(r) for r in sample] for sample in n.samples]}
                  for name, n in nodes.items() if only_host in (None, name)},
    }


def rank_json(rank: RankStack) -> dict:
    return {"host": rank.host, "rank": rank.rank, "local_rank": rank.local_rank, "pid": rank.pid, "cpu_s": rank.cpu_s,
            "error": rank.error or None, "state": rank.state or None, "wchan": rank.wchan or None, "sockets": [str(s) for s in rank.sockets],
            "threads": [{"name": t.name, "active": t.active,
                         "frames": [{"function": f.function, "file": f.file, "line": f.line, "path": f.path}
                                    for f in t.frames]} for t in rank.threads]}


def snapshot(nodes: dict[str, NodeStacks], expected: Iterable[int], host_of_rank: Optional[dict] = None) -> RollCall:
    """The roll call of the last sample of every node."""
    samples = merged_samples(nodes)
    return roll_call(samples[-1] if samples else [], expected, host_of_rank)


def file_name() -> str:
    return f"stacks-{time.strftime('%Y%m%d-%H%M%S')}.json"


def save_local(directory: Path, name: str, document: dict) -> Path:
    """Write under the run's local directory (0700 dirs, a 0600 file: stacks hold paths and socket addresses)."""
    from clusterctl.ground.files import private_dir

    private_dir(directory)
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle, indent=1)
    return path
