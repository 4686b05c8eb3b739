"""`clusterctl export pytorchjob|rayjob|job|sbatch`: the inventory's job as Kubernetes manifests,
or as a Slurm batch script (`sbatch`, from the inventory's scheduler: section; slurm/sbatch.py).

The topology rules run first (world size vs job.world_size_divides, nproc vs the GPUs
each pod requests): a layout that cannot run is refused with the planner's message
and nothing is written. Pod resources and placement that the inventory has no keys
for come from options (docs/platforms.md lists them).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clusterctl.app import add_cluster_options
from clusterctl.outcome import Outcome
from clusterctl.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, limit=False)
    parser.add_argument("kind", choices=("pytorchjob", "rayjob", "job", "sbatch"),
                        help="Kubeflow PyTorchJob, KubeRay RayJob, an indexed batch/v1 Job (+ headless Service), "
                             "or a Slurm batch script (needs the inventory's scheduler: section)")
    parser.add_argument("-o", "--output", type=Path, help="write the YAML here (default: stdout)")
    parser.add_argument("--prompt-file", type=Path, help="its text becomes {prompt} in job.args, byte for byte")
    parser.add_argument("--name", help="job name (default: the inventory's name)")
    parser.add_argument("--namespace", help="metadata.namespace of every object")
    parser.add_argument("--nodes", type=int, help="pods (default: one per inventory host)")
    parser.add_argument("--gpus-per-pod", type=int, help="GPUs each pod may use (default: container.gpus when it "
                                                           "is a count or list, else job.nproc_per_node)")
    parser.add_argument("--image", help="container image (default: container.image)")
    parser.add_argument("--cpu", help="CPU request[:limit] per pod, e.g. 8:16")
    parser.add_argument("--memory", help="memory request[:limit] per pod, e.g. 128Gi")
    parser.add_argument("--node-selector", action="append", default=[], metavar="LABEL=VALUE",
                        help="schedule only on nodes with this label (repeatable), e.g. gpu=on")
    parser.add_argument("--toleration", action="append", default=[], metavar="KEY[=VALUE][:EFFECT]",
                        help="tolerate a taint (repeatable), e.g. nvidia.com/gpu=present:NoSchedule")
    parser.add_argument("--host-network", action="store_true", help="pods use the nodes' network (RDMA/IB NICs)")
    parser.add_argument("--pvc", action="append", default=[], metavar="CLAIM:/PATH[:ro]",
                        help="mount a PersistentVolumeClaim (repeatable); replaces a hostPath volume at that path")
    parser.add_argument("--join-timeout", type=int, default=900,
                        help="seconds the rendezvous waits for every pod (default 900: pods start minutes apart "
                             "while images pull)")
    parser.add_argument("--strict", action="store_true",
                        help="fail instead of shrinking nproc_per_node to fit world_size_divides")


def execute(args, app) -> Outcome:
    from clusterctl import k8s

    inventory = app.inventory()
    if args.kind == "sbatch":
        return _sbatch(args, app, inventory)
    name = k8s.job_name(args.name, "--name", k8s.NAME_MAX[args.kind]) if args.name else \
        k8s.default_name(inventory.name, k8s.NAME_MAX[args.kind])
    options = _options(args)
    prompt = _prompt(args, inventory)
    export = k8s.build(args.kind, inventory, options, name, prompt)
    text = to_yaml(export.documents)
    if args.output:
        _write(args.output, text)
    elif not args.json:
        sys.stdout.write(text)
    for warning in export.warnings:
        app.renderer.message(f"warning: {warning}", "bold yellow")
    for note in export.notes:
        app.renderer.message(f"note: {note}", "yellow")
    app.renderer.message(f"{args.kind} {name}: {export.topology.nnodes} pod(s) x {export.topology.nproc_per_node} "
                         f"rank(s) = world size {export.topology.world_size}"
                         + (f", written to {args.output}" if args.output else ""), "green")
    return Outcome({"ok": True, "kind": args.kind, "name": name, "nnodes": export.topology.nnodes,
                    "nproc_per_node": export.topology.nproc_per_node, "world_size": export.topology.world_size,
                    "gpus_per_pod": export.gpus_per_pod, "file": str(args.output) if args.output else None,
                    "manifests": export.documents, "notes": export.notes, "warnings": export.warnings})


def _sbatch(args, app, inventory) -> Outcome:
    from clusterctl.slurm import sbatch

    script = sbatch.build(inventory, _prompt(args, inventory), name=args.name, strict=args.strict)
    if args.output:
        _write(args.output, script.text)
        args.output.chmod(0o755)
    elif not args.json:
        sys.stdout.write(script.text)
    for note in script.notes:
        app.renderer.message(f"note: {note}", "yellow")
    topo = script.topology
    app.renderer.message(f"sbatch: {topo.nnodes} node(s) x {topo.nproc_per_node} rank(s) = world size "
                         f"{topo.world_size}" + (f", written to {args.output}" if args.output else ""), "green")
    return Outcome({"ok": True, "kind": "sbatch", "nnodes": topo.nnodes, "nproc_per_node": topo.nproc_per_node,
                    "world_size": topo.world_size, "file": str(args.output) if args.output else None,
                    "script": script.text, "notes": list(script.notes)})


def _options(args):
    from clusterctl import k8s

    if args.gpus_per_pod is not None and args.gpus_per_pod < 0:
        raise UsageError(f"--gpus-per-pod {args.gpus_per_pod} is negative", "--gpus-per-pod", "give 0 (CPU) or more")
    if args.join_timeout < 1:
        raise UsageError(f"--join-timeout {args.join_timeout} must be at least 1", "--join-timeout", "e.g. 900")
    return k8s.ExportOptions(
        name=args.name, namespace=k8s.namespace(args.namespace), nodes=args.nodes, gpus_per_pod=args.gpus_per_pod,
        image=args.image,
        cpu=k8s.parse_request_limit(args.cpu, "--cpu") if args.cpu else None,
        memory=k8s.parse_request_limit(args.memory, "--memory") if args.memory else None,
        node_selector=k8s.parse_node_selector(args.node_selector),
        tolerations=tuple(k8s.parse_toleration(t) for t in args.toleration),
        host_network=args.host_network, pvcs=tuple(k8s.parse_pvc(p) for p in args.pvc), strict=args.strict,
        join_timeout=args.join_timeout)


def _prompt(args, inventory) -> str:
    from clusterctl.backends.prompt import read_prompt

    if args.prompt_file is not None:
        return read_prompt(args.prompt_file)
    if any("{prompt}" in part for part in (*inventory.job.command, *inventory.job.args)):
        raise UsageError("job.args use {prompt} but no prompt file was given", "--prompt-file",
                         "pass --prompt-file FILE: its text goes into the manifest's command line")
    return ""


def to_yaml(documents: list) -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data):  # replicas share one template object: write it out each time
            return True

    return "---\n".join(yaml.dump(doc, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=1 << 16)
                        for doc in documents)


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}", "--output", "choose a writable path") from None
