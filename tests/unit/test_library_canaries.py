"""Canaries: the few places clusterctl reaches past paramiko's and docker-py's public API (each says
why at the place, in clusterctl/transport/). These fail loudly when a release of the library changes
what they rely on, instead of clusterctl going slower or failing on a node. Each test names where
the touch is. No network: the libraries' objects are built, never connected."""
from __future__ import annotations

import inspect

import docker
import paramiko
import pytest

from clusterctl.transport import paramiko_setup
from clusterctl.transport.docker_engine import EngineError, EngineNotFound, translated
from clusterctl.transport.ssh_auth import key_strategy
from clusterctl.transport.ssh_keys import KeyPlan


def test_the_host_key_order_overrides_a_property_paramiko_still_has():
    # paramiko_setup._transport_class: OrderedTransport.preferred_keys
    assert isinstance(inspect.getattr_static(paramiko.Transport, "preferred_keys"), property)
    ordered = paramiko_setup._transport_class()
    assert issubclass(ordered, paramiko.Transport)


def test_paramiko_still_lists_its_host_key_algorithms_on_the_class():
    # paramiko_setup.offered_host_key_algorithms: Transport._preferred_keys
    plain = paramiko.Transport._preferred_keys
    assert plain and all(isinstance(name, str) for name in plain)
    assert "ssh-ed25519" in paramiko_setup.offered_host_key_algorithms()


def test_channels_still_take_the_chunk_buffers():
    # paramiko_setup._use_chunk_buffers: Channel.in_buffer/in_stderr_buffer, BufferedPipe's internals
    chunk_pipe = paramiko_setup._make_chunk_pipe(paramiko.buffered_pipe)
    assert chunk_pipe, "paramiko's BufferedPipe no longer has _lock, _cv, _event and _closed"
    channel = paramiko.Channel(0)
    assert isinstance(channel.in_buffer, paramiko.buffered_pipe.BufferedPipe)
    assert isinstance(channel.in_stderr_buffer, paramiko.buffered_pipe.BufferedPipe)
    paramiko_setup._use_chunk_buffers(channel)
    assert type(channel.in_buffer).__name__ == "ChunkPipe" and type(channel.in_stderr_buffer).__name__ == "ChunkPipe"
    pipe = chunk_pipe()
    pipe.feed(b"abc")
    pipe.feed(b"def")
    assert pipe.read(4) == b"abcd" and pipe.read(10) == b"ef"


def test_paramiko_still_reads_its_rekey_thresholds_from_the_packetizer():
    # paramiko_setup._new_transport: packetizer.REKEY_BYTES/REKEY_PACKETS, left to the peer
    source = inspect.getsource(paramiko.packet.Packetizer)
    assert isinstance(paramiko.packet.Packetizer.REKEY_BYTES, int) and isinstance(paramiko.packet.Packetizer.REKEY_PACKETS, int)
    assert "self.REKEY_BYTES" in source and "self.REKEY_PACKETS" in source


def test_paramiko_still_logs_why_sshd_refused_a_channel():
    # paramiko_setup._open_failures: the reason is read from this log line
    assert "open FAILED: {}: {}" in inspect.getsource(paramiko.transport.Transport)


def test_an_agent_socket_of_ones_own_still_connects_through_agentssh():
    # ssh_keys.agent_keys and KeyPlan.close: AgentSSH._connect(conn), AgentSSH._close()
    assert list(inspect.signature(paramiko.agent.AgentSSH._connect).parameters) == ["self", "conn"]
    assert callable(paramiko.agent.AgentSSH._close)


def test_the_key_strategy_is_a_paramiko_auth_strategy_offering_the_plans_keys_in_order(tmp_path):
    # ssh_auth.key_strategy: the public override point, no private touch (a plain check of it)
    keys = [paramiko.Ed25519Key.from_private_key_file(p) for p in _ed25519_files(tmp_path, 2)]
    plan = KeyPlan(target=None, offered=[("first", keys[0]), ("second", keys[1])])
    strategy = key_strategy("alice", plan)
    assert isinstance(strategy, paramiko.auth_strategy.AuthStrategy)
    sources = list(strategy.get_sources())
    assert [type(s) for s in sources] == [paramiko.auth_strategy.InMemoryPrivateKey] * 2
    assert [s.pkey for s in sources] == keys and {s.username for s in sources} == {"alice"}


def test_docker_py_still_has_the_ssh_channel_pool_clusterctl_reuses():
    # ssh._docker_over_ssh: docker.transport.sshconn.SSHConnectionPool over our paramiko client
    from docker.transport.basehttpadapter import BaseHTTPAdapter
    from docker.transport.sshconn import SSHConnectionPool

    assert {"ssh_client", "timeout", "maxsize", "host"} <= set(inspect.signature(SSHConnectionPool).parameters)
    assert issubclass(BaseHTTPAdapter, docker.transport.basehttpadapter.requests.adapters.HTTPAdapter)


def test_a_docker_client_routes_its_requests_to_the_adapter_mounted_for_its_base_url():
    # ssh._docker_over_ssh: built by the public constructor, no connection made, then mounted
    from clusterctl.transport import DOCKER_API_VERSION

    client = docker.DockerClient(base_url="tcp://127.0.0.1:9", version=DOCKER_API_VERSION, timeout=300)
    marker = docker.transport.basehttpadapter.BaseHTTPAdapter()
    client.api.mount("http+docker://ssh", marker)
    client.api.base_url = "http+docker://ssh"
    assert client.api.get_adapter(f"{client.api.base_url}/v{DOCKER_API_VERSION}/containers/x/json") is marker
    client.close()


def test_docker_api_errors_become_engine_errors_with_what_the_engine_said():
    with pytest.raises(EngineNotFound) as missing:
        with translated():
            raise docker.errors.ImageNotFound("404 Client Error", explanation="No such image: x:1")
    assert str(missing.value) == "No such image: x:1" and isinstance(missing.value.__cause__, docker.errors.NotFound)
    with pytest.raises(EngineError) as refused:
        with translated():
            raise docker.errors.APIError("500 Server Error")
    assert not isinstance(refused.value, EngineNotFound) and str(refused.value) == "500 Server Error"
    with pytest.raises(ConnectionError):
        with translated():
            raise ConnectionError("the engine went away")  # not the engine's answer: passed on


def _ed25519_files(folder, count: int):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    for index in range(count):
        path = folder / f"key{index}"
        path.write_bytes(Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()))
        yield str(path)
