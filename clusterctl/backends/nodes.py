"""The nodes of the inventory, reached over SSH (their ranks in Docker containers, or on the hosts)."""
from __future__ import annotations

from contextlib import nullcontext
from typing import Iterator, Mapping, Optional

from clusterctl.backends.base import Plan, RunDescription, RunRequest, plan_of_topology
from clusterctl.models import Inventory


class NodesBackend:
    """SSH(+Docker) nodes: the run's facts are probed on the nodes (or remembered from `up`)."""

    name = "nodes"
    plans_on_nodes = True  # `run --plan` needs the nodes' facts
    leases_on_nodes = True  # GPU leases held on the nodes (run/leases.py)

    def __init__(self, session):
        self.session = session

    # ---- planning (pure)
    def plan(self, inventory: Inventory, request: RunRequest, run_id: Optional[str],
             facts: Optional[Mapping] = None, attempt: int = 1, checkpoint: Optional[str] = None,
             topology=None) -> Plan:
        """The layout the planner makes of `facts` (plan/topology.py; `topology`: one made already) and
        what starts on each node, the prompt expanded once: what `launch(plan)` carries out."""
        from clusterctl.plan.launch_plan import commands_of, node_launches, shipped_files

        topology = topology if topology is not None else self.layout(inventory, request, facts)
        launches = node_launches(inventory, topology, run_id or "RUN", request.prompt, attempt, checkpoint)
        files = shipped_files(inventory)
        return plan_of_topology(self.name, inventory, topology, run_id, commands_of(inventory, run_id or "RUN", launches,
                                                                                  files),
                                launches=launches, launches_for=(run_id, attempt), files=files, attempt=attempt,
                                checkpoint=checkpoint)

    def layout(self, inventory: Inventory, request: RunRequest, facts: Optional[Mapping] = None):
        """The planner's Topology of `facts`, shaped for the job's launcher."""
        from clusterctl.plan.launcher import shaped
        from clusterctl.plan.topology import plan

        return shaped(inventory, plan(inventory, facts or {}, strict=request.strict))

    # ---- what the run flow (run_flow.py) asks of the place the run happens
    def reach_soon(self, inventory: Inventory) -> None:
        """The nodes' SSH connections opened in the background while `run` imports and plans (issue 52: on the
        way to the first rank); the quarantined nodes left out, as the run leaves them."""
        self.session.connections.warm(self.session.plannable(inventory).hosts)

    def refuse(self, request: RunRequest) -> None:
        """Nothing the nodes cannot do."""

    def reach(self, inventory: Inventory, run_id: str):
        return nullcontext((inventory, self.session.connections, None))

    def facts(self, inventory: Inventory, connections):
        from clusterctl.backends.facts import facts_and_busy

        return facts_and_busy(self.session.state, inventory, connections)

    def busy(self, inventory: Inventory, connections, seen: Optional[str]) -> Optional[str]:
        return seen  # looked for in the same round trip as the facts

    def hang_up(self):
        from clusterctl.backends.hangup import hang_up_detaches

        return hang_up_detaches()

    def lists_hosts(self, inventory: Inventory) -> bool:
        """Whether the inventory names the nodes (else they are known to the scheduler only)."""
        return True

    def place_checks(self, inventory: Inventory) -> list:
        """The checks of the place before any node (Slurm: the partition); none for SSH nodes."""
        return []

    # ---- the run
    def launch(self, plan: Plan, request: RunRequest, inventory: Optional[Inventory] = None, live=None):
        """Carry out `plan` (run_flow.py: as it is where it was planned for its run id and attempt, else
        planned again on the nodes reached); `live`: the live log's rank filter (LiveOptions)."""
        from clusterctl.backends.run_flow import LiveOptions, run_job

        return run_job(self.session, self, inventory or self.session.inventory(), request, live or LiveOptions(),
                       relaunch_of=plan)

    def describe(self, run_id: Optional[str]) -> RunDescription:
        from clusterctl.backends.records import describe

        return describe(self.session, run_id, self.name)

    def logs(self, run_id: Optional[str], follow: bool = False, **select) -> Iterator:
        from clusterctl.backends.reading import log_lines

        return log_lines(self.session, run_id, follow=follow, **select)

    def stop(self, run_id: Optional[str], given_inventory: Optional[str] = None):
        from clusterctl.backends.stopping import stop_run

        return stop_run(self.session, run_id, given_inventory)

    def relaunch(self, plan: Plan, request: RunRequest, inventory: Optional[Inventory] = None):
        """Stop what runs of the plan's run, then launch `plan` as the next attempt of the same run id
        (run_flow.py sets the last attempt's run dirs aside on the nodes first)."""
        from clusterctl.heal.hooks import StopRequested, stop_requested, withdraw_stop

        if stop_requested(self.session, plan.run_id):  # a user's `clusterctl stop` came first: it stands
            raise StopRequested(plan.run_id)
        self.stop(plan.run_id)
        withdraw_stop(self.session.state, plan.run_id)  # its own stop, not a user's: the next attempt goes on
        return self.launch(plan.next_attempt(), request, inventory)
