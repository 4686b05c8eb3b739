"""What `up` learned of the nodes, reused by `run` while it holds (preflight/node_facts.py): the
instance key (the node's boot, its container's start) read two ways that must agree, the record
kept per node, and when it no longer holds. The sandbox side (a restarted container is probed
again) is in tests/rehearsal/test_cluster_run.py."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from hypothesis import given, strategies as st

from clusterctl.inventory.load import parse_inventory
from clusterctl.plan.topology import NodeFacts
from clusterctl.preflight import facts
from clusterctl.preflight.node_facts import (FACTS_TTL_S, RememberedFacts, facts_path, instance_key, parse_instance,
                                             recall, remember, still_valid)
from clusterctl.state import State
from clusterctl.transport import BATCH_MARK

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tools" / "docker"
BOOT_ID = "5f0e5b8c-3f4a-4c1e-9c7e-1f2d3c4b5a69\n"  # the shape of /proc/sys/kernel/random/boot_id

INVENTORY = """
name: h20
hosts:
  - {name: gpu1, address: 198.18.0.11, gpus: [0, 1]}
  - {name: gpu2, address: 198.18.0.12, gpus: [0, 1]}
container: {image: "registry.local/wan:2.2", name: wan}
job: {command: [python3, generate.py], nproc_per_node: 2}
"""


def inventory(text: str = INVENTORY):
    return parse_inventory(text, "h20.yaml")


def batch(**sections: str) -> str:
    return "".join(f"{BATCH_MARK}{name}\n{text}" for name, text in sections.items())


def test_the_key_read_by_run_equals_the_key_up_took_from_docker_inspect_of_the_same_container():
    # up: the container's JSON (`docker inspect`, or the engine API's attrs: the same document)
    state = facts.parse_docker_inspect((FIXTURES / "inspect_running_net_host_shm16g.json").read_text())
    at_up = instance_key(BOOT_ID, state.instance)
    # run: `docker inspect -f '{{.Id}} {{.State.StartedAt}} {{.State.Running}}'` of that container
    document = json.loads((FIXTURES / "inspect_running_net_host_shm16g.json").read_text())[0]
    line = f"{document['Id']} {document['State']['StartedAt']} true\n"
    assert parse_instance(batch(boot_id=BOOT_ID, container=line), inventory()) == at_up
    assert at_up.startswith("5f0e5b8c-") and "2026-11-21T19:37:27.882127617Z" in at_up


def test_a_container_that_is_not_running_or_absent_has_no_key():
    inv = inventory()
    assert facts.parse_docker_inspect((FIXTURES / "inspect_created_gpus_all.json").read_text()).instance is None
    stopped = "c5da5d2079 2026-11-21T19:37:27.882127617Z false\n"
    assert parse_instance(batch(boot_id=BOOT_ID, container=stopped), inv) is None
    missing = (FIXTURES / "inspect_missing.txt").read_text()
    assert parse_instance(batch(boot_id=BOOT_ID, container=missing), inv) is None
    assert parse_instance(batch(container="c5da5d2079 2026-11-21T19:37:27Z true\n"), inv) is None  # no boot id


def test_without_a_container_the_boot_alone_is_the_key():
    inv = inventory(INVENTORY.replace('container: {image: "registry.local/wan:2.2", name: wan}\n', ""))
    assert parse_instance(batch(boot_id=BOOT_ID), inv) == instance_key(BOOT_ID, "")


@given(st.text())
def test_parse_instance_never_raises_on_whatever_a_node_prints(text):
    inv = inventory()
    for stdout in (text, batch(boot_id=text, container=text), batch(boot_id=BOOT_ID, container=text)):
        key = parse_instance(stdout, inv)
        assert key is None or isinstance(key, str)


FACTS = NodeFacts(gpu_ids=(0, 1), nic="ens1f0", address="198.18.0.11", hostname_on_loopback=True, ib_hcas=("mlx5_0",))


def test_remembered_facts_come_back_as_they_were_and_hold_only_for_the_same_instance(tmp_path):
    state, inv = State(tmp_path), inventory()
    remember(state, inv, {"gpu1": RememberedFacts("boot|c1 t1", FACTS, 1000.0),
                          "gpu2": RememberedFacts("boot|c2 t2", replace(FACTS, address="198.18.0.12"), 1000.0)})
    recalled = recall(state, inv, now=1000.0 + 60)
    assert recalled["gpu1"].facts == FACTS and recalled["gpu2"].facts.address == "198.18.0.12"
    # gpu2's container was restarted (another StartedAt): only gpu1's facts still hold
    assert still_valid(recalled, {"gpu1": "boot|c1 t1", "gpu2": "boot|c2 t3"}) == {"gpu1": FACTS}
    assert still_valid(recalled, {"gpu1": None, "gpu2": None}) == {}


def test_facts_older_than_the_ttl_or_of_an_edited_host_are_not_recalled_but_a_job_edit_keeps_them(tmp_path):
    state, inv = State(tmp_path), inventory()
    remember(state, inv, {"gpu1": RememberedFacts("k1", FACTS, 1000.0), "gpu2": RememberedFacts("k2", FACTS, 1000.0)})
    assert recall(state, inv, now=1000.0 + FACTS_TTL_S + 1) == {}
    moved = inventory(INVENTORY.replace("198.18.0.12, gpus: [0, 1]", "198.18.0.12, gpus: [2, 3]"))
    assert set(recall(state, moved, now=1001.0)) == {"gpu1"}
    other_job = inventory(INVENTORY.replace("generate.py", "train.py"))
    assert set(recall(state, other_job, now=1001.0)) == {"gpu1", "gpu2"}


def test_up_of_some_nodes_keeps_the_others_records_and_a_broken_record_means_probing(tmp_path):
    state, inv = State(tmp_path), inventory()
    remember(state, inv, {"gpu1": RememberedFacts("k1", FACTS, 1000.0), "gpu2": RememberedFacts("k2", FACTS, 1000.0)})
    remember(state, inv, {"gpu2": RememberedFacts("k2b", FACTS, 1005.0)})  # `up --limit gpu2`
    recalled = recall(state, inv, now=1010.0)
    assert (recalled["gpu1"].key, recalled["gpu2"].key) == ("k1", "k2b")
    facts_path(state, inv).write_text("{not json")
    assert recall(state, inv, now=1010.0) == {}
    facts_path(state, inv).write_text(json.dumps({"nodes": {"gpu1": {"key": "k1"}, "gpu2": ["odd"]}}))
    assert recall(state, inv, now=1010.0) == {}
