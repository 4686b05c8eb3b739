"""Image distribution between the nodes (registry/peers.py; issue 22): the rounds, the relay that
carries `docker save` to `docker load` node to node (run here on loopback: a client without the key gets
nothing, the right one gets every byte), and when `up` uses peers at all."""
from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from clusterctl.registry import peers

from unit.test_peers import BASE, NOTE
from clusterctl_helpers import free_port


def _free_port() -> int:
    return free_port()  # tests/clusterctl_helpers.py: below the ephemeral range


def test_the_relay_sends_every_byte_to_the_client_with_the_key_and_nothing_to_one_without(tmp_path):
    data = os.urandom(3 << 20)
    port = _free_port()
    sender = _relay("5e" * 32, "send", "127.0.0.1", port, 20)
    try:
        deadline = time.monotonic() + 10
        while True:  # an intruder first: it proves a wrong key and gets nothing
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as intruder:
                    intruder.sendall(b"clusterctl-relay/2\n" + bytes(32))
                    intruder.settimeout(5)
                    assert len(_read(intruder, 64)) == 64  # the sender's nonce and proof
                    intruder.sendall(bytes(32))
                    assert intruder.recv(10) == b""
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        receiver = _relay("5e" * 32, "recv", "127.0.0.1", port, 20)
        sender.stdin.write(data)
        sender.stdin.close()
        got, err = receiver.communicate(timeout=30)
        assert receiver.returncode == 0 and hashlib.sha256(got).digest() == hashlib.sha256(data).digest(), err
        assert sender.wait(timeout=30) == 0 and sender.stdout.read().decode() == f"sent {len(data)}\n"
        with socket.socket() as s, pytest.raises(ConnectionRefusedError):  # nothing listens any more
            s.connect(("127.0.0.1", port))
    finally:
        sender.kill()


def _read(conn: socket.socket, size: int) -> bytes:
    got = b""
    while len(got) < size:
        part = conn.recv(size - len(got))
        if not part:
            break
        got += part
    return got


def test_a_relay_nobody_comes_to_ends_by_itself_and_a_receiver_with_no_sender_too():
    port = _free_port()
    started = time.monotonic()
    sender = _relay("ab" * 32, "send", "127.0.0.1", port, 1)
    sender.stdin.close()
    assert sender.wait(timeout=30) != 0 and b"no receiver came" in sender.stderr.read()
    receiver = _relay("ab" * 32, "recv", "127.0.0.1", port, 1)
    assert receiver.wait(timeout=30) != 0 and b"cannot reach 127.0.0.1" in receiver.stderr.read()
    assert time.monotonic() - started < 15


_KEY_PIPES: list[int] = []  # the write ends standing for the SSH sessions' stdin (closed: the session ended)


def _relay(keys: str, *args) -> subprocess.Popen:
    """RELAY as `up` runs it: `keys` on the first line of the session's stdin (fd CLUSTERCTL_RELAY_WATCH),
    which stays open while the relay runs; its own stdin and stdout the pipes of docker save/load."""
    read_end, write_end = os.pipe()
    os.write(write_end, keys.encode() + b"\n")
    _KEY_PIPES.append(write_end)
    proc = subprocess.Popen([sys.executable, "-c", peers.RELAY, *map(str, args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(read_end,),
                            env={**os.environ, "CLUSTERCTL_RELAY_WATCH": str(read_end)})
    os.close(read_end)
    return proc


def test_a_node_in_the_chain_loads_every_byte_and_passes_every_byte_on(tmp_path):
    data = os.urandom(2 << 20)
    up, down = _free_port(), _free_port()
    a, b = "0a" * 32, "0b" * 32
    sender = _relay(a, "send", "127.0.0.1", up, 20)
    middle = _relay(f"{a} {b}", "pipe", "127.0.0.1", up, 20, "127.0.0.1", down)
    last = _relay(b, "recv", "127.0.0.1", down, 20)
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


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "docker_save" / "classic-20.10-two-layers.tar"


def _relay_through(tar: bytes, skip: str) -> tuple[bytes, str]:
    """`tar` through the relay (send with `skip` -> recv) on loopback: what arrives, and the sender's report."""
    port = _free_port()
    sender = _relay("cd" * 32, "send", "127.0.0.1", port, 20, skip)
    receiver = _relay("cd" * 32, "recv", "127.0.0.1", port, 20)
    try:
        sender.stdin.write(tar)
        sender.stdin.close()
        got, err = receiver.communicate(timeout=60)
        assert receiver.returncode == 0, err
        assert sender.wait(timeout=30) == 0, sender.stderr.read()
        return got, sender.stdout.read().decode()
    finally:
        sender.kill()
        receiver.kill()


def _members(tar: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        return {m.name: (t.extractfile(m).read() if m.isfile() else b"") for m in t}


def test_a_real_docker_save_goes_without_the_layers_the_receiver_has_and_keeps_everything_else():
    saved = FIXTURE.read_bytes()
    whole = _members(saved)
    trimmed, report = _relay_through(saved, BASE.split(":")[1])
    kept = _members(trimmed)
    dropped = set(whole) - set(kept)
    assert len(dropped) == 1 and dropped.pop().endswith("/layer.tar") and "skipped 1" in report
    assert all(kept[name] == whole[name] for name in kept)  # manifest, config, the other layer: byte-exact
    layer = next(data for name, data in kept.items() if name.endswith("/layer.tar"))
    assert "sha256:" + hashlib.sha256(layer).hexdigest() == NOTE
    assert int(report.split("sent ")[1]) == len(trimmed) < len(saved)
    untouched, report = _relay_through(saved, "")
    assert untouched == saved and "skipped" not in report  # nothing to drop: the stream as it came


def test_an_oci_layout_save_drops_blobs_by_their_digest():
    layer_a, layer_b = os.urandom(3000), os.urandom(5000)
    digest_a, digest_b = hashlib.sha256(layer_a).hexdigest(), hashlib.sha256(layer_b).hexdigest()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        for name, data in ((f"blobs/sha256/{digest_a}", layer_a), (f"blobs/sha256/{digest_b}", layer_b),
                           ("index.json", b"{}"), ("manifest.json", b"[]"), ("oci-layout", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    trimmed, report = _relay_through(raw.getvalue(), digest_a)
    assert set(_members(trimmed)) == {f"blobs/sha256/{digest_b}", "index.json", "manifest.json", "oci-layout"}


def test_a_relay_ends_as_soon_as_the_session_that_started_it_goes_away():
    """As `up` runs it: the session's stdin on fd 3 (stdin_open); closing it (Ctrl-C, a killed clusterctl)
    ends a relay still waiting for its receiver at once, not after ACCEPT_S."""
    script = peers._WATCH + 'python3 -c "$1" send 127.0.0.1 "$2" 60 < /dev/null'
    session = subprocess.Popen(["sh", "-c", script, "clusterctl-send", peers.RELAY, str(_free_port())],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    session.stdin.write(b"ef" * 32 + b"\n")  # the transfer's key first, as send_command's stdin
    session.stdin.flush()
    time.sleep(1.0)
    assert session.poll() is None  # listening, waiting for its receiver
    started = time.monotonic()
    session.stdin.close()
    assert session.wait(timeout=10) == 3 and time.monotonic() - started < 5
