"""`clusterctl up` / `status` / `down` on the rehearsal cluster (Issue 3): pull from the private
registry, the --net=host container as configured and kept when unchanged, stale-rank cleanup
scoped by clusterctl's marker, one node's different image, a GPU request without the NVIDIA
runtime."""
from __future__ import annotations

import subprocess
import sys

import pytest

from clusterctl_helpers import Cli, container_of, docker_client, stop, variant, wait_until

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

NODES = ("node1", "node2", "node3")
ENV = {"CLUSTERCTL_TEST_ENV": "set by test_cluster_up"}
STACK_BYTES = 64 << 20


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    return Cli(tmp_path_factory.mktemp("up-state"))


@pytest.fixture(scope="module")
def inventory(sandbox, tmp_path_factory):
    """The sandbox inventory plus a container env var (to see it in `docker inspect`)."""
    return variant(sandbox, tmp_path_factory.mktemp("up-inventory") / "inventory.yaml",
                   lambda d: d["container"].setdefault("env", {}).update(ENV))


def _container_ids(sb, name="cc-sandbox") -> dict:
    return {node: (c.id if (c := container_of(sb, node, name)) else None) for node in NODES}


def _status(cli, inventory) -> dict:
    code, doc = cli.json("status", "-i", str(inventory))
    assert code == 0, doc
    return {name: (entry["container"], entry["ranks_running"]) for name, entry in doc["hosts"].items()}


def _memlock_hard_limit(cli, inventory) -> dict:
    """What `ulimit -H -l` says in each node's SSH session (KiB or 'unlimited')."""
    code, doc = cli.json("exec", "-i", str(inventory), "--", "sh", "-c", "ulimit -H -l")
    assert code == 0, doc
    return {name: entry["stdout"].strip() for name, entry in doc["hosts"].items()}


def test_up_pulls_from_the_registry_and_starts_net_host_containers_as_configured(sandbox, cli, inventory):
    cli.json("down", "-i", str(inventory))  # containers of earlier tests go; then the image
    for node in NODES:
        client = docker_client(sandbox, node)
        try:
            if client.images.list(name=sandbox.image):
                client.images.remove(sandbox.image, force=True)
        finally:
            client.close()
    assert _status(cli, inventory) == {n: ("absent", 0) for n in NODES}

    code, doc = cli.json("up", str(inventory))
    assert code == 0, doc
    memlock = _memlock_hard_limit(cli, inventory)
    for node in NODES:
        entry = doc["hosts"][node]
        assert entry["status"] == "changed"
        assert entry["image"] == sandbox.image
        assert any(d.startswith("198.18.0.1:5000/sandbox/base@sha256:") for d in entry["repo_digests"])
        container = container_of(sandbox, node, "cc-sandbox")
        assert container is not None and container.status == "running"
        assert container.id.startswith(entry["container_id"])
        host_config, config = container.attrs["HostConfig"], container.attrs["Config"]
        assert host_config["NetworkMode"] == "host"
        assert f"{sandbox.shared_outputs}:/workspace/output" in host_config["Binds"]
        assert any(b.startswith("/usr:/usr:ro") for b in host_config["Binds"])
        assert host_config["ShmSize"] == 256 << 20
        assert "CLUSTERCTL_TEST_ENV=set by test_cluster_up" in config["Env"]
        ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in host_config["Ulimits"]}
        assert ulimits["stack"] == (STACK_BYTES, STACK_BYTES)
        expected = -1 if memlock[node] == "unlimited" else int(memlock[node]) * 1024
        assert ulimits["memlock"] == (expected, expected)  # capped to the node's hard limit
        labels = config["Labels"]
        assert labels["clusterctl.managed"] == "true" and labels["clusterctl.cluster"] == "sandbox"
        assert len(labels["clusterctl.config-hash"]) == 16
    assert _status(cli, inventory) == {n: ("running", 0) for n in NODES}


def test_up_again_changes_nothing_and_keeps_the_containers(sandbox, cli, inventory):
    before = _container_ids(sandbox)
    code, doc = cli.json("up", str(inventory))
    assert code == 0, doc
    assert {n: e["status"] for n, e in doc["hosts"].items()} == {n: "ok" for n in NODES}
    assert _container_ids(sandbox) == before


def test_up_kills_a_leftover_rank_but_spares_lookalikes_and_its_own_session(sandbox, cli, inventory):
    marker = ["CLUSTERCTL_CLUSTER=sandbox", "CLUSTERCTL_HOST=node2"]
    leftover = lookalike = other_cluster = None
    try:
        leftover = subprocess.Popen(sandbox.ns_argv("node2", ["env", *marker, "CLUSTERCTL_RUN_ID=old", "sleep", "300"]))
        lookalike = subprocess.Popen(sandbox.ns_argv("node2", [
            sys.executable, "-c", "import time; time.sleep(300)", "examples/generate.py", "--prompt", "CLUSTERCTL_HOST=node2"]))
        other_cluster = subprocess.Popen(sandbox.ns_argv("node2", [
            "env", "CLUSTERCTL_CLUSTER=another", "CLUSTERCTL_HOST=node2", "sleep", "301"]))
        wait_until(lambda: _status(cli, inventory)["node2"][1] == 1, 10, what="the planted rank to show in status")
        assert _status(cli, inventory) == {"node1": ("running", 0), "node2": ("running", 1), "node3": ("running", 0)}

        code, doc = cli.json("up", str(inventory))
        assert code == 0, doc  # the up's own SSH sessions survived the cleanup
        node2 = doc["hosts"]["node2"]
        assert node2["status"] == "changed"
        assert [p["pid"] for p in node2["killed"]] == [leftover.pid]
        assert "killed 1 stale process" in node2["detail"] and "sleep 300" in node2["detail"]
        assert leftover.wait(timeout=10) is not None
        assert lookalike.poll() is None and other_cluster.poll() is None
        assert {doc["hosts"][n]["status"] for n in ("node1", "node3")} == {"ok"}
        assert _status(cli, inventory) == {n: ("running", 0) for n in NODES}
    finally:
        for proc in (leftover, lookalike, other_cluster):
            stop(proc)


def test_a_node_holding_another_image_under_the_same_tag_fails_up_naming_both_ids(sandbox, cli, inventory):
    repository, tag = sandbox.image.rsplit(":", 1)
    other_ref = f"{repository}:node3-variant"
    sandbox.push_image(other_ref, {"/etc/variant": b"only on node3\n"})
    client = docker_client(sandbox, "node3")
    try:
        expected_id = client.images.get(sandbox.image).id
        other = client.images.pull(other_ref)
        other.tag(repository, tag)  # node3 now holds different content under the inventory's tag
        assert client.images.get(sandbox.image).id == other.id != expected_id

        code, doc = cli.json("up", str(inventory))
        assert code == 1 and doc["ok"] is False
        node3 = doc["hosts"]["node3"]
        assert node3["status"] == "failed"
        assert other.id in node3["detail"] and expected_id in node3["detail"]
        assert "node1, node2" in node3["detail"]
        assert (node3["image_id"], node3["expected_image_id"]) == (other.id, expected_id)
        assert {doc["hosts"][n]["status"] for n in ("node1", "node2")} <= {"ok", "changed"}
    finally:
        client.images.pull(sandbox.image)  # the registry's content under the tag again
        client.images.remove(other_ref)
        client.close()
    code, doc = cli.json("up", str(inventory))
    assert code == 0 and doc["hosts"]["node3"]["status"] == "ok", doc


def test_asking_for_gpus_on_engines_without_the_nvidia_runtime_fails_and_leaves_no_container(sandbox, cli, tmp_path,
                                                                                           inventory):
    gpus = variant(sandbox, tmp_path / "gpus.yaml", lambda d: d["container"].update(gpus="all", name="cc-gpus"))
    code, doc = cli.json("up", str(gpus))
    assert code == 1 and doc["ok"] is False
    for node in NODES:
        entry = doc["hosts"][node]
        assert entry["status"] == "failed"
        assert entry["detail"].startswith("docker_no_gpu_runtime:")
        assert "nvidia-container-toolkit" in entry["detail"] and "container.gpus: none" in entry["detail"]
        assert entry["cause"] == "docker_no_gpu_runtime"
        [request] = entry["device_requests"]
        assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
        assert container_of(sandbox, node, "cc-gpus") is None  # nothing half-created
    assert _status(cli, inventory) == {n: ("running", 0) for n in NODES}  # the cluster's own containers untouched


def test_down_stops_ranks_and_removes_the_containers(sandbox, cli, inventory):
    rank = subprocess.Popen(sandbox.ns_argv("node1", [
        "env", "CLUSTERCTL_CLUSTER=sandbox", "CLUSTERCTL_HOST=node1", "CLUSTERCTL_RUN_ID=x", "sleep", "300"]))
    try:
        wait_until(lambda: _status(cli, inventory)["node1"] == ("running", 1), 10, what="the rank in status")
        code, doc = cli.json("down", "-i", str(inventory))
        assert code == 0, doc
        assert {n: e["status"] for n, e in doc["hosts"].items()} == {n: "changed" for n in NODES}
        assert [p["pid"] for p in doc["hosts"]["node1"]["killed"]] == [rank.pid]
        assert rank.wait(timeout=10) is not None
        assert _container_ids(sandbox) == {n: None for n in NODES}
        assert _status(cli, inventory) == {n: ("absent", 0) for n in NODES}
    finally:
        stop(rank)
