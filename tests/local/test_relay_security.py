"""Issue 34, finding 3: the peer image relay authenticates both ends, keeps its key off every command
line, and `docker load` keeps only the image asked for. Each test plays the attack that worked on the
relay before (a token in `ps`, an impostor's tar, a tar with another tag, idle connections ahead of
the receiver) with the real relay and check programs as `up` starts them, on loopback."""
from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

from clusterctl.registry import loadcheck, peers
from clusterctl_helpers import free_port

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "docker_save" / "classic-20.10-two-layers.tar"
FIXTURE_ID = "sha256:a6d20e2c54348e7a7dc752aea1d90ba583af9c668f480d14b3abd54217c38c96"
FIXTURE_IMAGE = "fixture/two-layers:1"
HELLO = b"clusterctl-relay/2\n"


def _free_port() -> int:
    return free_port()  # tests/clusterctl_helpers.py: below the ephemeral range


def _read(conn: socket.socket, size: int) -> bytes:
    got = b""
    while len(got) < size:
        try:
            part = conn.recv(size - len(got))
        except OSError:  # refused: reset, or dropped at the relay's handshake timeout
            break
        if not part:
            break
        got += part
    return got


def _session(command, data: Path, env=None) -> subprocess.Popen:
    """`command` (send_command / receive_command) as the node's sshd runs it: its argv, its stdin (the key)
    written first and held open; `docker save` is a `cat` of `data`, `docker load` a `cat` into $LOADED."""
    script = command.argv[2].replace('docker save "$1"', 'cat "$RELAYED_TAR"').replace("docker load -q", 'cat > "$LOADED"')
    proc = subprocess.Popen(["sh", "-c", script, *command.argv[3:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "RELAYED_TAR": str(data), **(env or {})})
    if command.stdin:
        proc.stdin.write(command.stdin)
        proc.stdin.flush()
    return proc


def _listening(port: int) -> None:
    from clusterctl_helpers import wait_until

    def up():
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0
    wait_until(up, 20, 0.05, what=f"the relay listening on {port}")


def _command_lines(root: int) -> list[str]:
    """Every argument of `root` and its descendants, as `ps -ef` shows them to any local user."""
    seen, found = {root}, []
    for entry in sorted(os.listdir("/proc")):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[1].split()
                if int(stat[1]) in seen or int(stat[2]) == os.getpgid(root):
                    seen.add(int(entry))
                    found += Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
            except (OSError, IndexError, ValueError):
                continue
    return found


def _steal(port: int, candidate: str) -> bytes:
    """What a local user gets who connects first with `candidate` as the token (the old relay: a line)
    or as the key (the new one: a forged proof). Everything received after the handshake."""
    got = b""
    for attempt in ("line", "proof"):
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
        except ConnectionRefusedError:  # nothing listens any more (the old relay, once it streamed to someone)
            continue
        with conn:
            conn.settimeout(5)
            if attempt == "line":
                try:
                    conn.sendall(candidate.encode() + b"\n")
                    conn.shutdown(socket.SHUT_WR)  # all it has to say
                except OSError:  # already dropped: not a relay's hello
                    continue
                got += _read(conn, 1 << 16)
                continue
            nonce = os.urandom(32)
            conn.sendall(HELLO + nonce)
            answer = _read(conn, 64)
            for key in (candidate.encode(), bytes.fromhex(candidate) if re.fullmatch("([0-9a-f]{2})+", candidate) else b""):
                proof = hmac.new(key, b"receiver" + nonce + answer[:32], hashlib.sha256).digest()
                try:
                    conn.sendall(proof)
                except OSError:
                    break
            got += _read(conn, 1 << 16)
    return got


def test_a_key_read_from_ps_on_the_sending_node_is_useless_a_local_user_who_connects_first_receives_nothing(
        tmp_path, reliability):
    row = reliability("a local user of the sending node reads the relay's command line (`ps`) and connects "
                      "first with every argument as the token or key", "receives no byte of the image; the real "
                      "receiver then gets every byte", section="Hostile input")
    data = tmp_path / "image.tar"
    data.write_bytes(os.urandom(2 << 20))
    port, key = _free_port(), peers.new_key()
    sender = _session(peers.send_command(FIXTURE_IMAGE, "127.0.0.1", port, key), data)
    try:
        _listening(port)
        arguments = [a for a in _command_lines(sender.pid) if a and len(a) < 200]
        assert arguments and key not in " ".join(arguments)  # nowhere on a command line
        stolen = {a: _steal(port, a) for a in set(arguments)}
        assert not any(stolen.values()), {a: len(got) for a, got in stolen.items() if got}
        loaded = tmp_path / "loaded"
        receiver = _relay_receiver(key, port, loaded)
        assert receiver.wait(timeout=60) == 0, receiver.stderr.read()
        assert loaded.read_bytes() == data.read_bytes() and sender.wait(timeout=60) == 0
        row.observe(f"{len(stolen)} command-line arguments of the sending relay tried (old-style token line and "
                    "forged key proof): 0 bytes received; the real receiver got all "
                    f"{len(data.read_bytes())} bytes (before: the token was an argument of `sh -c` and of python3, "
                    "and a client sending it first was streamed the image: 64 KiB read before the test stopped)")
    finally:
        sender.kill()


def _relay_receiver(key: str, port: int, loaded: Path) -> subprocess.Popen:
    """The relay's client alone (no check), as the receive pipeline's first stage, into `loaded`."""
    read_end, write_end = os.pipe()
    os.write(write_end, key.encode() + b"\n")
    with open(loaded, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", peers.RELAY, "recv", "127.0.0.1", str(port), "20"],
                                stdout=out, stderr=subprocess.PIPE, pass_fds=(read_end,),
                                env={**os.environ, "CLUSTERCTL_RELAY_WATCH": str(read_end)})
    os.close(read_end)
    threading.Thread(target=lambda: (proc.wait(), os.close(write_end)), daemon=True).start()
    return proc


def _impostor(port: int, payload: bytes) -> threading.Thread:
    """A relay without the key on the sender's port: it answers any client with a made-up proof, then
    `payload` (a whole, valid `docker save` tar)."""
    server = socket.create_server(("127.0.0.1", port))

    def serve():
        with server:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(10)
                conn.recv(len(HELLO) + 32)
                try:
                    conn.sendall(os.urandom(64) + payload)
                except OSError:  # the receiver hung up at the proof
                    pass
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_an_impostor_relays_bytes_are_refused_by_the_receiver_and_nothing_reaches_docker_load(tmp_path, reliability):
    row = reliability("an impostor relay (no key) on the sender's port sends the receiver a valid `docker save` tar",
                      "the receiver refuses it at the handshake: no byte reaches `docker load`",
                      section="Hostile input")
    port = _free_port()
    impostor = _impostor(port, FIXTURE.read_bytes())
    loaded = tmp_path / "loaded"
    receiver = _session(peers.receive_command("127.0.0.1", port, peers.new_key(), FIXTURE_IMAGE, FIXTURE_ID), FIXTURE,
                        env={"LOADED": str(loaded)})
    receiver.wait(timeout=60)  # its session (stdin) held open meanwhile, as up holds it
    err = receiver.stderr.read()
    impostor.join(10)
    reached = loaded.read_bytes()
    assert b"did not prove the transfer's key" in err, err
    assert _broken(reached) and b"manifest.json" not in reached  # nothing docker load could take for an image
    row.observe(f"refused: {err.decode().strip().splitlines()[0][:160]}; docker load read {len(reached)} bytes, "
                "a broken tar (before: the receiver sent its token to whoever listened and piped what came back "
                "into docker load)")


def _retagged(manifest_change=None, repositories_change=None) -> bytes:
    """The fixture's `docker save`, its manifest.json / repositories changed as a hostile sender would."""
    out = io.BytesIO()
    with tarfile.open(FIXTURE) as source, tarfile.open(fileobj=out, mode="w") as target:
        for member in source:
            data = source.extractfile(member).read() if member.isfile() else None
            if member.name == "manifest.json" and manifest_change:
                data = json.dumps(manifest_change(json.loads(data))).encode()
            if member.name == "repositories" and repositories_change:
                data = json.dumps(repositories_change(json.loads(data))).encode()
            if data is not None:
                member.size = len(data)
            target.addfile(member, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _check(tar: bytes, image: str = FIXTURE_IMAGE, expected: str = FIXTURE_ID) -> tuple[int, bytes, str]:
    done = subprocess.run([sys.executable, "-c", loadcheck.CHECK, *loadcheck.check_args(image, expected)],
                          input=tar, capture_output=True, timeout=60)
    return done.returncode, done.stdout, done.stderr.decode()


def _broken(tar: bytes) -> bool:
    """A stream Go's tar reader (docker load's) fails on: it ends inside a 512-byte header block ("unexpected
    EOF"), so the engine untars nothing to load. (Python's tarfile would take it for the archive's end.)"""
    return len(tar) % 512 != 0


def _members(tar: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        return {m.name: (t.extractfile(m).read() if m.isfile() else b"") for m in t}


def test_a_tar_carrying_an_extra_tag_or_image_is_refused_and_docker_load_gets_a_broken_stream(reliability):
    row = reliability("a relayed tar that carries the expected image plus another tag (manifest.json, "
                      "repositories) or another image, or a config that is not the seed's",
                      "refused before `docker load` may keep anything: what reaches it is a broken tar",
                      section="Hostile input")
    extra_tag = _retagged(lambda m: [{**m[0], "RepoTags": m[0]["RepoTags"] + ["ubuntu:22.04"]}])
    extra_repository = _retagged(repositories_change=lambda r: {**r, "ubuntu": {"22.04": "x"}})
    extra_image = _retagged(lambda m: m + [{**m[0], "RepoTags": ["other:1"]}])
    refused = {}
    for case, tar, expected in (("extra tag", extra_tag, FIXTURE_ID), ("extra repository", extra_repository, FIXTURE_ID),
                                ("second image", extra_image, FIXTURE_ID),
                                ("another image", FIXTURE.read_bytes(), "sha256:" + "e" * 64)):
        code, out, err = _check(tar, expected=expected)
        assert code != 0 and "refused the relayed image" in err, (case, err)
        assert _broken(out)
        assert b"manifest.json" not in out and b"repositories" not in out  # what names tags never went on
        refused[case] = err.split("refused the relayed image: ", 1)[1].split("; docker load keeps", 1)[0][:90]
    code, out, err = _check(FIXTURE.read_bytes())
    assert code == 0, err
    assert _members(out) == _members(FIXTURE.read_bytes())  # the right image passes, every member byte-exact
    row.observe("; ".join(f"{case}: {why}" for case, why in refused.items()) + " (before: piped to docker load as "
                "it came; only the expected tag's ID checked after, other tags stayed)")


def test_a_blob_whose_content_is_not_its_name_and_a_link_member_are_refused():
    blob = os.urandom(1000)
    for name, data, kind in (("blobs/sha256/" + "0" * 64, blob, tarfile.REGTYPE),
                             ("manifest.json", b"", tarfile.SYMTYPE)):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as t:
            info = tarfile.TarInfo(name)
            info.type, info.size = kind, len(data) if kind == tarfile.REGTYPE else 0
            info.linkname = "" if kind == tarfile.REGTYPE else "/etc/passwd"
            t.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
        code, _, err = _check(raw.getvalue())
        assert code != 0 and ("not the content its name says" in err or "does not write" in err), err


def test_idle_connections_ahead_of_the_receiver_do_not_stall_the_sender(tmp_path, reliability):
    row = reliability("40 idle TCP connections to a sending relay from 10 addresses, opened before the receiver "
                      "and never closed", "the receiver still gets every byte; the sender never waits on them",
                      section="Hostile input")
    data = tmp_path / "image.tar"
    data.write_bytes(os.urandom(4 << 20))
    port, key = _free_port(), peers.new_key()
    sender = _session(peers.send_command(FIXTURE_IMAGE, "127.0.0.1", port, key), data)
    idle = []
    try:
        _listening(port)
        for i in range(40):  # each sends nothing at all; the old relay read a token from each for 30 s in turn
            conn = socket.socket()
            conn.bind((f"127.0.1.{10 + i % 10}", 0))
            conn.connect(("127.0.0.1", port))
            idle.append(conn)
        loaded = tmp_path / "loaded"
        receiver = _relay_receiver(key, port, loaded)
        assert receiver.wait(timeout=120) == 0, receiver.stderr.read()
        assert loaded.read_bytes() == data.read_bytes() and sender.wait(timeout=60) == 0
        row.observe(f"40 idle connections open; the receiver got all {data.stat().st_size} bytes, the sender "
                    "exited 0 (before: the relay read a token from one connection at a time, 30 s each, and the "
                    "same test failed: ConnectionRefusedError)")
    finally:
        for conn in idle:
            conn.close()
        sender.kill()


def _oci_save(image_name: str, ref_tag: str, extra_index_entry: bool = False) -> tuple[bytes, str]:
    """A `docker save` in the OCI layout (Docker 25+, the classic store): blobs named by their digest, an
    index.json naming the image, manifest.json for docker's own loader. Its tar and the image ID."""
    layer = os.urandom(4096)
    layer_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": ["sha256:" + layer_id]}}).encode()
    config_id = hashlib.sha256(config).hexdigest()
    manifest_blob = json.dumps({"schemaVersion": 2, "config": {"digest": "sha256:" + config_id},
                                "layers": [{"digest": "sha256:" + layer_id}]}).encode()
    manifest_id = hashlib.sha256(manifest_blob).hexdigest()
    entry = {"digest": "sha256:" + manifest_id, "annotations": {"io.containerd.image.name": image_name,
                                                               "org.opencontainers.image.ref.name": ref_tag}}
    index = {"schemaVersion": 2, "manifests": [entry] + ([{**entry, "annotations": {}}] if extra_index_entry else [])}
    files = [(f"blobs/sha256/{layer_id}", layer), (f"blobs/sha256/{config_id}", config),
             (f"blobs/sha256/{manifest_id}", manifest_blob), ("index.json", json.dumps(index).encode()),
             ("manifest.json", json.dumps([{"Config": f"blobs/sha256/{config_id}", "RepoTags": ["me/app:2"],
                                            "Layers": [f"blobs/sha256/{layer_id}"]}]).encode()),
             ("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        for directory in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            t.addfile(info)
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return raw.getvalue(), "sha256:" + config_id


def test_an_oci_layout_save_passes_and_an_index_naming_another_image_or_two_is_refused():
    tar, image_id = _oci_save("docker.io/me/app:2", "2")
    code, out, err = _check(tar, "me/app:2", image_id)
    assert code == 0 and _members(out) == _members(tar), err
    for hostile in (_oci_save("docker.io/library/ubuntu:22.04", "22.04"), _oci_save("docker.io/me/app:2", "2", True)):
        code, out, err = _check(hostile[0], "me/app:2", hostile[1])
        assert code != 0 and "index.json" in err and _broken(out), err
