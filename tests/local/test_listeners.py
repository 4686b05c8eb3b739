"""The one listener discipline (clusterctl/node/listener.py) against the attacks of issue 47 (M1), on
loopback with the real programs: a crowd of idle or byte-trickling connections from the very address
of the key holder (a keeper, mpirun's agent on the master, the receiving relay) never keeps it out."""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from clusterctl.node import node_agent
from clusterctl.node import node_mpi_gate as gate
from clusterctl.registry import peers

from local.test_launch_mpirun import gate_accepting
from local.test_relay_security import FIXTURE_IMAGE, _free_port, _listening, _relay_receiver, _session
from local.test_security_hardening import ATTACK_S, LOST_AFTER_S, supervised_on_loopback
from unit.test_launch_mpirun import KEY


class Trickle:
    """`count` connections from `source` to `port`, each sending one byte every `every_s` (never a whole
    request), each reopened at once when the listener drops it: the slow-byte lockout of issue 47."""

    def __init__(self, source: str, target: str, port: int, count: int, every_s: float):
        self.source, self.target, self.port, self.count, self.every_s = source, target, port, count, every_s
        self.stop, self.opened = threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Trickle":
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join(10)

    def _open(self) -> socket.socket | None:
        sock = socket.socket()
        sock.bind((self.source, 0))
        sock.settimeout(1)
        try:
            sock.connect((self.target, self.port))
        except OSError:
            sock.close()
            return None
        self.opened += 1
        return sock

    def _run(self) -> None:
        held: list = []
        try:
            while not self.stop.is_set():
                alive = []
                for sock in held:
                    try:
                        sock.send(b"P")
                        alive.append(sock)
                    except OSError:  # dropped by the listener: the attacker comes straight back
                        sock.close()
                while len(alive) < self.count and not self.stop.is_set():
                    sock = self._open()
                    if sock is None:
                        break
                    alive.append(sock)
                held = alive
                self.stop.wait(self.every_s)
        finally:
            for sock in held:
                sock.close()


@pytest.mark.slow
def test_sixteen_slow_byte_connections_from_the_keepers_own_address_neither_lock_it_out_nor_fail_the_run(
        tmp_path, reliability):
    row = reliability("the slow-byte lockout: 16 connections from the keeper's own address, each sending one byte "
                      "every 4 s and reopened at once when dropped, against a detached run's real supervisor",
                      f"the keeper is still heard every second; the run stays running past lost_after_s "
                      f"({LOST_AFTER_S} s)",
                      section="Hostile input")
    with supervised_on_loopback(tmp_path) as run:
        with Trickle("127.0.0.1", "127.0.0.1", run.port, node_agent.MAX_PER_ADDRESS, 4.0) as attack:
            time.sleep(ATTACK_S)  # past lost_after_s: a locked-out keeper would be lost, the run failed
            document = run.document()
        assert document["state"] == "running", document
        assert document["nodes"]["n1"]["seen_s_ago"] < 5, document
    lines = (tmp_path / "supervisor.log").read_text(errors="replace").splitlines()
    assert not any("Traceback" in line for line in lines)
    row.observe(f"{attack.opened} slow connections opened from 127.0.0.1 in {ATTACK_S} s; the run still running, its "
                f"keeper heard {document['nodes']['n1']['seen_s_ago']} s before (before: every slot of the address "
                f"held, the keeper refused, the run failed after lost_after_s, {LOST_AFTER_S} s here)")


def test_the_gate_takes_the_masters_agent_past_idle_and_trickling_connections_from_the_masters_own_address():
    port, taken, waiter = gate_accepting(30)
    idle = [socket.create_connection(("127.0.0.2", port), timeout=5, source_address=("127.0.0.3", 0)) for _ in range(12)]
    try:
        with Trickle("127.0.0.3", "127.0.0.2", port, 4, 1.0):
            time.sleep(0.5)
            with socket.create_connection(("127.0.0.2", port), timeout=5, source_address=("127.0.0.3", 0)) as master:
                gate.send_command(master, KEY, b"orted --hnp-uri x")  # before: the first idle one held the gate 10 s
                waiter.join(15)
    finally:
        for sock in idle:
            sock.close()
    conn, command = taken["result"]
    conn.close()
    assert command == b"orted --hnp-uri x"


@pytest.mark.slow
def test_the_receiving_relay_gets_in_past_trickling_connections_from_its_own_address(tmp_path, reliability):
    row = reliability("20 connections from the receiver's own address to a sending relay, each sending one byte "
                      "every 2 s and reopened when dropped", "the receiver gets every byte (no fall back to the "
                      "registry)", section="Hostile input")
    data = tmp_path / "image.tar"
    data.write_bytes(bytes(range(256)) * 4096)
    port, key = _free_port(), peers.new_key()
    sender = _session(peers.send_command(FIXTURE_IMAGE, "127.0.0.1", port, key), data)
    try:
        _listening(port)
        with Trickle("127.0.0.1", "127.0.0.1", port, 20, 2.0):
            time.sleep(3)
            loaded = tmp_path / "loaded"
            receiver = _relay_receiver(key, port, loaded)
            assert receiver.wait(timeout=60) == 0, receiver.stderr.read()
        assert loaded.read_bytes() == data.read_bytes() and sender.wait(timeout=60) == 0
    finally:
        sender.kill()
    row.observe(f"the receiver got all {data.stat().st_size} bytes past 20 trickling connections of its own address "
                "(before: 4 handshakes per address, each kept alive by a byte every 2 s, refused it)")


def test_the_relay_program_carries_the_listener_it_shares_with_the_supervisor_and_the_gate():
    listener = (Path(node_agent.__file__).with_name("listener.py")).read_text()
    assert repr(listener) in peers.RELAY and "first_proven(server" in peers.RELAY
