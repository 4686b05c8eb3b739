"""Kubeflow Trainer v2: a TrainJob (`trainer.kubeflow.org/v1alpha1`) on the `torch-distributed`
runtime, or on a ClusterTrainingRuntime emitted beside it (`--with-runtime`). Pure.

Trainer v2 replaces the per-framework jobs (PyTorchJob, ...) with one TrainJob that names a
runtime; the runtime holds the pod template (a JobSet whose replicated job `node` runs container
`node`), the TrainJob the image, command, env, node count and resources per node. The runtime's
torch plugin sets PET_MASTER_ADDR, PET_MASTER_PORT (29500) and PET_NODE_RANK in every pod and
refuses a TrainJob that sets them itself; torchrun reads them through Kubernetes' `$(VAR)`
expansion, as the PyTorchJob export reads MASTER_ADDR. A TrainJob has no field for volumes,
/dev/shm, working directory or placement: the stock runtime runs the image as it is, and those
settings travel only in a runtime of our own (`--with-runtime`, which the TrainJob then names).
"""
from __future__ import annotations

from clusterctl.k8s import pod

API_VERSION = "trainer.kubeflow.org/v1alpha1"
STOCK_RUNTIME = "torch-distributed"  # installed with Kubeflow Trainer (manifests/base/runtimes)
TRAINER_PORT = 29500  # constants.ContainerTrainerPort: the runtime's PET_MASTER_PORT
ENDPOINT_REF, RANK_REF = "$(PET_MASTER_ADDR):$(PET_MASTER_PORT)", "$(PET_NODE_RANK)"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"  # how the runtime marks the trainer's pods


def runtime_name(job: str) -> str:
    return f"{job}-torch"


def documents(inv, opts, name, image, topo, gpus, parts, command: list, export) -> list:
    """The TrainJob running `command` (torchrun, endpoint and rank as ENDPOINT_REF and RANK_REF),
    after its ClusterTrainingRuntime with --with-runtime."""
    parts.env, _ = pod.env_entries(inv, name, opts, [], export.notes, export.warnings)
    trainer = {"image": image, "command": command, "numNodes": topo.nnodes, "numProcPerNode": topo.nproc_per_node}
    if parts.env:
        trainer["env"] = parts.env
    resources = pod.resources(opts, gpus)
    if resources:
        trainer["resourcesPerNode"] = resources
    runtime = runtime_name(name) if opts.with_runtime else STOCK_RUNTIME
    job = {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": pod.metadata(name, opts),
           "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                   "name": runtime},
                    "trainer": trainer}}
    export.notes.append("the runtime's torch plugin sets PET_MASTER_ADDR, PET_MASTER_PORT and PET_NODE_RANK in every "
                        "pod; torchrun reads them through $(PET_MASTER_ADDR):$(PET_MASTER_PORT) and $(PET_NODE_RANK)")
    if topo.port != TRAINER_PORT:
        export.notes.append(f"the rendezvous port is the runtime's {TRAINER_PORT}, not rendezvous.port {topo.port}")
    if not opts.with_runtime:
        _stock_runtime_warnings(inv, opts, parts, export.warnings)
        return [job]
    export.notes.append(f"ClusterTrainingRuntime {runtime} carries the pod settings a TrainJob has no field for "
                        "(volumes, /dev/shm, working directory, placement); apply it first (cluster-scoped)")
    return [_runtime(inv, opts, name, image, gpus, parts), job]


def _runtime(inv, opts, name, image, gpus, parts) -> dict:
    """The stock torch-distributed runtime's shape, with this export's pod settings."""
    node = pod.container("node", image, inv, pod.PodParts(volumes=parts.volumes, mounts=parts.mounts), opts, 0)
    spec = pod.pod_spec([node], parts, opts, restart=None)
    replicated = {"name": "node", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                                               "spec": {"template": {"spec": spec}}}}
    metadata = {"name": runtime_name(name), "labels": {**pod.labels(name), "trainer.kubeflow.org/framework": "torch"}}
    return {"apiVersion": API_VERSION, "kind": "ClusterTrainingRuntime", "metadata": metadata,
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                     "template": {"spec": {"replicatedJobs": [replicated]}}}}


def _stock_runtime_warnings(inv, opts, parts, warnings: list[str]) -> None:
    """What the stock runtime drops, said before `kubectl apply`."""
    dropped = [what for what, present in (
        ("volumes and claims", any(v["name"] != pod.SHM_VOLUME for v in parts.volumes)),
        ("the /dev/shm size", True),
        (f"workingDir {inv.job.workdir}", bool(inv.job.workdir)),
        ("--node-selector", bool(opts.node_selector)), ("--toleration", bool(opts.tolerations)),
        ("--host-network", opts.host_network)) if present]
    warnings.append(f"the stock {STOCK_RUNTIME} runtime has no place for {', '.join(dropped)}: the pods run "
                    "without them (/dev/shm stays 64Mi, which NCCL outgrows); pass --with-runtime to emit a "
                    "ClusterTrainingRuntime that carries them")
