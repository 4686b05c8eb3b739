"""Image distribution between the nodes (registry/peers.py; issue 22): the rounds, the relay that
carries `docker save` to `docker load` node to node (run here on loopback: a client without the key gets
nothing, the right one gets every byte), and when `up` uses peers at all."""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusterctl.models import ContainerSpec, Host, Inventory
from clusterctl.registry import peers


def _inventory(n: int, distribute: str = "auto", container: bool = True) -> Inventory:
    hosts = tuple(Host(name=f"node{i}", address=f"198.18.0.{10 + i}") for i in range(1, n + 1))
    spec = ContainerSpec(image="r:5000/a:1", distribute=distribute) if container else None
    return Inventory(name="c", hosts=hosts, container=spec)


def test_auto_uses_peers_from_four_nodes_and_peers_or_registry_are_taken_as_said():
    assert not peers.peers_apply(_inventory(3), 3) and peers.peers_apply(_inventory(4), 4)
    assert peers.peers_apply(_inventory(2, "peers"), 2) and not peers.peers_apply(_inventory(64, "registry"), 64)
    assert not peers.peers_apply(_inventory(8, container=False), 8)


def test_the_holders_double_every_round_and_a_node_that_fails_twice_is_left_to_the_registry():
    plan = peers.Plan("sha256:x", ["n0"], [f"n{i}" for i in range(1, 16)])
    rounds = 0
    while plan.pairs():
        for _sender, receiver in plan.pairs():
            plan.received(receiver)
        rounds += 1
    assert rounds == 4 and len(plan.holders) == 16  # 1 -> 2 -> 4 -> 8 -> 16
    plan = peers.Plan("sha256:x", ["n0", "n1"], ["n2", "n3", "n4"])
    assert plan.pairs() == [("n0", "n2"), ("n1", "n3")]
    assert plan.failed("n2") is False and plan.needing == ["n3", "n4", "n2"]  # tried again, behind the others
    assert plan.failed("n2") is True and "n2" not in plan.needing


def test_a_transfer_that_brings_another_image_says_which_and_that_its_tag_was_removed():
    from clusterctl.models import HostResult, HostStatus

    ok = HostResult("node2", HostStatus.OK)
    said = peers.transfer_failure("node2", "node1", ok, "sha256:" + "b" * 64, "sha256:" + "a" * 64)
    assert "is sha256:bbbbbbbbbbbb, not sha256:aaaaaaaaaaaa" in said and "tag was removed" in said
    failed = HostResult("node2", HostStatus.FAILED, "clusterctl-relay: cannot reach 198.19.0.11:29502")
    assert peers.transfer_failure("node2", "node1", failed, "", "sha256:a") == (
        "from node1: clusterctl-relay: cannot reach 198.19.0.11:29502")
    assert peers.parse_sent("noise\nsent 1234\n") == 1234 and peers.parse_sent("") == 0


def test_the_inventory_takes_distribute_and_refuses_other_words(tmp_path):
    from clusterctl.errors import InventoryError
    from clusterctl.inventory.load import load_inventory

    path = tmp_path / "inv.yaml"
    path.write_text("name: c\nhosts: [{name: a, address: 198.18.0.10}]\ncontainer:\n  image: r/a:1\n"
                    "  distribute: peers\n")
    assert load_inventory(path).container.distribute == "peers"
    path.write_text(path.read_text().replace("peers", "torrent"))
    with pytest.raises(InventoryError) as error:
        load_inventory(path)
    assert "inv.yaml:5" in str(error.value.where) and "registry" in str(error.value)
    assert replace(_inventory(1).container, distribute="registry").distribute == "registry"


BASE = "sha256:88eb3c728e909dde2ca932ac827239e64b0c35303aa33c40d57b1cb8c40027e3"
NOTE = "sha256:c1a12e31c1c92f5d151342c30d290bceba5d20d5a6bf96ddc66a208b894c32c9"


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def test_only_the_lowest_layers_held_on_the_same_layers_below_are_skipped():
    a, b, c, d = (_sha(x) for x in "abcd")
    held = peers.held_chains(json.dumps([a, b]) + "\n" + json.dumps([d]) + "\nnot json\n")
    assert peers.chain_ids([a])[0] == a and peers.chain_ids([a, b])[1] == _sha(f"{a} {b}")
    assert peers.layers_to_skip([a, b, c], held) == tuple(sorted((a, b)))  # an update on top of a, b
    assert peers.layers_to_skip([b, c], held) == ()  # b held only on top of a: another layer here
    assert peers.layers_to_skip([d, a], held) == (d,)
    assert peers.layers_to_skip([a, c, a], held) == ()  # a is needed again above c: its file must go
    assert peers.held_chains("") == set() and peers.parse_layer_list('["x"]') == []


@given(st.lists(st.sampled_from([_sha(x) for x in "abcde"]), max_size=6),
       st.lists(st.lists(st.sampled_from([_sha(x) for x in "abcde"]), max_size=6), max_size=4))
def test_skipped_layers_are_always_a_prefix_of_the_image_that_the_node_holds(image, others):
    held = peers.held_chains("\n".join(json.dumps(layers) for layers in others))
    skip = peers.layers_to_skip(image, held)
    chains = peers.chain_ids(image)
    present = next((i for i, chain in enumerate(chains) if chain not in held), len(chains))
    assert set(skip) <= set(image[:present]) and not set(skip) & set(image[present:])
    if image in others:
        assert set(skip) == set(image)


class _Engines:
    """The engines of a fake cluster, answering distribute()'s commands: a receive succeeds once its
    upstream node has the image, unless the node is `broken` (its docker load fails) or the upstream
    failed (a chain cut there: the stream ends early)."""

    IMAGE_ID = "sha256:" + "1" * 64

    def __init__(self, n: int, holding=("node1",), broken=(), held_base=()):
        import threading

        self.address = {f"node{i}": f"198.18.0.{10 + i}" for i in range(1, n + 1)}
        self.by_address = {a: name for name, a in self.address.items()}
        self.state = {name: ("has" if name in holding else None) for name in self.address}
        self.broken, self.held_base = set(broken), set(held_base)
        self.skips: dict[str, list[str]] = {}  # sender -> the skip argument of each send
        self.changed = threading.Condition()

    def connect(self, host):
        engines = self

        class Transport:
            def run(self, cmd, on_line=None):
                return engines.answer(host.name, cmd.argv)

            def close(self):
                pass

        return Transport()

    def answer(self, name: str, argv):
        from clusterctl.models import CommandResult

        tag = argv[3] if len(argv) > 3 else ""
        ok = lambda out="": CommandResult(0, out, "", 0.0)  # noqa: E731
        if tag == "clusterctl-image-id":
            return ok(self.IMAGE_ID + "\n" if self.state[name] == "has" else "")
        if tag == "clusterctl-image-layers":
            return ok(json.dumps([BASE, NOTE]))
        if argv == ("sh", "-c", peers._HELD_LAYERS):
            return ok(json.dumps([BASE]) if name in self.held_base else "")
        if tag == "clusterctl-send":
            self.skips.setdefault(name, []).append(argv[9])
            return ok("sent 1000\n")
        if tag == "clusterctl-receive":
            upstream = self.by_address[argv[5]]
            with self.changed:
                self.state[name] = None
                self.changed.wait_for(lambda: self.state[upstream] is not None, timeout=5)
                cut = self.state[upstream] != "has"
                self.state[name] = "failed" if cut or name in self.broken else "has"
                self.changed.notify_all()
            if self.state[name] == "has":
                return ok("Loaded image\n")
            detail = "Error processing tar file: unexpected EOF" if cut else "open layer.tar: no such file"
            return CommandResult(1, "", detail, 0.0)
        if tag == "sh":  # ip route get: the node's own address on the job network
            return ok(json.dumps([{"dst": argv[4], "prefsrc": self.address[name], "dev": "eth0"}]))
        return ok()


def _distribute(engines: _Engines, n: int):
    from clusterctl.executor import Connections

    inventory = _inventory(n, "peers")
    hosts = list(inventory.hosts)
    never = lambda transport, host: pytest.fail("the seed holds the image: nothing is pulled")  # noqa: E731
    return peers.distribute(hosts, inventory, Connections(engines.connect), never)


def test_a_node_that_fails_in_the_chain_is_left_to_the_registry_and_the_ones_after_it_get_the_image_in_rounds():
    engines = _Engines(5, broken={"node3"}, held_base={"node2", "node3", "node4", "node5"})
    results = _distribute(engines, 5)
    sources = {name: (r.data.get("distribute") or {}).get("source") for name, r in results.items()}
    assert sources["node1"] == "present" and sources["node2"] == "peer:node1", sources
    assert sources["node4"].startswith("peer:") and sources["node5"].startswith("peer:"), sources
    assert results["node3"].succeeded and "registry pull follows" in results["node3"].detail
    assert engines.state["node4"] == engines.state["node5"] == "has"
    # the chain and node4/node5's rounds leave out the base layer they hold; node3, whose load of the
    # trimmed tar failed, is sent every layer when it is tried again
    sends = [skip for skips in engines.skips.values() for skip in skips]
    assert sends.count(BASE.split(":")[1]) == len(sends) - 1 and sends.count("") == 1, engines.skips
