"""`clusterctl export`: manifests checked against the real CRD / batch schemas, and the
seeds' PyTorchJob story (1 GPU with nproc 5, 2 x 7 ranks for 40 heads, the final 2 x 4)."""
from __future__ import annotations

import json
import shlex
from functools import lru_cache
from pathlib import Path
from string import Template

import pytest
import yaml

from clusterctl.cli import main
from clusterctl.errors import TopologyError, UsageError
from clusterctl.inventory.load import load_inventory
from clusterctl.k8s import (
    ExportOptions, build, parse_node_selector, parse_pvc, parse_request_limit, parse_toleration, quantity_value,
)
from clusterctl.k8s.manifests import RAY_DRIVER
from clusterctl.plan.topology import NodeFacts, plan

SCHEMAS = Path(__file__).resolve().parents[3] / "shared" / "schemas"
WAN_INVENTORY = """\
name: wan22
hosts:
  - {name: gpu-a, address: 10.0.0.1}
  - {name: gpu-b, address: 10.0.0.2}
container:
  image: registry.local/wan2-2:1014
  shm_size: 2g
  volumes: ["/data/Wan-AI/Wan2.2-T2V-A14B:/Wan2.2-T2V-A14B:ro", "/data/output:/workspace/output"]
  env: {NCCL_DEBUG: INFO}
rendezvous: {port: 29500}
job:
  workdir: /workspace
  command: [generate.py]
  args: [--task, t2v-A14B, --size, "832*480", --ckpt_dir, /Wan2.2-T2V-A14B, --dit_fsdp, --t5_fsdp,
         --ulysses_size, "{world_size}", --prompt, "{prompt}", --save_file, "{outputs}/{run_id}.mp4"]
  nproc_per_node: NPROC
  world_size_divides: 40
  outputs: /workspace/output
"""
PROMPT = 'A cat walks on the grass, realistic style. $HOME $(id) $$ ${local_rank} "quoted"'


# --------------------------------------------------------------------------- schemas


def _schemas() -> Path:
    if not (SCHEMAS / "kubeflow.org_pytorchjobs.yaml").exists():
        pytest.skip(f"the shared schemas are not beside the checkout ({SCHEMAS} is missing)")
    return SCHEMAS


@lru_cache(maxsize=None)
def _crd_validator(file: str):
    import jsonschema

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the pure-Python loader takes seconds on these
    crd = yaml.load((_schemas() / file).read_text(), Loader=loader)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"])


def assert_valid(doc: dict) -> None:
    if doc["kind"] == "PyTorchJob":
        validators = [_crd_validator("kubeflow.org_pytorchjobs.yaml")]
    elif doc["kind"] == "RayJob":
        validators = [_crd_validator("ray.io_rayjobs.yaml")]
    elif doc["kind"] == "Job":
        validators = _job_validators()
    else:
        raise AssertionError(f"no schema for {doc['kind']}")
    for validator in validators:
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]
        assert not errors, errors


@lru_cache(maxsize=None)
def _job_validators():
    import jsonschema

    strict = json.loads((_schemas() / "job-batch-v1.json").read_text())
    openapi = json.loads((_schemas() / "apis__batch__v1_openapi.k8s-1.35.json").read_text())
    return [jsonschema.Draft7Validator(strict), jsonschema.Draft7Validator(
        {"$ref": "#/components/schemas/io.k8s.api.batch.v1.Job", "components": openapi["components"]})]


def test_the_strict_job_schema_rejects_a_misspelled_field():
    assert not _job_validators()[0].is_valid({"apiVersion": "batch/v1", "kind": "Job",
                                                            "spec": {"backofLimit": 0, "template": {}}})


# --------------------------------------------------------------------------- helpers


def write_inventory(tmp_path: Path, nproc="auto", text=WAN_INVENTORY) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(text.replace("NPROC", str(nproc)))
    (tmp_path / "prompt.txt").write_text(PROMPT + "\n")
    return path


def export(tmp_path: Path, kind: str, *options: str, nproc="auto", text=WAN_INVENTORY, capsys=None):
    inventory = write_inventory(tmp_path, nproc, text)
    out = tmp_path / f"{kind}.yaml"
    code = main([ "export", kind, "-i", str(inventory), "--prompt-file", str(tmp_path / "prompt.txt"), "-o", str(out),
                 *options], env={"CLUSTERCTL_STATE": str(tmp_path / "state")})
    docs = list(yaml.safe_load_all(out.read_text())) if out.exists() else []
    return code, docs, out


def pod_templates(doc: dict) -> list[dict]:
    if doc["kind"] == "PyTorchJob":
        return [r["template"] for r in doc["spec"]["pytorchReplicaSpecs"].values()]
    if doc["kind"] == "RayJob":
        cluster = doc["spec"]["rayClusterSpec"]
        return [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    return [doc["spec"]["template"]]


def arg_after(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def k8s_expand(text: str, env: dict) -> str:
    """Kubernetes' $(VAR) expansion of command/args: $$ -> $, $(NAME) -> value, else literal."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text) and text[i + 1] == "$":
            out.append("$")
            i += 2
        elif text[i] == "$" and i + 1 < len(text) and text[i + 1] == "(" and ")" in text[i:]:
            end = text.index(")", i)
            name = text[i + 2:end]
            out.append(env.get(name, text[i:end + 1]))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


# --------------------------------------------------------------------------- the seeds' final layout


def test_seeds_final_pytorchjob_two_pods_of_four_gpus_validates_and_has_every_setting(tmp_path):
    code, docs, out = export(tmp_path, "pytorchjob", "--name", "wan22-t2v-distributed4", "--namespace", "hu",
                             "--gpus-per-pod", "4", "--cpu", "8:16", "--memory", "128Gi", "--node-selector", "gpu=on")
    assert code == 0
    (job,) = docs
    assert_valid(job)
    assert job["apiVersion"] == "kubeflow.org/v1" and job["metadata"] == {
        "name": "wan22-t2v-distributed4", "namespace": "hu", "labels": job["metadata"]["labels"]}
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 1
    assert job["spec"]["nprocPerNode"] == "4"
    for template in pod_templates(job):
        spec = template["spec"]
        assert spec["nodeSelector"] == {"gpu": "on"}
        (container,) = spec["containers"]
        assert container["name"] == "pytorch"  # the operator finds the port and injects env by this name
        assert container["resources"] == {"requests": {"cpu": "8", "memory": "128Gi"},
                                          "limits": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "4"}}
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in spec["volumes"]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        command = container["command"]
        assert "--nproc-per-node=4" in command and "--nnodes=2:2" in command
        assert arg_after(command, "--ulysses_size") == "8"  # world size 2 x 4, divides 40 heads
        assert "--rdzv-endpoint=$(MASTER_ADDR):$(MASTER_PORT)" in command and "--node-rank=$(RANK)" in command
        assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 29500, "protocol": "TCP"}]
        assert not any("gpumem" in key for key in container["resources"]["limits"])
    assert "gpu: 'on'" in out.read_text()  # a string, not YAML 1.1's boolean on


def test_the_prompt_reaches_the_job_byte_for_byte_through_kubernetes_and_torchrun_expansion(tmp_path):
    code, (job,), _ = export(tmp_path, "pytorchjob", "--gpus-per-pod", "4")
    command = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    after_k8s = [k8s_expand(a, {"MASTER_ADDR": "wan22-master-0", "MASTER_PORT": "29500", "RANK": "1"}) for a in command]
    assert "--rdzv-endpoint=wan22-master-0:29500" in after_k8s and "--node-rank=1" in after_k8s
    script = after_k8s.index("generate.py")
    job_argv = [Template(a).safe_substitute(local_rank="0") for a in after_k8s[script:]]  # what torchrun does
    assert arg_after(job_argv, "--prompt") == PROMPT


# --------------------------------------------------------------------------- the seeds' failing layouts


def test_one_gpu_per_pod_with_nproc_five_is_refused_before_anything_is_written(tmp_path, capsys):
    code, docs, out = export(tmp_path, "pytorchjob", "--gpus-per-pod", "1", nproc=5)
    assert code == 2 and not out.exists()
    err = capsys.readouterr().err
    assert "invalid device ordinal" in err and "--gpus-per-pod 5" in err


def test_two_pods_of_seven_for_forty_heads_shrink_to_a_divisor_with_a_note_like_the_planner(tmp_path):
    inv = load_inventory(write_inventory(tmp_path))
    export_ = build("pytorchjob", inv, ExportOptions(gpus_per_pod=7), "wan22", PROMPT)
    planned = plan(inv, {h.name: NodeFacts(gpu_ids=tuple(range(7)), nic="eth0") for h in inv.hosts})
    assert export_.topology.nproc_per_node == planned.nproc_per_node == 5
    assert export_.topology.world_size == 10 and export_.gpus_per_pod == 5
    assert any("does not divide world_size_divides=40" in n for n in export_.notes)
    assert any("requests 5 GPU(s), one per rank, not 7" in n for n in export_.notes)
    (job,) = export_.documents
    assert_valid(job)
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "5"
    assert arg_after(container["command"], "--ulysses_size") == "10"


def test_two_pods_of_seven_for_forty_heads_is_an_error_when_strict_or_explicit(tmp_path):
    inv = load_inventory(write_inventory(tmp_path))
    with pytest.raises(TopologyError) as strict:
        build("pytorchjob", inv, ExportOptions(gpus_per_pod=7, strict=True), "wan22", PROMPT)
    assert "world size 14" in strict.value.what and "5 (world 10)" in strict.value.fix
    explicit = load_inventory(write_inventory(tmp_path, nproc=7))
    with pytest.raises(TopologyError, match="does not divide world_size_divides=40"):
        build("job", explicit, ExportOptions(gpus_per_pod=7), "wan22", PROMPT)


def test_gpus_per_pod_cannot_be_guessed_from_all_and_auto(tmp_path):
    inv = load_inventory(write_inventory(tmp_path))
    with pytest.raises(UsageError, match="--gpus-per-pod|cannot tell"):
        build("pytorchjob", inv, ExportOptions(), "wan22", PROMPT)


# --------------------------------------------------------------------------- RayJob, batch Job


def test_rayjob_has_a_head_and_workers_and_an_entrypoint_that_places_one_torchrun_per_pod(tmp_path):
    code, (job,), _ = export(tmp_path, "rayjob", "--gpus-per-pod", "4", "--nodes", "5", "--memory", "128Gi",
                             "--cpu", "8:16")
    assert code == 0
    assert_valid(job)
    cluster = job["spec"]["rayClusterSpec"]
    (workers,) = cluster["workerGroupSpecs"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 4
    for template in pod_templates(job):
        (container,) = template["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert "command" not in container  # KubeRay writes the `ray start` command itself
    python, flag, driver, spec_text = shlex.split(job["spec"]["entrypoint"])
    assert (python, flag, driver) == ("python3", "-c", RAY_DRIVER)
    compile(driver, "<ray driver>", "exec")
    spec = json.loads(spec_text)
    assert spec["nnodes"] == 5 and spec["gpus"] == 4
    assert spec["argv"][spec["endpoint_at"]].startswith("--rdzv-endpoint=")
    assert spec["argv"][spec["rank_at"]].startswith("--node-rank=")
    assert arg_after(spec["argv"], "--prompt") == PROMPT.replace("$", "$$")  # torchrun halves it again


def test_batch_job_is_indexed_with_a_headless_service_for_the_master(tmp_path):
    code, (service, job), _ = export(tmp_path, "job", "--gpus-per-pod", "4", "--cpu", "8:16", "--memory", "128Gi",
                                     "--node-selector", "gpu=on", "--toleration", "nvidia.com/gpu:NoSchedule")
    assert code == 0
    assert_valid(job)
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 2
    pod_spec = spec["template"]["spec"]
    assert pod_spec["subdomain"] == service["metadata"]["name"] == "wan22"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == spec["template"]["metadata"]["labels"]
    assert pod_spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    env = {e["name"]: e for e in pod_spec["containers"][0]["env"]}
    assert env["MASTER_ADDR"]["value"] == "wan22-0.wan22" and env["WORLD_SIZE"]["value"] == "2"
    assert "job-completion-index" in env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert env["NCCL_SOCKET_IFNAME"]["value"] == "eth0" and env["NCCL_DEBUG"]["value"] == "INFO"


def test_single_pod_job_needs_no_service(tmp_path):
    code, docs, _ = export(tmp_path, "job", "--gpus-per-pod", "4", "--nodes", "1")
    assert code == 0 and [d["kind"] for d in docs] == ["Job"]
    assert_valid(docs[0])


# --------------------------------------------------------------------------- env, volumes, network


SECRET_INVENTORY = WAN_INVENTORY.replace("env: {NCCL_DEBUG: INFO}",
                                         "env: {NCCL_DEBUG: INFO, HF_TOKEN: hf_sekrit, PLAIN: {value: pw1, secret: true}}")


def test_secret_env_becomes_a_secret_reference_and_is_never_inlined(tmp_path):
    code, (job,), out = export(tmp_path, "pytorchjob", "--gpus-per-pod", "4", text=SECRET_INVENTORY)
    assert code == 0
    assert_valid(job)
    env = {e["name"]: e for e in pod_templates(job)[0]["spec"]["containers"][0]["env"]}
    for name in ("HF_TOKEN", "PLAIN"):
        assert env[name] == {"name": name, "valueFrom": {"secretKeyRef": {"name": "wan22-secrets", "key": name}}}
    text = out.read_text()
    assert "hf_sekrit" not in text and "pw1" not in text


def test_volumes_are_hostpaths_and_a_pvc_replaces_the_one_at_its_path(tmp_path):
    code, (job,), _ = export(tmp_path, "pytorchjob", "--gpus-per-pod", "4", "--pvc", "wan-out:/workspace/output")
    spec = pod_templates(job)[0]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert volumes[mounts["/Wan2.2-T2V-A14B"]["name"]]["hostPath"] == {"path": "/data/Wan-AI/Wan2.2-T2V-A14B"}
    assert mounts["/Wan2.2-T2V-A14B"]["readOnly"] is True
    assert volumes[mounts["/workspace/output"]["name"]]["persistentVolumeClaim"]["claimName"] == "wan-out"
    assert not any(v.get("hostPath", {}).get("path") == "/data/output" for v in spec["volumes"])


def test_host_network_is_set_with_cluster_dns_and_a_port_note(tmp_path, capsys):
    code, (job,), _ = export(tmp_path, "pytorchjob", "--gpus-per-pod", "4", "--host-network")
    assert code == 0
    assert_valid(job)
    spec = pod_templates(job)[0]["spec"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    err = capsys.readouterr().err
    assert "29500" in err and "collide" in err and "NCCL_SOCKET_IFNAME" in err


def test_oversized_requests_are_warned_about(tmp_path, capsys):
    code, _, _ = export(tmp_path, "pytorchjob", "--gpus-per-pod", "4", "--memory", "2Ti", "--cpu", "300")
    assert code == 0
    err = capsys.readouterr().err
    assert "Insufficient memory" in err and "Insufficient cpu" in err


def test_cpu_only_export_requests_no_gpus(tmp_path):
    inventory = (Path(__file__).resolve().parents[2] / "inventory" / "local.yaml")
    code = main(["export", "job", "-i", str(inventory), "--image", "python:3.11", "--gpus-per-pod", "0",
                 "--prompt-file", str(write_inventory(tmp_path).parent / "prompt.txt"),
                 "-o", str(tmp_path / "cpu.yaml"), "--nodes", "2"], env={"CLUSTERCTL_STATE": str(tmp_path / "s")})
    assert code == 0
    job = list(yaml.safe_load_all((tmp_path / "cpu.yaml").read_text()))[-1]
    assert_valid(job)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in container.get("resources", {}).get("limits", {})
    assert "--nproc-per-node=2" in container["command"]


def test_missing_prompt_file_for_a_prompt_placeholder_is_a_clear_error(tmp_path, capsys):
    inventory = write_inventory(tmp_path)
    code = main(["export", "pytorchjob", "-i", str(inventory), "--gpus-per-pod", "4"],
                env={"CLUSTERCTL_STATE": str(tmp_path / "s")})
    assert code == 2 and "--prompt-file" in capsys.readouterr().err


def test_json_output_carries_the_manifests(tmp_path, capsys):
    inventory = write_inventory(tmp_path)
    code = main(["export", "job", "--json", "-i", str(inventory), "--gpus-per-pod", "4", "--prompt-file",
                 str(tmp_path / "prompt.txt")], env={"CLUSTERCTL_STATE": str(tmp_path / "s")})
    document = json.loads(capsys.readouterr().out)
    assert code == 0 and document["ok"] and document["world_size"] == 8
    assert [m["kind"] for m in document["manifests"]] == ["Service", "Job"]


# --------------------------------------------------------------------------- option parsing


def test_option_parsing():
    assert parse_request_limit("8:16", "--cpu").request == "8"
    assert parse_request_limit("128Gi", "--memory").limit == "128Gi"
    with pytest.raises(UsageError, match="larger than the limit"):
        parse_request_limit("16:8", "--cpu")
    with pytest.raises(UsageError, match="quantity"):
        parse_request_limit("lots", "--memory")
    assert quantity_value("1Ti", "x") == 2 ** 40 and quantity_value("500m", "x") == 0.5
    assert parse_node_selector(["gpu=on", "zone=a,rack=r1"]) == (("gpu", "on"), ("zone", "a"), ("rack", "r1"))
    assert parse_toleration("nvidia.com/gpu=present:NoSchedule").to_manifest() == {
        "key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    assert parse_toleration("dedicated").to_manifest() == {"key": "dedicated", "operator": "Exists"}
    with pytest.raises(UsageError, match="effect"):
        parse_toleration("a=b:Sometimes")
    assert parse_pvc("models:/models:ro") == parse_pvc("models:/models/:ro")
    with pytest.raises(UsageError):
        parse_pvc("Models:relative")
