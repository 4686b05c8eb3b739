"""`clusterctl export pytorchjob|trainjob|rayjob|job|sbatch`: the inventory's job as Kubernetes manifests,
or as a Slurm batch script (`sbatch`, from the inventory's scheduler: section; slurm/sbatch.py).

The topology rules run first (world size vs job.world_size_divides, nproc vs the GPUs
each pod requests): a layout that cannot run is refused with the planner's message
and nothing is written. Pod resources and placement that the inventory has no keys
for come from options (docs/platforms.md lists them).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, limit=False)
    parser.add_argument("kind", choices=("pytorchjob", "trainjob", "rayjob", "job", "sbatch"),
                        help="Kubeflow PyTorchJob (Training Operator v1), Kubeflow Trainer v2 TrainJob, KubeRay "
                             "RayJob, an indexed batch/v1 Job (+ headless Service), or a Slurm batch script "
                             "(needs the inventory's scheduler: section)")
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
    parser.add_argument("--queue", metavar="QUEUE",
                        help="Kueue LocalQueue that admits the job (label kueue.x-k8s.io/queue-name)")
    parser.add_argument("--with-runtime", action="store_true",
                        help="trainjob: emit a ClusterTrainingRuntime carrying volumes, /dev/shm, working directory "
                             "and placement, and reference it (default: the stock torch-distributed runtime)")
    parser.add_argument("--strict", action="store_true",
                        help="fail instead of shrinking nproc_per_node to fit world_size_divides")


def execute(args, app) -> Outcome:
    from clusterctl import k8s
    from clusterctl.backends import exports
    from clusterctl.plan.prompt import optional_prompt

    inventory = app.inventory()
    fix = "pass --prompt-file FILE: its text goes into the manifest's command line"
    if args.kind == "sbatch":
        exports.refuse_kubernetes_options(queue=args.queue, with_runtime=args.with_runtime)
        prompt = optional_prompt(args.prompt_file, inventory, fix)
        return exports.sbatch(app, inventory, prompt, args.name, args.strict, args.output)
    name = k8s.job_name(args.name, "--name", k8s.NAME_MAX[args.kind]) if args.name else \
        k8s.default_name(inventory.name, k8s.NAME_MAX[args.kind])
    options = k8s.options_from_args(args)
    prompt = optional_prompt(args.prompt_file, inventory, fix)
    return exports.manifests(app, args.kind, inventory, options, name, prompt, args.output)
