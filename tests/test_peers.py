"""Image distribution between the nodes (registry/peers.py; issue 22): the rounds, the relay that
carries `docker save` to `docker load` node to node (run here on loopback: a token-less client gets
nothing, the right one gets every byte), and when `up` uses peers at all."""
from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import replace

import pytest

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_relay_sends_every_byte_to_the_client_with_the_token_and_nothing_to_one_without(tmp_path):
    data = os.urandom(3 << 20)
    port = _free_port()
    sender = subprocess.Popen([sys.executable, "-c", peers.RELAY, "send", "127.0.0.1", str(port), "t0ken", "20"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:  # an intruder first: it sends a wrong token and gets nothing
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as intruder:
                    intruder.sendall(b"guess\n")
                    intruder.settimeout(2)
                    assert intruder.recv(10) == b""
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        receiver = subprocess.Popen([sys.executable, "-c", peers.RELAY, "recv", "127.0.0.1", str(port), "t0ken", "20"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        sender.stdin.write(data)
        sender.stdin.close()
        got, err = receiver.communicate(timeout=30)
        assert receiver.returncode == 0 and hashlib.sha256(got).digest() == hashlib.sha256(data).digest(), err
        assert sender.wait(timeout=30) == 0 and sender.stdout.read().decode() == f"sent {len(data)}\n"
        with socket.socket() as s, pytest.raises(ConnectionRefusedError):  # nothing listens any more
            s.connect(("127.0.0.1", port))
    finally:
        sender.kill()


def test_a_relay_nobody_comes_to_ends_by_itself_and_a_receiver_with_no_sender_too():
    port = _free_port()
    started = time.monotonic()
    sender = subprocess.run([sys.executable, "-c", peers.RELAY, "send", "127.0.0.1", str(port), "x", "1"],
                            input=b"", capture_output=True, timeout=30)
    receiver = subprocess.run([sys.executable, "-c", peers.RELAY, "recv", "127.0.0.1", str(port), "x", "1"],
                              capture_output=True, timeout=30)
    assert sender.returncode != 0 and b"no receiver came" in sender.stderr
    assert receiver.returncode != 0 and b"cannot reach 127.0.0.1" in receiver.stderr
    assert time.monotonic() - started < 15


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


def test_a_node_in_the_chain_loads_every_byte_and_passes_every_byte_on(tmp_path):
    data = os.urandom(2 << 20)
    up, down = _free_port(), _free_port()
    relay = [sys.executable, "-c", peers.RELAY]
    sender = subprocess.Popen([*relay, "send", "127.0.0.1", str(up), "a", "20"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    middle = subprocess.Popen([*relay, "pipe", "127.0.0.1", str(up), "a", "20", "127.0.0.1", str(down), "b"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    last = subprocess.Popen([*relay, "recv", "127.0.0.1", str(down), "b", "20"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        sender.stdin.write(data)
        sender.stdin.close()
        loaded_middle, err_middle = middle.communicate(timeout=60)
        loaded_last, err_last = last.communicate(timeout=60)
        assert middle.returncode == 0 and loaded_middle == data, err_middle
        assert last.returncode == 0 and loaded_last == data, err_last
        assert sender.wait(timeout=30) == 0
    finally:
        for proc in (sender, middle, last):
            proc.kill()
