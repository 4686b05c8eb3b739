"""The exports (`clusterctl export`): the run's plan rendered for another scheduler: a Slurm batch script
(the Slurm backend's Plan without an allocation, backends/slurm.py), or Kubernetes manifests (k8s/)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from clusterctl.backends.base import RunRequest
from clusterctl.errors import UsageError
from clusterctl.outcome import Outcome


def refuse_kubernetes_options(**given) -> None:
    """A batch script has no place for the Kubernetes-only options (`--queue`, `--with-runtime`)."""
    named = [f"--{name.replace('_', '-')}" for name, value in given.items() if value]
    if named:
        raise UsageError(f"{' and '.join(named)} are for Kubernetes manifests, not sbatch", named[0],
                         "drop them (Slurm's partition and account come from the inventory's scheduler: section)")


def sbatch(session, inventory, prompt: str, name: Optional[str], strict: bool, output: Optional[Path]) -> Outcome:
    """The Slurm Plan's batch script, on stdout or written to `output` (executable)."""
    from clusterctl.backends.slurm import SlurmBackend

    plan = SlurmBackend(session).plan(inventory, RunRequest(prompt, strict=strict), None, name=name)
    if output:
        _write(output, plan.script)
        output.chmod(0o755)
    elif not session.renderer.json_mode:
        sys.stdout.write(plan.script)
    for note in plan.notes:
        session.renderer.message(f"note: {note}", "yellow")
    session.renderer.message(f"sbatch: {plan.nnodes} node(s) x {plan.nproc_per_node} rank(s) = world size "
                             f"{plan.world_size}" + (f", written to {output}" if output else ""), "green")
    return Outcome({"ok": True, "kind": "sbatch", "nnodes": plan.nnodes, "nproc_per_node": plan.nproc_per_node,
                    "world_size": plan.world_size, "file": str(output) if output else None,
                    "script": plan.script, "notes": list(plan.notes)})


def manifests(session, kind: str, inventory, options, name: str, prompt: str, output: Optional[Path]) -> Outcome:
    """A Kubeflow PyTorchJob, KubeRay RayJob or indexed Job (+ Service), on stdout or written to `output`."""
    from clusterctl import k8s
    from clusterctl.plan.launcher import require_torchrun

    require_torchrun(inventory, f"export {kind}")
    export = k8s.build(kind, inventory, options, name, prompt)
    text = to_yaml(export.documents)
    if output:
        _write(output, text)
    elif not session.renderer.json_mode:
        sys.stdout.write(text)
    for warning in export.warnings:
        session.renderer.message(f"warning: {warning}", "bold yellow")
    for note in export.notes:
        session.renderer.message(f"note: {note}", "yellow")
    session.renderer.message(f"{kind} {name}: {export.topology.nnodes} pod(s) x {export.topology.nproc_per_node} "
                             f"rank(s) = world size {export.topology.world_size}"
                             + (f", written to {output}" if output else ""), "green")
    return Outcome({"ok": True, "kind": kind, "name": name, "nnodes": export.topology.nnodes,
                    "nproc_per_node": export.topology.nproc_per_node, "world_size": export.topology.world_size,
                    "gpus_per_pod": export.gpus_per_pod, "file": str(output) if output else None,
                    "manifests": export.documents, "notes": export.notes, "warnings": export.warnings})


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
