"""`clusterctl sandbox up N [--docker]` / `sandbox down`: the rehearsal cluster on this machine."""
from __future__ import annotations

import argparse
from pathlib import Path

from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("up", "down"), help="build or tear down the rehearsal cluster")
    parser.add_argument("nodes", nargs="?", type=int, default=3, help="number of nodes (up)")
    parser.add_argument("--docker", action="store_true", help="a Docker engine per node, a registry and an image")
    parser.add_argument("--slurm", action="store_true",
                        help="a Slurm controller on this machine and a slurmd per node (Debian's slurm-wlm, munge)")
    parser.add_argument("--state-dir", type=Path, default=None, help="where the sandbox keeps its state")


def execute(args, app) -> Outcome:
    from clusterctl import sandbox

    state_dir = args.state_dir or sandbox.DEFAULT_STATE_DIR
    if args.action == "down":
        sandbox.down(state_dir)
        app.renderer.message(f"sandbox at {state_dir} is down", "green")
        return Outcome({"ok": True, "state_dir": str(state_dir)})
    handle = sandbox.up(args.nodes, docker=args.docker, state_dir=state_dir, slurm_cluster=args.slurm)
    nodes = {node.name: node.address for node in handle.nodes}
    app.renderer.message(f"sandbox up: {len(nodes)} nodes ({', '.join(nodes)})", "green")
    app.renderer.message(f"inventory: {handle.inventory_path}")
    document = {"ok": True, "inventory": str(handle.inventory_path), "nodes": nodes, "state_dir": str(state_dir)}
    if handle.slurm:
        conf = handle.slurm_env["SLURM_CONF"]
        app.renderer.message(f"slurm: partition debug on {', '.join(nodes)}; for Slurm commands: "
                             f"export SLURM_CONF={conf}")
        document["slurm_conf"] = conf
        document["slurm_inventory"] = str(handle.slurm_inventory_path)
        app.renderer.message(f"slurm inventory: {handle.slurm_inventory_path}")
    if not args.json:
        print(handle.inventory_path)
    return Outcome(document)
