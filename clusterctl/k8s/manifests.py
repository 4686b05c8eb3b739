"""Inventory + export options -> PyTorchJob, TrainJob (k8s/trainjob.py), RayJob or indexed batch Job
manifests. Pure.

Order of work: the topology rules first (topology.plan over one placeholder host per
pod, every pod given the GPUs it requests), so a layout that cannot run (1 GPU per pod
with nproc 5; 2 x 7 ranks for 40 heads) fails with the planner's message before any
YAML exists. Then one pod template, shared by every replica.

The container runs torchrun directly (the image needs no clusterctl), with the
arguments `clusterctl run` uses, except that the platform supplies the master and the
node rank through Kubernetes' own `$(VAR)` expansion: `--rdzv-endpoint=$(MASTER_ADDR):
$(MASTER_PORT) --node-rank=$(RANK)`. The PyTorchJob operator sets MASTER_ADDR,
MASTER_PORT and RANK (pod index) itself; the batch Job sets them in its pod template
(RANK from the completion index, MASTER_ADDR the index-0 pod behind a headless
Service), in the `nodes` convention of `clusterctl launch --from-env`. A RayJob has no
such variables: its entrypoint places one actor per node and hands each its rank.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace

from clusterctl.errors import TopologyError, UsageError
from clusterctl.k8s import pod, trainjob
from clusterctl.k8s.options import ExportOptions
from clusterctl.plan.launch_plan import node_start
from clusterctl.models import Host, Inventory, RendezvousSpec
from clusterctl.plan.topology import NodeFacts, Topology, plan

KINDS = ("pytorchjob", "trainjob", "rayjob", "job")
# room for -master-0, -worker-..., -<index>; a TrainJob's pods are <name>-node-0-<index>-<suffix>
NAME_MAX = {"pytorchjob": 45, "trainjob": 40, "rayjob": 40, "job": 50}
ENDPOINT_REF, RANK_REF = "$(MASTER_ADDR):$(MASTER_PORT)", "$(RANK)"
RANK_ANNOTATION = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


@dataclass
class Export:
    kind: str
    name: str
    documents: list
    topology: Topology
    gpus_per_pod: int
    notes: list = field(default_factory=list)
    warnings: list = field(default_factory=list)


# --------------------------------------------------------------------------- topology


def pod_names(kind: str, name: str, nodes: int) -> list[str]:
    if kind == "pytorchjob":
        return [f"{name}-master-0"] + [f"{name}-worker-{i}" for i in range(nodes - 1)]
    if kind == "trainjob":  # the JobSet's replicated job "node": <name>-node-0-<index> (+ a suffix)
        return [f"{name}-node-0-{i}" for i in range(nodes)]
    if kind == "rayjob":
        return [f"{name}-head"] + [f"{name}-worker-{i}" for i in range(nodes - 1)]
    return [f"{name}-{i}" for i in range(nodes)]


def requested_gpus(inv: Inventory, opts: ExportOptions, notes: list[str]) -> int:
    """GPUs per pod: --gpus-per-pod, else a count the inventory states, else an explicit nproc."""
    if opts.gpus_per_pod is not None:
        return opts.gpus_per_pod
    selections = {h.gpus for h in inv.hosts if h.gpus is not None}
    sel = selections.pop() if len(selections) == 1 and all(h.gpus is not None for h in inv.hosts) else \
        (inv.container.gpus if inv.container else "all")
    if isinstance(sel, tuple):
        return len(sel)
    if isinstance(sel, int) or (isinstance(sel, str) and sel.isdigit()):
        return int(sel)
    if sel == "none":
        return 0
    if isinstance(inv.job.nproc_per_node, int):
        notes.append(f"GPUs per pod = job.nproc_per_node = {inv.job.nproc_per_node} (--gpus-per-pod to change)")
        return inv.job.nproc_per_node
    raise UsageError("cannot tell how many GPUs each pod gets: gpus is all and nproc_per_node is auto",
                     "--gpus-per-pod", "pass --gpus-per-pod N (each pod requests N as nvidia.com/gpu and runs up "
                     "to N ranks), or set job.nproc_per_node")


def plan_pods(kind: str, name: str, inv: Inventory, opts: ExportOptions, notes: list[str]) -> tuple[Topology, int]:
    nodes = opts.nodes if opts.nodes is not None else len(inv.hosts)
    if nodes < 1:
        raise UsageError(f"--nodes {nodes} must be at least 1", "--nodes", "give the number of pods, e.g. --nodes 2")
    if opts.nodes is None:
        notes.append(f"{nodes} pod(s), one per inventory host (--nodes to change)")
    gpus = requested_gpus(inv, opts, notes)
    # CPU pods run the inventory's slots each where its hosts agree on one (nproc_per_node: auto)
    slots = {h.slots for h in inv.hosts}
    pod_slots = slots.pop() if len(slots) == 1 else None
    hosts = tuple(Host(name=n, address=n, slots=pod_slots) for n in pod_names(kind, name, nodes))
    rendezvous = RendezvousSpec(port=inv.rendezvous.port, join_timeout=opts.join_timeout or inv.rendezvous.join_timeout)
    planned = replace(inv, hosts=hosts, container=None, rendezvous=rendezvous)
    nic = pod.pod_nic(inv, opts)
    facts = {h.name: NodeFacts(gpu_ids=tuple(range(gpus)) if gpus else None, nic=nic) for h in hosts}
    try:
        topo = plan(planned, facts, strict=opts.strict)
    except TopologyError as exc:
        more = f"; or give each pod more GPUs: --gpus-per-pod {inv.job.nproc_per_node}" \
            if "invalid device ordinal" in exc.what and isinstance(inv.job.nproc_per_node, int) else ""
        fix = (exc.fix or "").replace("host(s)", "pod(s)").replace("e.g. with --limit", "with --nodes")
        raise TopologyError(exc.what, exc.where, fix + more) from None
    if gpus and topo.nproc_per_node != gpus:
        notes.append(f"each pod requests {topo.nproc_per_node} GPU(s), one per rank, not {gpus}: "
                     f"{gpus - topo.nproc_per_node} more would sit idle")
    notes.extend(n.replace(f"({hosts[0].name}:{topo.port})", f"(port {topo.port})") for n in topo.notes
                 if "no network interface known" not in n)  # said once, as a warning, by pod.env_entries
    return topo, (topo.nproc_per_node if gpus else 0)


# --------------------------------------------------------------------------- the command


def torchrun_command(inv: Inventory, topo: Topology, run_id: str, prompt: str, for_k8s: bool = True,
                     endpoint: str = ENDPOINT_REF, rank: str = RANK_REF) -> list[str]:
    """The torchrun argv of `clusterctl run`, with the endpoint and node rank left to the platform
    (`endpoint` and `rank`: the platform's references to them)."""
    out = []
    for arg in node_start(inv, topo, topo.nodes[0], run_id, prompt, logs=False).torchrun:
        if arg.startswith("--rdzv-endpoint="):
            out.append("--rdzv-endpoint=" + (endpoint if for_k8s else "{MASTER}"))
        elif arg.startswith("--node-rank="):
            out.append("--node-rank=" + (rank if for_k8s else "{NODE_RANK}"))
        elif arg.startswith("--local-addr="):
            continue  # static rendezvous ignores it, and a pod's address is known only once it runs
        else:
            out.append(pod.k8s_escape(arg) if for_k8s else arg)
    return out


# --------------------------------------------------------------------------- manifests


def build(kind: str, inv: Inventory, opts: ExportOptions, name: str, prompt: str) -> Export:
    if kind not in KINDS:
        raise UsageError(f"unknown export kind {kind!r}", "clusterctl export", f"use one of {', '.join(KINDS)}")
    if opts.with_runtime and kind != "trainjob":
        raise UsageError(f"--with-runtime is for a TrainJob, not a {kind}", "--with-runtime",
                         "drop --with-runtime, or export trainjob")
    notes: list[str] = []
    warnings: list[str] = []
    image = opts.image or (inv.container.image if inv.container and inv.container.image else None)
    if not image:
        raise UsageError("no image: the inventory has no container.image", "--image",
                         "pass --image registry/name:tag (the image with torch and the job's code)")
    topo, gpus = plan_pods(kind, name, inv, opts, notes)
    parts = pod.volumes(inv, opts, notes, warnings)
    from clusterctl.k8s.options import resource_warnings

    warnings.extend(resource_warnings(opts, parts.shm_bytes))
    if opts.host_network:
        notes.append(f"--host-network: each pod binds the node's ports directly; rendezvous port "
                     f"{inv.rendezvous.port} and NCCL's ports must be free on every node, and two pods of this or "
                     "another hostNetwork job on one node collide (keep one pod per node)")
    builder = {"pytorchjob": _pytorchjob, "trainjob": _trainjob, "rayjob": _rayjob, "job": _batch_job}[kind]
    export = Export(kind, name, [], topo, gpus, notes, warnings)
    export.documents = builder(inv, opts, name, image, topo, gpus, parts, prompt, export)
    return export


def _pytorchjob(inv, opts, name, image, topo, gpus, parts, prompt, export) -> list:
    parts.env, _ = pod.env_entries(inv, name, opts, [], export.notes, export.warnings)
    port = {"name": "pytorchjob-port", "containerPort": topo.port, "protocol": "TCP"}
    command = torchrun_command(inv, topo, name, prompt)
    template = {"metadata": {"labels": pod.labels(name)},
                "spec": pod.pod_spec([pod.container("pytorch", image, inv, parts, opts, gpus, command, port)],
                                     parts, opts, restart=None)}
    replicas = {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}
    if topo.nnodes > 1:
        replicas["Worker"] = {"replicas": topo.nnodes - 1, "restartPolicy": "Never", "template": template}
    export.notes.append("the training operator sets MASTER_ADDR (<job>-master-0), MASTER_PORT and RANK (pod index) "
                        "in every pod; torchrun reads them through $(MASTER_ADDR):$(MASTER_PORT) and $(RANK)")
    return [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": pod.metadata(name, opts),
             "spec": {"nprocPerNode": str(topo.nproc_per_node), "runPolicy": {"cleanPodPolicy": "None"},
                      "pytorchReplicaSpecs": replicas}}]


def _trainjob(inv, opts, name, image, topo, gpus, parts, prompt, export) -> list:
    command = torchrun_command(inv, topo, name, prompt, endpoint=trainjob.ENDPOINT_REF, rank=trainjob.RANK_REF)
    return trainjob.documents(inv, opts, name, image, topo, gpus, parts, command, export)


def _batch_job(inv, opts, name, image, topo, gpus, parts, prompt, export) -> list:
    service = name
    master = f"{name}-0.{service}" if topo.nnodes > 1 else "127.0.0.1"
    fixed = [("MASTER_ADDR", master), ("MASTER_PORT", str(topo.port)), ("WORLD_SIZE", str(topo.nnodes)),
             ("RANK", {"fieldRef": {"fieldPath": RANK_ANNOTATION}})]
    parts.env, _ = pod.env_entries(inv, name, opts, fixed, export.notes, export.warnings)
    command = torchrun_command(inv, topo, name, prompt)
    extra = {"subdomain": service} if topo.nnodes > 1 else {}
    port = {"name": "rendezvous", "containerPort": topo.port, "protocol": "TCP"}
    template = {"metadata": {"labels": pod.labels(name)},
                "spec": pod.pod_spec([pod.container("torchrun", image, inv, parts, opts, gpus, command, port)],
                                     parts, opts, extra=extra)}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": pod.metadata(name, opts),
           "spec": {"completionMode": "Indexed", "completions": topo.nnodes, "parallelism": topo.nnodes,
                    "backoffLimit": 0, "template": template}}
    if topo.nnodes == 1:
        return [job]
    export.notes.append(f"pods are {name}-0..{name}-{topo.nnodes - 1}; the headless Service {service} gives "
                        f"{master} (the index-0 pod) a DNS name; WORLD_SIZE counts pods and RANK is the "
                        "completion index (the `nodes` convention)")
    svc_meta = pod.metadata(service, opts)
    svc_meta["labels"].pop(pod.QUEUE_LABEL, None)  # Kueue admits the Job; the Service is not a workload
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": svc_meta,
           "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": pod.labels(name),
                    "ports": [{"name": "rendezvous", "port": topo.port, "targetPort": topo.port, "protocol": "TCP"}]}}
    return [svc, job]


# A RayJob's entrypoint runs once on the head: it reserves one bundle per node
# (STRICT_SPREAD), asks the first actor for its node's address, and runs the node's
# torchrun in every actor with that address and its index. Ray sets
# CUDA_VISIBLE_DEVICES in each actor to the GPUs of its bundle.
RAY_DRIVER = """\
import json, subprocess, sys
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
spec = json.loads(sys.argv[1])
ray.init()
bundle = {"CPU": 1, "GPU": spec["gpus"]} if spec["gpus"] else {"CPU": 1}
group = placement_group([bundle] * spec["nnodes"], strategy="STRICT_SPREAD")
ray.get(group.ready(), timeout=spec["timeout"])
@ray.remote
class Node:
    def address(self):
        return ray.util.get_node_ip_address()
    def run(self, argv, cwd):
        return subprocess.call(argv, cwd=cwd)
nodes = [Node.options(num_cpus=1, num_gpus=spec["gpus"], scheduling_strategy=PlacementGroupSchedulingStrategy(
    group, placement_group_bundle_index=i)).remote() for i in range(spec["nnodes"])]
master = ray.get(nodes[0].address.remote())
def argv(rank):
    out = list(spec["argv"])
    out[spec["endpoint_at"]] = "--rdzv-endpoint=%s:%d" % (master, spec["port"])
    out[spec["rank_at"]] = "--node-rank=%d" % rank
    return out
codes = ray.get([node.run.remote(argv(i), spec["workdir"]) for i, node in enumerate(nodes)])
print("clusterctl: torchrun exit codes per node:", codes, flush=True)
sys.exit(0 if not any(codes) else 1)
"""


def ray_entrypoint(inv: Inventory, topo: Topology, name: str, prompt: str, gpus: int) -> str:
    argv = torchrun_command(inv, topo, name, prompt, for_k8s=False)
    spec = {"nnodes": topo.nnodes, "gpus": gpus, "port": topo.port, "workdir": inv.job.workdir,
            "timeout": topo.join_timeout, "argv": argv,
            "endpoint_at": next(i for i, a in enumerate(argv) if a.startswith("--rdzv-endpoint=")),
            "rank_at": next(i for i, a in enumerate(argv) if a.startswith("--node-rank="))}
    return shlex.join(["python3", "-c", RAY_DRIVER, json.dumps(spec, ensure_ascii=False)])


def _rayjob(inv, opts, name, image, topo, gpus, parts, prompt, export) -> list:
    parts.env, _ = pod.env_entries(inv, name, opts, [], export.notes, export.warnings)

    def template(container_name: str) -> dict:
        return {"metadata": {"labels": pod.labels(name)},
                "spec": pod.pod_spec([pod.container(container_name, image, inv, parts, opts, gpus)], parts, opts,
                                     restart=None)}

    cluster = {"headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"}, "template": template("ray-head")},
               "workerGroupSpecs": []}
    if topo.nnodes > 1:
        workers = topo.nnodes - 1
        cluster["workerGroupSpecs"].append({"groupName": "nodes", "replicas": workers, "minReplicas": workers,
                                            "maxReplicas": workers, "rayStartParams": {},
                                            "template": template("ray-worker")})
    export.notes.append("the image must contain Ray (ray[default], the version the KubeRay operator expects): "
                        "the head runs one rank group too, and the entrypoint places one torchrun per pod")
    spec = {"entrypoint": ray_entrypoint(inv, topo, name, prompt, gpus), "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 3600, "rayClusterSpec": cluster}
    return [{"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": pod.metadata(name, opts), "spec": spec}]
