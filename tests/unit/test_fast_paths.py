"""The pieces behind the benchmark fixes: known_hosts parsed once, keys read once, ProxyJump specs, the chunk
buffers of SSH channels, streamed tar extraction with hashes, and collect-logs' one-round survey."""
from __future__ import annotations

import json
import hashlib
import io
import os
import tarfile
import time

import pytest

from clusterctl import transport
from clusterctl.collect import fetch as collect
from clusterctl.transport import known_hosts, openssh_config, paramiko_setup
from clusterctl.collect.gather import _shared_by_run_dirs
from clusterctl.models import Host

KEY_A = "AAAAC3NzaC1lZDI1NTE5AAAAIKff8RpCBCXswXR7eK/XMxHrVbSYFy7i+/lJKVVNpKiD"
KEY_B = "AAAAC3NzaC1lZDI1NTE5AAAAIMmuHiYyb1n7wCN/Uq+uAFKO0RgmFD0mvkIL5JCoW0Zp"


def _known_hosts(tmp_path, lines):
    path = tmp_path / "known_hosts"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _plain_keys(path, name):
    import base64

    return [base64.b64encode(e.key).decode() for e in known_hosts.lines_for(name, [str(path)]) if e.marker is None]


def test_known_hosts_lookup_matches_plain_bracketed_and_hashed_names(tmp_path):
    hashed = known_hosts.hashed_name("10.0.0.3")
    path = _known_hosts(tmp_path, [
        f"10.0.0.1,node1 ssh-ed25519 {KEY_A}",
        f"[10.0.0.2]:2222 ssh-ed25519 {KEY_B}",
        f"{hashed} ssh-ed25519 {KEY_A}",
        "# a comment",
        "@cert-authority *.example ssh-ed25519 " + KEY_B,
    ])
    assert _plain_keys(path, "10.0.0.1") == [KEY_A]
    assert _plain_keys(path, "node1") == [KEY_A]
    assert _plain_keys(path, "[10.0.0.2]:2222") == [KEY_B]
    assert _plain_keys(path, "10.0.0.2") == []
    assert _plain_keys(path, "10.0.0.3") == [KEY_A]
    assert _plain_keys(tmp_path / "missing", "10.0.0.1") == []


def test_every_line_for_a_host_counts_and_a_changed_file_is_read_again(tmp_path):
    import base64

    server_b = known_hosts.ServerKey("ssh-ed25519", base64.b64decode(KEY_B))
    path = _known_hosts(tmp_path, [f"10.0.0.1 ssh-ed25519 {KEY_A}", f"10.0.0.1 ssh-ed25519 {KEY_B}"])
    assert known_hosts.judge(server_b, "10.0.0.1", 22, None, [str(path)]).status == "ok"  # as ssh: any listed key
    path.write_text(f"10.0.0.1 ssh-ed25519 {KEY_A}\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert known_hosts.judge(server_b, "10.0.0.1", 22, None, [str(path)]).status == "changed"


@pytest.mark.parametrize("spec, parsed", [
    ("bastion", (None, "bastion", None)),
    ("ops@bastion:2222", ("ops", "bastion", 2222)),
    ("ops@[fd00::1]:22", ("ops", "fd00::1", 22)),
    ("[fd00::1]", (None, "fd00::1", None)),
    ("ssh://ops@bastion:2200", ("ops", "bastion", 2200)),
])
def test_proxy_jump_hops_are_read_like_openssh(spec, parsed):
    assert openssh_config.split_hop(spec) == parsed


def test_chunk_buffers_return_what_was_fed_in_order_whole_or_in_parts():
    pipe = paramiko_setup._make_chunk_pipe(paramiko_setup._paramiko().buffered_pipe)()
    for part in (b"abc", b"defg", b"h"):
        pipe.feed(part)
    assert len(pipe) == 8 and pipe.read_ready()
    assert pipe.read(2) == b"ab"
    assert pipe.read(4) == b"cdef"
    assert pipe.read(100) == b"gh"
    assert not pipe.read_ready()
    with pytest.raises(paramiko_setup._paramiko().buffered_pipe.PipeTimeout):
        pipe.read(10, timeout=0.01)
    pipe.feed(b"tail")
    assert pipe.empty() == b"tail"
    pipe.close()
    assert pipe.read(10) == b""


def _tar_bytes(files: dict) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class _Trickle:
    """A stream that hands out a few bytes at a time, like a slow channel."""

    def __init__(self, data: bytes, step: int):
        self.data, self.step, self.pos = data, step, 0

    def read(self, size=-1):
        n = self.step if size is None or size < 0 else min(size, self.step)
        out = self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out


def test_a_streamed_tar_is_unpacked_safely_masked_and_hashed_on_the_way(tmp_path):
    blob = os.urandom(300_000)
    archive = _tar_bytes({"logs/r1/node1/agent.log": b"token s3cret-value here\n", "out/blob.bin": blob,
                          "../escape.txt": b"no"})
    digests = {}
    written, refused = collect.extract_stream(_Trickle(archive, 7_000), tmp_path / "d", {"s3cret-value"}, digests)
    assert sorted(p.relative_to(tmp_path / "d").as_posix() for p in written) == ["logs/r1/node1/agent.log", "out/blob.bin"]
    assert refused and "escape" in refused[0]
    log = tmp_path / "d/logs/r1/node1/agent.log"
    assert log.read_bytes() == b"token *** here\n"
    for path in written:
        stat = path.stat()
        assert collect.known_sha256(path, stat, digests) == hashlib.sha256(path.read_bytes()).hexdigest()
        assert collect._identity(stat) in digests
    moved = tmp_path / "moved.bin"
    (tmp_path / "d/out/blob.bin").rename(moved)  # a rename keeps the recorded hash
    assert collect._identity(moved.stat()) in digests


def test_the_survey_reads_the_run_directories():
    stdout = (f"{transport.BATCH_MARK}clusterctl-run-dirs\nlogs/r/n1\nlogs/r/n2\n"
              f"{transport.BATCH_MARK}ip-addr.txt\n1: lo\n")
    assert collect.parse_survey(stdout).run_dirs == {"logs/r/n1", "logs/r/n2"}
    assert collect.parse_survey("Error: No such container\n").run_dirs == frozenset()


def _survey(dirs):
    return collect.Survey(frozenset(dirs))


@pytest.mark.parametrize("seen, expected", [
    ({"a": {"A", "B"}, "b": {"A", "B"}}, True),
    ({"a": {"A"}, "b": {"B"}}, False),
    ({"a": {"A"}, "b": set()}, None),  # b wrote no run directory: the probe decides
    ({"a": {"A", "B"}, "b": {"B"}}, None),
])
def test_outputs_are_shared_when_every_node_sees_every_run_directory(seen, expected):
    hosts = [Host("a", "10.0.0.1"), Host("b", "10.0.0.2")]
    surveys = {name: _survey(dirs) for name, dirs in seen.items()}
    assert _shared_by_run_dirs(hosts, surveys, {"a": "A", "b": "B"}) is expected
    assert _shared_by_run_dirs(hosts[:1], surveys, {"a": "A", "b": "B"}) is False


def test_env_txt_is_the_containers_environment_from_docker_inspect():
    inspected = json.dumps([{"Config": {"Env": ["PATH=/usr/bin", "MY_PASSWORD=hunter22", "NCCL_DEBUG=INFO"]}}])
    sections = collect.with_container_env({"docker-inspect.json": inspected, "ip-addr.txt": "1: lo\n"})
    assert sections["env.txt"] == "PATH=/usr/bin\nMY_PASSWORD=hunter22\nNCCL_DEBUG=INFO\n"
    assert sections["ip-addr.txt"] == "1: lo\n"
    missing = {"docker-inspect.json": "[]\nError: No such object: cc-job\n"}
    assert collect.with_container_env(missing) == missing  # no container: no env.txt
    assert "env.txt" not in collect.with_container_env({})  # no container in the inventory


@pytest.mark.parametrize("seed", range(20))
def test_secrets_are_masked_in_a_stream_of_any_chunking_even_across_pieces(seed):
    import random

    rng = random.Random(seed)
    secrets = {"hunter2-long-password", "tok3n", "s3cret-value"}
    parts = []
    for _ in range(200):
        parts.append(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40))))
        if rng.random() < 0.3:
            parts.append(rng.choice(sorted(secrets)).encode())
    data = b"".join(parts)
    out = []
    masking = collect.StreamMask(secrets, out.append)
    pos = 0
    while pos < len(data):
        step = rng.choice([1, 2, 5, 7, 64, 4096])
        masking.write(data[pos:pos + step])
        pos += step
    masking.close()
    masked = b"".join(out)
    assert masked == collect.mask_values(data, secrets)
    assert not any(secret.encode() in masked for secret in secrets)


def test_a_large_streamed_member_is_masked_too(tmp_path):
    blob = os.urandom(3 << 20) + b"the token s3cret-value sits here" + os.urandom(1 << 20)
    archive = _tar_bytes({"out/big.bin": blob})
    written, _ = collect.extract_stream(_Trickle(archive, 100_000), tmp_path / "d", {"s3cret-value"})
    data = (tmp_path / "d/out/big.bin").read_bytes()
    assert b"s3cret-value" not in data and b"the token *** sits here" in data
