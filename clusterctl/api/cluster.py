"""`Cluster`: the Python API on one inventory, for those who script their cluster (a notebook, a
pipeline, Airflow). The CLI's commands call the same session, backends and flows; nothing here exits
the process: bad input raises the same errors (clusterctl.errors, with file:line) the CLI prints,
and a host's failure is data in the result."""
from __future__ import annotations

import argparse
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Sequence, Union

from clusterctl.api.results import ClusterResult, result_of
from clusterctl.api.run import Run
from clusterctl.api.source import InventorySource
from clusterctl.models import Inventory


class Cluster:
    """The nodes of one inventory, with the records of a state directory (default: ./.clusterctl, or
    $CLUSTERCTL_STATE, as the CLI's)."""

    def __init__(self, source: InventorySource, inventory: Inventory, state_dir: Optional[Path] = None,
                 env: Optional[dict] = None):
        self.source, self.inventory = source, inventory
        self.env = dict(os.environ if env is None else env)
        if state_dir is not None:
            self.env["CLUSTERCTL_STATE"] = str(state_dir)

    @classmethod
    def load(cls, path: Union[str, os.PathLike], state_dir: Union[str, os.PathLike, None] = None) -> "Cluster":
        """Read and validate the inventory at `path` (a file, an Ansible inventory directory, or
        `ansible:SOURCE`); raises clusterctl.errors.InventoryError naming file:line, as the CLI does."""
        from clusterctl.inventory.load import load_inventory

        source = InventorySource.parse(path)
        return cls(source, load_inventory(source.loader_argument()), Path(state_dir) if state_dir else None)

    def __repr__(self) -> str:
        return f"Cluster({self.name!r}, {len(self.inventory.hosts)} hosts, from {self.source})"

    @property
    def name(self) -> str:
        return self.inventory.name

    @property
    def hosts(self) -> list[str]:
        return [h.name for h in self.inventory.hosts]

    @contextmanager
    def session(self, command: str) -> Iterator:
        """A session (api/session.py) on this inventory for one operation: its connections closed after."""
        from clusterctl.api.session import Session
        from clusterctl.render import Renderer
        from clusterctl.state import State

        args = argparse.Namespace(inventory=self.source.loader_argument(), limit=None, command=command, json=True,
                                  verbose=False)
        session = Session(args, self.env, State.here(self.env), Renderer(json_mode=True))
        try:
            yield session
        finally:
            session.close()

    # ---- the cluster
    def up(self, force: bool = False) -> ClusterResult:
        """`clusterctl up`: clean stale ranks, pull, start containers, preflight; this becomes the
        active cluster of the state directory. Per-host results (.ok, .hosts)."""
        from clusterctl.api.playbooks import run_flow

        with self.session("up") as session:
            return result_of(run_flow(session, None, "up", title="up", remember=True, variables={"force": force}))

    def down(self, force: bool = False) -> ClusterResult:
        """`clusterctl down`: stop the ranks of runs that ended and remove the containers clusterctl started;
        a live run of anyone is left alone (each host's .data["left_running"]) unless `force`."""
        from clusterctl.api.playbooks import run_flow

        with self.session("down") as session:
            return result_of(run_flow(session, None, "down", title="down", variables={"force": force}))

    def exec(self, command: Union[str, Sequence[str]], timeout: Optional[float] = None) -> ClusterResult:
        """`clusterctl exec`: a command on every host (a string runs through sh -c); each host's
        .exit_code, .stdout, .stderr."""
        from clusterctl.api.adhoc import exec_on_hosts
        from clusterctl.outcome import Outcome, any_unreachable, hosts_document

        argv = [command] if isinstance(command, str) else list(command)
        with self.session("exec") as session:
            results = exec_on_hosts(session, session.inventory(), argv, timeout)
        return result_of(Outcome(hosts_document(results), unreachable=any_unreachable(results)), results)

    # ---- runs
    def plan(self, prompt: str = "", strict: bool = False):
        """The printable Plan of a run (backends/base.py), as `clusterctl run --plan` makes it."""
        from clusterctl.backends import RunRequest, backend_for
        from clusterctl.backends.facts import facts_and_busy

        request = RunRequest(prompt, strict=strict)
        with self.session("run") as session:
            inventory = session.plannable(self.inventory)  # quarantined hosts left out (issue 36)
            backend = backend_for(session, inventory)
            if not backend.plans_on_nodes:
                return backend.plan(inventory, request, None)
            facts, problems, _, _ = facts_and_busy(session.state, inventory, session.connections)
            if problems:
                raise _not_ready(problems)
            return backend.plan(inventory, request, None, facts)

    def run(self, prompt: Optional[str] = None, prompt_file: Union[str, os.PathLike, None] = None,
            detach: bool = True, strict: bool = False, timeout: Optional[float] = None,
            stall_timeout: Optional[float] = None, wait: bool = False) -> Run:
        """`clusterctl run`: the job on every node. With `detach` (the default) it returns once every
        rank started, the run watched on the cluster; without, once the run ended. Give the prompt
        as text or as the path of a file (read as `clusterctl run PROMPT_FILE` reads it). `wait`: queue for
        GPUs another run holds (`run --wait`) instead of a StateError naming the holder."""
        from clusterctl.backends import RunRequest, backend_for
        from clusterctl.backends.healing import run_healing
        from clusterctl.plan.prompt import run_prompt
        from clusterctl.errors import UsageError
        from clusterctl.ground.run_record import RunHandle

        if (prompt is None) == (prompt_file is None):
            raise UsageError("give exactly one of prompt= and prompt_file=", where="Cluster.run",
                             fix='cluster.run(prompt="a cat") or cluster.run(prompt_file="prompt.txt")')
        text, _ = run_prompt(lambda: self.inventory, Path(prompt_file) if prompt_file is not None else None, prompt)
        request = RunRequest(text, strict=strict, timeout_s=timeout, stall_timeout_s=stall_timeout, detach=detach,
                             wait=wait)
        with self.session("run") as session:
            backend = backend_for(session, self.inventory)
            outcome = run_healing(session, backend, self.inventory, request)
        run_id = outcome.document.get("run_id")
        if run_id is None:
            raise _not_ready(outcome.document.get("hosts") or {})
        return Run(self, run_id, outcome.document, RunHandle(run_id, backend.name, self.inventory.name))

    def runs(self, run_id: Optional[str] = None) -> Run:
        """A recorded run of this state directory by its id (default: the last one)."""
        from clusterctl.ground import records
        from clusterctl.state import State

        run_id, _ = records.resolve(State.here(self.env), run_id)
        return Run(self, run_id)

    # ---- Fabric
    def group(self):
        """A `fabric.ThreadingGroup` of the hosts, connected exactly as clusterctl reaches them (user,
        port, key, ProxyJump/ProxyCommand, known_hosts judged strictly: never Fabric's AutoAddPolicy),
        for your own Fabric tasks on the same inventory: `cluster.group().run("hostname")`. Close it
        when done (`with cluster.group() as group:`). Fabric is imported here only."""
        from clusterctl.transport.fabric_group import threading_group

        return threading_group(self.inventory.hosts)


def _not_ready(hosts) -> Exception:
    from clusterctl.errors import StateError

    said = "; ".join(f"{name}: {getattr(r, 'detail', None) or (r.get('detail') if isinstance(r, dict) else r)}"
                     for name, r in hosts.items())
    return StateError(f"the run did not start: nodes not ready ({said or 'no detail'})", where="Cluster.run",
                      fix="`cluster.up()` first, and see each host's detail")
