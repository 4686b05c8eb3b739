"""`clusterctl inventory show [--json]`: every host as clusterctl reads it (name, address, port, user,
key, jump host or ssh options, groups, become), the file and line that set each value, and where
ssh_config then sends the connection (`ssh -G`: host, port, user, keys, hops, known_hosts, policy)."""
from __future__ import annotations

import argparse
from typing import Any

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome
from clusterctl.errors import UsageError

from clusterctl.api.reach import SHOWN


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["show"], help="show: the resolved hosts and where each value came from")
    add_cluster_options(parser)


def execute(args, app) -> Outcome:
    from clusterctl.api.reach import host_entry
    from clusterctl.inventory.load import load_inventory_located

    path = app.inventory_path()
    inventory, locator = load_inventory_located(path)
    hosts = list(enumerate(inventory.hosts))
    if args.limit:
        wanted = {name.strip() for name in args.limit.split(",") if name.strip()}
        known = {h.name for h in inventory.hosts} | {g for h in inventory.hosts for g in h.groups}
        if wanted - known:
            raise UsageError(f"--limit names unknown hosts or groups: {', '.join(sorted(wanted - known))}",
                             where="--limit", fix=f"choose from: {', '.join(sorted(known))}")
        hosts = [(i, h) for i, h in hosts if h.name in wanted or wanted & set(h.groups)]
    entries = [host_entry(index, host, locator) for index, host in hosts]
    for entry in entries:
        _render(app.renderer, entry)
    for warning in inventory.warnings:
        app.renderer.message(f"warning: {warning}", style="yellow")
    return Outcome({"ok": True, "inventory": str(path), "name": inventory.name, "hosts": entries,
                    "warnings": list(inventory.warnings)})


def _render(renderer, entry: dict) -> None:
    renderer.message(entry["name"], style="bold")
    for key in SHOWN:
        value = entry.get(key)
        if value in (None, {}, []):
            continue
        origin = entry["from"].get(key, "" if key == "groups" else "(default)")
        renderer.message(f"  {key:<14} {_text(value):<40} {origin}")
    ssh = entry.get("ssh")
    if ssh and "error" in ssh:
        renderer.message(f"  {'reached':<14} {ssh['error']}", style="red")
    elif ssh:
        via = "".join(f" via {hop}" for hop in ssh["jump"]) + (
            f" via ProxyCommand `{ssh['proxy_command']}`" if ssh["proxy_command"] else "")
        renderer.message(f"  {'reached':<14} {ssh['user']}@{ssh['hostname']}:{ssh['port']}{via}  ({ssh['source']})")
        renderer.message(f"  {'host keys':<14} {ssh['host_key_policy']}: {', '.join(ssh['known_hosts'])}")


def _text(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)
