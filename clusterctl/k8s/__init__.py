"""Kubernetes manifests from an inventory: Kubeflow PyTorchJob (v1) and TrainJob (Trainer v2), KubeRay
RayJob, indexed batch Job.

Pure builders (no cluster access): `build(kind, inventory, options, name, prompt)`
returns the documents to `kubectl apply`, with the notes and warnings to print.
"""
from clusterctl.k8s.manifests import KINDS, NAME_MAX, Export, build, pod_names, ray_entrypoint, torchrun_command
from clusterctl.k8s.options import (
    ExportOptions, PvcMount, RequestLimit, Toleration, default_name, job_name, namespace, parse_node_selector,
    options_from_args, parse_pvc, parse_request_limit, parse_toleration, quantity_value,
)

__all__ = [
    "KINDS", "NAME_MAX", "Export", "ExportOptions", "PvcMount", "RequestLimit", "Toleration", "build",
    "default_name", "job_name", "namespace", "options_from_args", "parse_node_selector", "parse_pvc", "parse_request_limit",
    "parse_toleration", "pod_names", "quantity_value", "ray_entrypoint", "torchrun_command",
]
