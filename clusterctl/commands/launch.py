"""`clusterctl launch --from-env`: the entrypoint a platform runs on every node.

Kubernetes operators and container platforms start one copy of a command per node and
describe the job through environment variables (docs/platforms.md). This command reads
them (clusterctl.plan.platform), looks at the node it runs on with the real local tools
(nvidia-smi, `ip -j route get`, df, a bind test and ss; no SSH: it *is* on the node),
plans the ranks with topology.plan over N placeholder hosts, runs the node-local checks,
and starts torchrun with the arguments `clusterctl run` would use (static rendezvous,
`--node-rank`, a bounded `--rdzv-conf=timeout=`).

torchrun runs as a child by default, not through exec: its stderr passes through
unchanged and is also scanned, so that when the rendezvous gives up (WORLD_SIZE and the
nodes that showed up disagree, the master unreachable) the launcher says what the
platform's variables meant. Signals (SIGTERM from the kubelet, Ctrl-C) are forwarded,
and the child gets SIGTERM if the launcher dies. `--exec` replaces the launcher by
torchrun instead (one process less, no explanation).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, limit=False)
    parser.add_argument("--from-env", action="store_true",
                        help="read this node's place in the job from the platform's variables (required)")
    parser.add_argument("--platform", choices=("auto", "pytorchjob", "nodes", "torchrun"), default="auto",
                        help="what WORLD_SIZE/RANK mean (docs/platforms.md); auto: PET_* -> pytorchjob, "
                             "LOCAL_WORLD_SIZE -> torchrun, else nodes")
    parser.add_argument("--prompt-file", type=Path, help="its text becomes {prompt} in job.args, byte for byte")
    parser.add_argument("--dry-run", action="store_true", help="probe, plan and check; print the command, start nothing")
    parser.add_argument("--join-timeout", type=int, default=None,
                        help="seconds the rendezvous waits for every node (default: rendezvous.join_timeout, 120)")
    parser.add_argument("--strict", action="store_true",
                        help="fail instead of shrinking nproc_per_node to fit world_size_divides")
    parser.add_argument("--run-id", help="names the rendezvous and {run_id} (default: CLUSTERCTL_RUN_ID, the "
                                         "PyTorchJob's name, or one derived from MASTER_ADDR:MASTER_PORT)")
    parser.add_argument("--exec", dest="exec_", action="store_true",
                        help="replace this process by torchrun (no explanation of rendezvous failures)")


def execute(args, app) -> Outcome:
    from clusterctl.run.from_env import LaunchOptions, launch_from_env

    return launch_from_env(app, LaunchOptions(args.from_env, args.platform, args.prompt_file, args.dry_run,
                                              args.join_timeout, args.strict, args.run_id, args.exec_))
