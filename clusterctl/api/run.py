"""A run of the Python API: `cluster.run(...)` returns one; `cluster.runs(id)` finds one again."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterator, Optional

from clusterctl.api.results import ClusterResult, result_of

if TYPE_CHECKING:
    from clusterctl.api.cluster import Cluster
    from clusterctl.backends.base import RunDescription
    from clusterctl.ground.run_record import RunHandle, RunState
    from clusterctl.watch.logs import LogLine


class Run:
    """A run of the job on the cluster, by its id: its state, logs, end and stop, asked of its record
    and of the nodes as `clusterctl status`, `logs`, `attach` and `stop` ask them."""

    def __init__(self, cluster: "Cluster", run_id: str, document: Optional[dict] = None,
                 handle: Optional["RunHandle"] = None):
        from clusterctl.ground.run_record import RunHandle

        self.cluster, self._id = cluster, run_id
        self.document = dict(document or {})  # what `clusterctl run --json` printed for it
        self.handle = handle or RunHandle(run_id)  # what the follow-up commands take as RUN

    def __repr__(self) -> str:
        return f"Run({self._id!r} on {self.cluster.name!r})"

    @property
    def id(self) -> str:
        return self._id

    def describe(self) -> "RunDescription":
        """Where the run stands now (a detached run's record learns its end from its supervisor)."""
        from clusterctl.backends import backend_of_run

        with self.cluster.session("status") as session:
            backend, handle = backend_of_run(session, self._id)
            return backend.describe(handle.run_id)

    @property
    def state(self) -> "RunState":
        """running | unknown | stopped | succeeded | failed | interrupted (as `clusterctl status` says: a
        ground/run_record.py RunState, equal to its text)."""
        return self.describe().state

    @property
    def first_failure(self) -> Optional[dict]:
        """The first rank that failed, and why (None while running, or when none failed)."""
        return self.describe().first_failure

    def logs(self, follow: bool = False, node: Optional[str] = None, rank: Optional[int] = None,
             tail: Optional[int] = None) -> Iterator["LogLine"]:
        """The run's output lines (.host .rank .stream .text), node by node, as `clusterctl logs` reads
        them; `follow`: once the run ended on its nodes, every line."""
        from clusterctl.backends import backend_of_run

        with self.cluster.session("logs") as session:
            backend, handle = backend_of_run(session, self._id)
            lines = list(backend.logs(handle.run_id, follow=follow, node=node, rank=rank, tail=tail))
        return iter(lines)

    def wait(self, timeout: Optional[float] = None, poll_s: float = 2.0) -> int:
        """Until the run ended: the exit code `clusterctl attach` gives for it (0 succeeded, 1 failed
        or stopped). Raises TimeoutError when it still runs after `timeout` seconds."""
        from clusterctl.backends.records import wait
        from clusterctl.ground.run_record import RunState

        with self.cluster.session("attach") as session:
            description = wait(session, self._id, "nodes", timeout, poll_s)
        if description.state is RunState.RUNNING:
            raise TimeoutError(f"run {self._id} still runs after {timeout} s")
        return 0 if description.exit_code == 0 else 1

    def stop(self) -> ClusterResult:
        """End the run on every node (`clusterctl stop RUN`): per-host results."""
        from clusterctl.backends import backend_of_run

        with self.cluster.session("stop") as session:
            backend, handle = backend_of_run(session, self._id)
            return result_of(backend.stop(handle.run_id))
