"""`clusterctl export trainjob`: Kubeflow Trainer v2 TrainJob (+ ClusterTrainingRuntime with
--with-runtime), checked against the published CRDs (tests/fixtures/crds/, kubeflow/trainer at
8c0f505; its README names each file's source, commit and hash), with unknown fields refused as the
API server's structural pruning would drop them."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from string import Template

import pytest
import yaml

from unit.test_export import PROMPT, arg_after, export, k8s_expand

CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "crds"


@lru_cache(maxsize=None)
def _crd_schema(file: str) -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((CRDS / file).read_text(), Loader=loader)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]


def _unknown_fields(value, schema: dict, path: str = "") -> list[str]:
    """Fields the schema does not declare (the API server prunes them silently)."""
    if isinstance(value, dict) and "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out = [f"{path}.{k}" for k in value if k not in schema["properties"]]
        for key, item in value.items():
            if key in schema["properties"]:
                out += _unknown_fields(item, schema["properties"][key], f"{path}.{key}")
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [e for i, item in enumerate(value) for e in _unknown_fields(item, schema["items"], f"{path}[{i}]")]
    return []


def assert_valid(doc: dict) -> None:
    import jsonschema

    file = {"TrainJob": "trainer.kubeflow.org_trainjobs.yaml",
            "ClusterTrainingRuntime": "trainer.kubeflow.org_clustertrainingruntimes.yaml"}[doc["kind"]]
    schema = _crd_schema(file)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in jsonschema.Draft7Validator(schema).iter_errors(doc)]
    assert not errors, errors
    assert not _unknown_fields(doc, schema)


def test_the_unknown_field_check_catches_a_misspelled_trainer_field():
    doc = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "x"},
           "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNode": 2}}}
    assert _unknown_fields(doc, _crd_schema("trainer.kubeflow.org_trainjobs.yaml")) == [".spec.trainer.numNode"]


def test_a_trainjob_on_the_torch_distributed_runtime_has_the_plans_nodes_resources_image_and_command(tmp_path, capsys):
    code, docs, out = export(tmp_path, "trainjob", "--name", "wan22-t2v", "--namespace", "hu", "--gpus-per-pod", "4",
                             "--cpu", "8:16", "--memory", "128Gi", "--queue", "team-a")
    assert code == 0
    (job,) = docs
    assert_valid(job)
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and job["kind"] == "TrainJob"
    assert job["metadata"]["namespace"] == "hu" and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    spec = job["spec"]
    assert spec["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                  "name": "torch-distributed"}
    trainer = spec["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 4)
    assert trainer["image"] == "registry.local/wan2-2:1014"
    assert trainer["resourcesPerNode"] == {"requests": {"cpu": "8", "memory": "128Gi"},
                                           "limits": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "4"}}
    command = trainer["command"]
    assert "--nproc-per-node=4" in command and "--nnodes=2:2" in command
    assert arg_after(command, "--ulysses_size") == "8"
    assert "--rdzv-endpoint=$(PET_MASTER_ADDR):$(PET_MASTER_PORT)" in command and "--node-rank=$(PET_NODE_RANK)" in command
    env = {e["name"]: e for e in trainer["env"]}
    assert env["NCCL_DEBUG"] == {"name": "NCCL_DEBUG", "value": "INFO"}
    assert not [name for name in env if name.startswith("PET_")]  # the runtime refuses a TrainJob that sets them
    err = capsys.readouterr().err
    assert "--with-runtime" in err and "/dev/shm" in err  # what the stock runtime drops is said


def test_the_prompt_reaches_a_trainjobs_ranks_byte_for_byte(tmp_path):
    code, (job,), _ = export(tmp_path, "trainjob", "--gpus-per-pod", "4")
    env = {"PET_MASTER_ADDR": "wan22-node-0-0.wan22", "PET_MASTER_PORT": "29500", "PET_NODE_RANK": "1"}
    after_k8s = [k8s_expand(a, env) for a in job["spec"]["trainer"]["command"]]
    assert "--rdzv-endpoint=wan22-node-0-0.wan22:29500" in after_k8s and "--node-rank=1" in after_k8s
    script = after_k8s.index("generate.py")
    job_argv = [Template(a).safe_substitute(local_rank="0") for a in after_k8s[script:]]
    assert arg_after(job_argv, "--prompt") == PROMPT


def test_with_runtime_a_cluster_training_runtime_carries_the_pod_settings_and_the_trainjob_names_it(tmp_path):
    code, docs, _ = export(tmp_path, "trainjob", "--gpus-per-pod", "4", "--with-runtime", "--node-selector", "gpu=on",
                           "--pvc", "wan-out:/workspace/output", "--namespace", "hu", "--queue", "team-a")
    assert code == 0
    runtime, job = docs
    for doc in docs:
        assert_valid(doc)
    assert runtime["kind"] == "ClusterTrainingRuntime" and "namespace" not in runtime["metadata"]  # cluster-scoped
    assert "kueue.x-k8s.io/queue-name" not in runtime["metadata"]["labels"]
    assert job["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"] == "wan22-torch"
    assert runtime["spec"]["mlPolicy"]["torch"] == {}
    (replicated,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert replicated["name"] == "node"  # the torch plugin finds the trainer by these names
    pod = replicated["template"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "node" and container["workingDir"] == "/workspace"
    assert pod["nodeSelector"] == {"gpu": "on"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes[mounts["/workspace/output"]]["persistentVolumeClaim"]["claimName"] == "wan-out"
    assert "env" not in container and "command" not in container  # the TrainJob's trainer gives those


def test_a_secret_reaches_a_trainjob_as_a_secret_reference_only(tmp_path):
    from unit.test_export import SECRET_INVENTORY

    code, (job,), out = export(tmp_path, "trainjob", "--gpus-per-pod", "4", text=SECRET_INVENTORY)
    assert code == 0
    assert_valid(job)
    env = {e["name"]: e for e in job["spec"]["trainer"]["env"]}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "wan22-secrets",
                                                                                  "key": "HF_TOKEN"}}}
    assert "hf_sekrit" not in out.read_text()


def test_the_queue_label_goes_on_a_pytorchjob_too_and_a_bad_queue_name_is_one_clear_error(tmp_path, capsys):
    code, (job,), _ = export(tmp_path, "pytorchjob", "--gpus-per-pod", "4", "--queue", "team-a")
    assert code == 0 and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    code, _, out = export(tmp_path, "trainjob", "--gpus-per-pod", "4", "--queue", "Team A!")
    assert code == 2 and not out.exists()
    assert "not a Kueue queue name" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["pytorchjob", "sbatch"])
def test_with_runtime_is_refused_for_other_kinds(tmp_path, capsys, kind):
    code, _, out = export(tmp_path, kind, "--gpus-per-pod", "4", "--with-runtime")
    assert code == 2 and not out.exists()
    assert "--with-runtime" in capsys.readouterr().err


def test_a_cpu_trainjob_requests_no_gpus(tmp_path):
    code, (job,), _ = export(tmp_path, "trainjob", "--gpus-per-pod", "0", "--nodes", "2", nproc=2)
    assert code == 0
    assert_valid(job)
    trainer = job["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 2)
    assert "nvidia.com/gpu" not in str(trainer.get("resourcesPerNode"))
