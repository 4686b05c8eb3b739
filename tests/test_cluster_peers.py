"""`container.distribute: peers` on the rehearsal cluster (issue 22): with the image gone from node2
(reached as the sudo user) and node3 (behind the bastion), `up` gets it to them from node1, node to
node on the job network, verified by image ID, and says where each node's image came from; no relay
is left. (The sandbox's image is small: the bytes and the speed are measured by bench/, not here.)"""
from __future__ import annotations

import pytest

from clusterctl_helpers import Cli, docker_client, load_inventory, processes_with, variant

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]


def test_up_with_peers_brings_the_image_to_the_nodes_without_it_from_a_node_that_has_it(sandbox, tmp_path):
    cli = Cli(tmp_path / "state")
    inventory = variant(sandbox, tmp_path / "peers.yaml", lambda doc: doc["container"].update(distribute="peers"))
    image = load_inventory(sandbox)["container"]["image"]
    code, doc = cli.json("up", str(inventory))
    assert code == 0, doc
    try:
        code, _ = cli.json("down", "-i", str(inventory))
        assert code == 0
        for node in ("node2", "node3"):
            docker_client(sandbox, node).images.remove(image, force=True)
        code, doc = cli.json("up", str(inventory))
        assert code == 0 and doc["ok"], doc
        sources = {name: host["distribute"]["source"] for name, host in doc["hosts"].items()}
        assert sources["node1"] == "present", sources
        assert sources["node2"].startswith("peer:") and sources["node3"].startswith("peer:"), sources
        ids = {docker_client(sandbox, node).images.get(image).id for node in ("node1", "node2", "node3")}
        assert len(ids) == 1 and doc["hosts"]["node2"]["distribute"]["image_id"] in ids
        assert doc["hosts"]["node3"]["distribute"]["bytes"] > 0
        assert not processes_with("clusterctl-send") and not processes_with("clusterctl-receive")
    finally:
        cli.json("down", "-i", str(inventory))
