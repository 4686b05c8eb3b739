"""One view of a shared fleet (issue 48): `status` reads the GPU leases every node holds (node/leases.py,
through modules/process.py's `process.leases`) and shows every operator's runs, the waiters of `run --wait`
in their order, and the runs someone ended by force, whose records here become `interrupted`, naming who."""
from __future__ import annotations


def fleet_view(app, inventory, hosts: dict) -> dict:
    """The nodes' view (node/leases.py): every operator's runs holding leases, the waiters, and the runs
    someone ended by force; this directory's records of those runs become `interrupted`, naming who."""
    from clusterctl.ground.records import RunStore
    from clusterctl.plan import leasing

    ended = leasing.ended_by(hosts)
    store = RunStore(app.state)
    for record in store.list(50):
        who = ended.get(record.run_id)
        if who and record.state is not None and record.get("state") == "running" and record.cluster == inventory.name:
            store.write(record.with_(state="ended", interrupted=True, ended=who.get("at"), interrupted_by=who))
    return {"runs": leasing.fleet_runs(hosts), "waiting": leasing.fleet_waiting(hosts),
            "interrupted_by": list(ended.values())}


def say_fleet(app, fleet: dict, here: set) -> None:
    """The fleet view in lines: who holds what, who waits, which of this directory's runs someone ended."""
    from clusterctl.plan.leasing import when

    for run in fleet["runs"]:
        gpus = ", ".join(f"{host} {' '.join(keys)}" for host, keys in run["gpus"].items())
        mine = "" if run["run_id"] not in here else " (this directory's)"
        app.renderer.message(f"run {run['run_id']}{mine}: {run['operator']}, since {when(run['since'])}, holds {gpus}",
                             "cyan")
    for place, run in enumerate(fleet["waiting"], 1):
        app.renderer.message(f"waiting #{place}: run {run['run_id']} ({run['operator']}) for {', '.join(run['hosts'])}",
                             "cyan")
    for who in fleet["interrupted_by"]:
        if who["run_id"] in here:
            app.renderer.message(f"run {who['run_id']} was interrupted: ended by {who.get('by')} "
                                 f"(`{who.get('how')}`) at {when(who.get('at'))} on {who.get('host')}", "yellow")
