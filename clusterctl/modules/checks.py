"""Preflight checks as playbook modules: `checks.preflight` (all nodes at once) and `checks.gpu_usage`."""
from __future__ import annotations

from clusterctl.models import CheckStatus, HostResult, HostStatus
from clusterctl.modules.catalog import module


@module("checks.preflight", cluster_scope=True)
def preflight(ctx, fail_on_warn: bool = False):
    """Run every check; a host with a failing check fails (cluster-wide failures fail the master)."""
    from clusterctl.preflight.probe import run_checks_and_facts

    # the image_pull check ran as `up`'s first step (docker.pull_check), before anything changed
    checks, reusable, gpus = run_checks_and_facts(ctx.inventory, ctx.hosts, ctx.connections)
    master = ctx.inventory.master.name
    results = {}
    for host in ctx.hosts:
        mine = [c for c in checks if c.host == host.name or (c.host is None and host.name == master)]
        bad = [c for c in mine if c.status is CheckStatus.FAIL or (fail_on_warn and c.status is CheckStatus.WARN)]
        detail = "; ".join(f"{c.check}: {c.detail}" for c in bad)
        status = HostStatus.FAILED if bad else HostStatus.OK
        # node_facts: what `run` may reuse (up remembers it: preflight/node_facts.py); gpus_seen: the
        # GPUs the health record keeps (issue 36); neither in the JSON (a tuple is not JSON's)
        data = {"checks": [c.to_json() for c in mine], "gpus_seen": tuple(gpus.get(host.name, ())),
                **({"node_facts": reusable[host.name]} if host.name in reusable else {})}
        results[host.name] = HostResult(host.name, status, detail, data=data)
    return results


@module("checks.gpu_usage")
def gpu_usage(ctx):
    """GPUs and the processes using them, for `status`."""
    from clusterctl.preflight import facts
    from clusterctl.transport import batch_command, split_batch

    command = batch_command([("gpus", facts.NVIDIA_SMI_GPUS), ("apps", facts.NVIDIA_SMI_APPS)], timeout=60)

    def action(transport, host) -> HostResult:
        sections = split_batch(transport.run(command).stdout)
        gpus = facts.parse_gpu_csv(sections.get("gpus", ""))
        apps = facts.parse_compute_apps_csv(sections.get("apps", ""))
        in_use = f"{len({a.gpu_uuid for a in apps})}/{gpus.count}" if gpus.count else "no GPUs"
        return HostResult(host.name, HostStatus.OK, data={"gpus": gpus.count, "gpus_in_use": in_use,
                                                          "gpu_processes": [a.pid for a in apps]})

    return action
