"""Inventory -> clusterctl YAML (the format CONTRACT.md describes): what `--json` plans and
the sandbox write."""
from __future__ import annotations

from typing import Any

import yaml

from clusterctl.inventory.values import format_size
from clusterctl.models import (
    MASK,
    ContainerSpec,
    EnvVar,
    Host,
    Inventory,
    JobSpec,
    RendezvousSpec,
    SSHSettings,
)


def dump_inventory(inv: Inventory, *, reveal_secrets: bool = False) -> str:
    """Inventory -> clusterctl YAML that `load_inventory` reads back into an equal Inventory.

    Secret env values print as *** unless `reveal_secrets` (the loader refuses *** values,
    so a masked dump cannot be loaded by mistake).
    """
    doc: dict[str, Any] = {"name": inv.name}
    ssh = _dump_ssh(inv.ssh)
    if ssh:
        doc["ssh"] = ssh
    if inv.hosts or inv.scheduler is None:
        doc["hosts"] = [_dump_host(host, inv.ssh, reveal_secrets) for host in inv.hosts]
    if inv.container is not None:
        doc["container"] = _dump_container(inv.container, reveal_secrets)
    rendezvous = _changed(inv.rendezvous, RendezvousSpec(), ("port", "master", "join_timeout", "address"))
    if rendezvous:
        doc["rendezvous"] = rendezvous
    job = _dump_job(inv.job, reveal_secrets)
    if job:
        doc["job"] = job
    if inv.scheduler is not None:
        doc["scheduler"] = {k: _plain(v) for k, v in vars(inv.scheduler).items() if v not in (None, ())}
    if inv.health.rules:  # only what was written: the defaults live in clusterctl/health/rules.py
        doc["health"] = {"rules": {o.kind: {k: "never" if v is None else v for k, v in o.values}
                                   for o in inv.health.rules}}
    if inv.notify is not None:  # a webhook's URL is its credential: its path is masked like a secret
        doc["notify"] = {k: _plain(v) for k, v in vars(inv.notify).items() if v not in (None, ())}
        if inv.notify.webhook and not reveal_secrets:
            from clusterctl.inventory.notify_section import masked_url

            doc["notify"]["webhook"] = masked_url(inv.notify.webhook)
    doc["checks"] = {"ib": inv.checks.ib, "shm_min": format_size(inv.checks.shm_min_bytes),
                     "disk_min": format_size(inv.checks.disk_min_bytes),
                     "clock_skew_warn": inv.checks.clock_skew_warn_s}
    origin = f" (from {inv.source})" if inv.source else ""
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=110, allow_unicode=True)
    return f"# clusterctl inventory{origin}\n" + body


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, (tuple, list)) else value


def _changed(value: Any, default: Any, fields: tuple) -> dict:
    return {f: _plain(getattr(value, f)) for f in fields if getattr(value, f) != getattr(default, f)}


def _dump_env(env: tuple[EnvVar, ...], reveal: bool) -> dict:
    out: dict[str, Any] = {}
    for var in env:
        value = var.value if reveal or not var.is_secret else MASK
        out[var.name] = {"value": value, "secret": True} if var.secret else value
    return out


def _dump_ssh(ssh: SSHSettings) -> dict:
    fields = ("user", "port", "identity_file", "known_hosts", "host_key_policy", "connect_timeout",
              "command_timeout", "proxy_jump", "forward_agent")
    return _changed(ssh, SSHSettings(), fields)


def _dump_host(host: Host, ssh: SSHSettings, reveal: bool) -> dict:
    out: dict[str, Any] = {"name": host.name, "address": host.address}
    if host.connection != "ssh":
        out["connection"] = host.connection
    out.update(_changed(host.ssh, ssh, ("port", "user", "identity_file", "proxy_jump")))
    for key in ("gpus", "nic", "slots"):
        if getattr(host, key) is not None:
            out[key] = _plain(getattr(host, key))
    if host.env:
        out["env"] = _dump_env(host.env, reveal)
    if host.groups:
        out["groups"] = list(host.groups)
    return out


def _dump_container(spec: ContainerSpec, reveal: bool) -> dict:
    out: dict[str, Any] = {"image": spec.image, "name": spec.name}
    fields = ("runtime", "gpus", "shm_size", "ipc", "volumes", "command", "pull")
    out.update(_changed(spec, ContainerSpec(image=""), fields))
    if spec.env:
        out["env"] = _dump_env(spec.env, reveal)
    if spec.labels:
        out["labels"] = dict(spec.labels)
    auth = spec.registry_auth
    if auth.source == "password":  # the variable's name only: the password is never in the inventory
        out["registry_auth"] = {"username": auth.username, "password_env": auth.password_env}
    elif auth.source != "node":
        out["registry_auth"] = {"from": auth.source}
    return out


def _dump_job(job: JobSpec, reveal: bool) -> dict:
    fields = ("command", "args", "workdir", "nproc_per_node", "world_size_divides", "outputs", "python", "stall_timeout",
              "launcher", "metrics_every")
    out = _changed(job, JobSpec(), fields)
    if job.env:
        out["env"] = _dump_env(job.env, reveal)
    return out

