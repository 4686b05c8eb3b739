"""The inventory YAML (CONTRACT.md's format) describing the sandbox's nodes."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence

import yaml

from clusterctl.sandbox.image import python_volumes
from clusterctl.sandbox.layout import CONTAINER_NAME, Layout, Node

REPO = Path(__file__).resolve().parents[2]
CONTAINER_OUTPUTS = "/workspace/output"
JOB_COMMAND = ["examples/generate.py"]
# The example job, shaped like Wan2.2's generate.py (same flags as inventory/local.yaml).
JOB_ARGS = ["--task", "t2v-tiny", "--size", "64*48", "--frame_num", "8", "--ulysses_size", "{world_size}",
            "--num_heads", "{heads}", "--prompt", "{prompt}", "--save_file", "{outputs}/{run_id}.gif"]
NPROC_PER_NODE = 2


def attention_heads(node_count: int) -> int:
    """24 heads (world sizes 2, 4, 6, 8 all fit), more where the whole cluster's world size needs them."""
    return math.lcm(24, NPROC_PER_NODE * node_count)


def host_entry(node: Node, bastion: Optional[Node]) -> dict:
    """How a user would write the node: its SSH address, and user/port/bastion where they differ."""
    entry: dict = {"name": node.name, "address": node.listen_address}
    if node.sudo_user:
        entry.update(user=node.ssh_user, port=node.ssh_port)
    if node.behind_bastion and bastion is not None:
        entry["proxy_jump"] = f"root@{bastion.address}"
    return entry


def inventory(layout: Layout, nodes: Sequence[Node], image: Optional[str], bastion: Optional[Node] = None) -> dict:
    """With an image: ranks in a `--net=host` container; without: ranks on the node itself.
    Outputs go to one directory of the machine, shared by all nodes like an NFS mount."""
    doc: dict = {
        "name": "sandbox",
        "ssh": {
            "user": "root",
            "port": 22,
            "identity_file": str(layout.client_key),
            "known_hosts": str(layout.known_hosts),
            "host_key_policy": "strict",
        },
        "hosts": [host_entry(n, bastion) for n in nodes],
    }
    examples = REPO / "examples"
    if image:
        volumes = python_volumes() + [f"{layout.shared_outputs}:{CONTAINER_OUTPUTS}"]
        if examples.is_dir():
            volumes.append(f"{examples}:/workspace/examples:ro")
        doc["container"] = {
            "image": image,
            "name": CONTAINER_NAME,
            "gpus": "none",
            "shm_size": "256m",
            "volumes": volumes,
        }
        job = {"workdir": "/workspace", "command": list(JOB_COMMAND), "outputs": CONTAINER_OUTPUTS}
    else:
        job = {"workdir": str(REPO), "command": list(JOB_COMMAND), "outputs": str(layout.shared_outputs)}
    heads = attention_heads(len(nodes))
    job.update(args=[a.replace("{heads}", str(heads)) for a in JOB_ARGS],
               nproc_per_node=NPROC_PER_NODE, world_size_divides=heads)
    # the job's traffic on the fabric network: the master's address there, not its SSH address
    doc["rendezvous"] = {"port": 29500, "address": nodes[0].fabric_address}
    doc["checks"] = {"ib": "auto", "shm_min": "128m", "disk_min": "256m"}
    doc["job"] = job
    return doc


def write(layout: Layout, nodes: Sequence[Node], image: Optional[str], bastion: Optional[Node] = None) -> Path:
    layout.shared_outputs.mkdir(exist_ok=True)
    layout.shared_outputs.chmod(0o1777)  # ranks of a non-root SSH user write there too (no container)
    text = "# Written by `clusterctl sandbox up`; rewritten on every up.\n"
    text += yaml.safe_dump(inventory(layout, nodes, image, bastion), sort_keys=False, default_flow_style=False,
                           width=200)
    layout.inventory.write_text(text)
    return layout.inventory
