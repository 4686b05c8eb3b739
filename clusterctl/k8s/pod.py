"""The pod every exported manifest runs: container, env, volumes, resources, placement. Pure.

Kubernetes expands `$(NAME)` in a container's command, args and env values, and reads
`$$` as a literal `$`. Every `$` that comes from the inventory or the prompt is
therefore doubled (`k8s_escape`); only the references clusterctl means, such as
`$(MASTER_ADDR)`, stay single.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Optional

from clusterctl.inventory.values import parse_size
from clusterctl.models import EnvVar, Inventory
from clusterctl.k8s.options import ExportOptions

PULL_POLICY = {"always": "Always", "missing": "IfNotPresent", "never": "Never"}
SHM_VOLUME = "dshm"
POD_NIC = "eth0"  # the pod network's interface inside every pod (CNI convention)


def k8s_escape(text: str) -> str:
    return text.replace("$", "$$")


def secret_name(job: str) -> str:
    return f"{job}-secrets"


@dataclass
class PodParts:
    """Built once per export, shared by every replica's pod template."""

    volumes: list = field(default_factory=list)
    mounts: list = field(default_factory=list)
    env: list = field(default_factory=list)
    secret_keys: list = field(default_factory=list)
    shm_bytes: Optional[int] = None


# --------------------------------------------------------------------------- env


def inventory_env(inv: Inventory) -> tuple[EnvVar, ...]:
    """container.env, then job.env (which wins), one entry per name."""
    merged: dict[str, EnvVar] = {}
    for var in (*(inv.container.env if inv.container else ()), *inv.job.env):
        merged[var.name] = var
    return tuple(merged.values())


def env_entries(inv: Inventory, job: str, opts: ExportOptions, fixed: list[tuple[str, object]],
                notes: list[str], warnings: list[str]) -> tuple[list, list]:
    """(env list, secret keys). `fixed` entries (platform variables) come first, as given."""
    entries = [({"name": n, "value": v} if isinstance(v, str) else {"name": n, "valueFrom": v}) for n, v in fixed]
    taken = {n for n, _ in fixed}
    secrets = []
    for var in inventory_env(inv):
        if var.name in taken:
            warnings.append(f"env {var.name} from the inventory is dropped: the manifest sets it for the rendezvous")
            continue
        if var.is_secret:
            secrets.append(var.name)
            entries.append({"name": var.name, "valueFrom": {"secretKeyRef": {"name": secret_name(job), "key": var.name}}})
        else:
            entries.append({"name": var.name, "value": k8s_escape(var.value)})
        taken.add(var.name)
    for name, value in _nic_env(inv, opts, taken, warnings):
        entries.append({"name": name, "value": value})
    if secrets:
        literals = " ".join(f"--from-literal={name}=..." for name in secrets)
        notes.append(f"secret env ({', '.join(secrets)}) is referenced, never inlined: create it first with "
                     f"`kubectl create secret generic {secret_name(job)} {literals}`")
    return entries, secrets


def pod_nic(inv: Inventory, opts: ExportOptions) -> Optional[str]:
    """The interface between pods: eth0 on the pod network; on the host network the inventory's common nic:."""
    if not opts.host_network:
        return POD_NIC
    nics = {h.nic for h in inv.hosts}
    return nics.pop() if len(nics) == 1 and None not in nics else None


def _nic_env(inv: Inventory, opts: ExportOptions, taken: set, warnings: list[str]) -> list[tuple[str, str]]:
    if {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"} <= taken:
        return []
    nic = pod_nic(inv, opts)
    if opts.host_network:
        if nic is None:
            warnings.append("--host-network: the pods use the nodes' own interfaces and the inventory names no common "
                            "nic:, so NCCL and Gloo pick one themselves (they may pick docker0): set "
                            "NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME in job.env")
            return []
    return [(name, nic) for name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME") if name not in taken]


# --------------------------------------------------------------------------- volumes


def volumes(inv: Inventory, opts: ExportOptions, notes: list[str], warnings: list[str]) -> PodParts:
    """/dev/shm as memory-backed emptyDir; container.volumes as hostPath; --pvc as claims (they win)."""
    parts = PodParts()
    _shm(inv, parts, notes)
    pvc_mounts = {pvc.mount for pvc in opts.pvcs}
    for index, spec in enumerate(inv.container.volumes if inv.container else ()):
        source, target, *mode = spec.split(":")
        target = posixpath.normpath(target)
        if target in pvc_mounts:
            notes.append(f"volume {spec} replaced by the claim mounted at {target} (--pvc)")
            continue
        if not source.startswith("/"):
            warnings.append(f"volume {spec}: the docker named volume {source!r} has no Kubernetes equivalent and is "
                            f"left out; mount a claim there with --pvc CLAIM:{target}")
            continue
        name = f"host-{index}"
        parts.volumes.append({"name": name, "hostPath": {"path": source}})
        parts.mounts.append(_mount(name, target, mode == ["ro"]))
    for index, pvc in enumerate(opts.pvcs):
        name = f"pvc-{index}"
        parts.volumes.append({"name": name, "persistentVolumeClaim": {"claimName": pvc.claim, "readOnly": pvc.read_only}})
        parts.mounts.append(_mount(name, pvc.mount, pvc.read_only))
    if inv.container and inv.container.volumes and any("hostPath" in v for v in parts.volumes):
        notes.append("container.volumes became hostPath volumes: the paths must exist on every node the pods "
                     "land on (or mount claims there with --pvc)")
    outputs = posixpath.normpath(inv.job.outputs)
    if not any(outputs == m["mountPath"] or outputs.startswith(m["mountPath"].rstrip("/") + "/") for m in parts.mounts):
        warnings.append(f"job.outputs {inv.job.outputs} is on no volume: outputs vanish with the pods; "
                        f"mount a claim there with --pvc CLAIM:{inv.job.outputs}")
    return parts


def _shm(inv: Inventory, parts: PodParts, notes: list[str]) -> None:
    container = inv.container
    empty_dir = {"medium": "Memory"}
    if container is not None and container.shm_size:
        parts.shm_bytes = parse_size(container.shm_size)
        empty_dir["sizeLimit"] = size_quantity(parts.shm_bytes)
    elif container is not None and container.ipc == "host":
        notes.append("container.ipc is host: /dev/shm is a memory-backed emptyDir without a size limit "
                     "(bounded by the pod's memory limit)")
    else:
        parts.shm_bytes = inv.checks.shm_min_bytes
        empty_dir["sizeLimit"] = size_quantity(parts.shm_bytes)
        notes.append(f"container.shm_size is not set: /dev/shm gets {empty_dir['sizeLimit']} (checks.shm_min); "
                     "the default 64Mi fails NCCL with 'No space left on device'")
    parts.volumes.append({"name": SHM_VOLUME, "emptyDir": empty_dir})
    parts.mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})


def _mount(name: str, path: str, read_only: bool) -> dict:
    mount = {"name": name, "mountPath": path}
    if read_only:
        mount["readOnly"] = True
    return mount


def size_quantity(size: int) -> str:
    """Bytes -> an exact binary quantity (2147483648 -> 2Gi)."""
    for suffix, scale in (("Ti", 2 ** 40), ("Gi", 2 ** 30), ("Mi", 2 ** 20), ("Ki", 2 ** 10)):
        if size % scale == 0:
            return f"{size // scale}{suffix}"
    return str(size)


# --------------------------------------------------------------------------- container and pod


def resources(opts: ExportOptions, gpus: int) -> dict:
    requests, limits = {}, {}
    for key, value in (("cpu", opts.cpu), ("memory", opts.memory)):
        if value is not None:
            requests[key], limits[key] = value.request, value.limit
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)  # extended resources: the request defaults to the limit
    out = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def container(name: str, image: str, inv: Inventory, parts: PodParts, opts: ExportOptions, gpus: int,
              command: Optional[list] = None, port: Optional[dict] = None) -> dict:
    entry: dict = {"name": name, "image": image}
    if inv.container is not None:
        entry["imagePullPolicy"] = PULL_POLICY[inv.container.pull]
    if command is not None:
        entry["command"] = command
    if inv.job.workdir:
        entry["workingDir"] = inv.job.workdir
    if parts.env:
        entry["env"] = parts.env
    if port is not None:
        entry["ports"] = [port]
    res = resources(opts, gpus)
    if res:
        entry["resources"] = res
    entry["volumeMounts"] = parts.mounts
    return entry


def pod_spec(containers: list, parts: PodParts, opts: ExportOptions, restart: Optional[str] = "Never",
             extra: Optional[dict] = None) -> dict:
    spec: dict = {}
    if restart:
        spec["restartPolicy"] = restart
    spec.update(extra or {})
    if opts.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"  # keeps cluster DNS (Service names) resolvable
    if opts.node_selector:
        spec["nodeSelector"] = dict(opts.node_selector)
    if opts.tolerations:
        spec["tolerations"] = [t.to_manifest() for t in opts.tolerations]
    spec["containers"] = containers
    spec["volumes"] = parts.volumes
    return spec


QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def metadata(name: str, opts: ExportOptions) -> dict:
    """A namespaced object's metadata; with --queue, Kueue's label (it admits every kind exported here)."""
    meta = {"name": name}
    if opts.namespace:
        meta["namespace"] = opts.namespace
    meta["labels"] = labels(name)
    if opts.queue:
        meta["labels"][QUEUE_LABEL] = opts.queue
    return meta


def labels(job: str) -> dict:
    return {"app.kubernetes.io/name": job, "app.kubernetes.io/instance": job, "app.kubernetes.io/managed-by": "clusterctl"}
