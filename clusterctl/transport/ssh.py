"""One persistent SSH connection per host, reused by every command of an invocation: commands on
channels (streamed, or read by a consumer as they arrive), TCP connects made by the node's sshd,
and Docker's engine API over the same connection.
"""
from __future__ import annotations

import os
import select
import socket
import shlex
import time
from dataclasses import replace
from typing import Any, BinaryIO, Callable, Optional

from clusterctl.errors import HostKeyError, UnreachableError
from clusterctl.models import Command, CommandResult, Host
from clusterctl.transport.base import DOCKER_API_VERSION, TcpForwardingDisabled, _Runs, argv_for, become_asker
from clusterctl.transport.become import Decision, known
from clusterctl.transport.openssh_config import SSHTarget
from clusterctl.transport.paramiko_setup import (DEAD_PEER_S, _new_transport, _open_failures, _paramiko, _tcp_socket,
                                                 _use_chunk_buffers, drop_when_silent, offered_host_key_algorithms)
from clusterctl.transport.proxy_command import ProxyCommand
from clusterctl.transport.ssh_auth import auth_failure, key_strategy
from clusterctl.transport.ssh_files import (HostKeyCheck, connect_timeout, describe, host_key_order, target_for,
                                            trust_for)
from clusterctl.transport.ssh_keys import plan_keys

# Take everything a channel has buffered in one recv: paramiko's buffer drops what was read from
# its front (`del buf[:n]`), so reading a full window in 64 KiB pieces costs O(window²) memmoves.
_CHANNEL_READ = 1 << 30


# With our chunk buffers (below) reads take at most this much; a bulk reader (run_reading) waits
# until it is buffered (or the output ends, or _FILL_WAIT_S passes) and takes it in one read.
_CHUNKED_READ = 512 << 10


_FILL_WAIT_S = 0.02


class SSHTransport(_Runs):
    """One persistent SSH connection to one host, reused by every command of an invocation."""

    def __init__(self, host: Host):
        self.host = host
        self._client = None
        self._jumps: list = []  # clients of ProxyJump hops, closed with this one
        self._proxies: list = []  # ProxyCommand processes, stopped with this one
        self._docker = None
        self.target: Optional[SSHTarget] = None
        self._become = Decision()  # how privileged commands run here, taken once per connection (become.py)

    # ---- connection
    def open(self) -> "SSHTransport":
        """Connect as the user's own ssh would (openssh_config.py: `ssh -G`, or ssh_config read
        alike), through its ProxyJump hosts or ProxyCommand; every host key, the jump hosts'
        too, judged as ssh judges it (known_hosts.py); keys offered in ssh's order (ssh_keys.py).
        CLUSTERCTL_SSH_CONFIG names another ssh_config (tests, shared jump-host setups)."""
        try:
            target = target_for(self.host)
            self.target = target
            self._client = self._connect_hop(target, extra_identity=None)
            self._become = Decision(known(self.host, target.user, target.user == "root"))
        except BaseException:
            self.close()
            raise
        return self

    def _connect_hop(self, target: SSHTarget, extra_identity: Optional[str]):
        """An authenticated client for `target`, reached through its jump host or proxy command."""
        timeout = connect_timeout(self.host, target)
        if target.jump is not None:
            identity = os.path.expanduser(self.host.ssh.identity_file) if self.host.ssh.identity_file else None
            via = self._connect_hop(target.jump, extra_identity=identity)
            self._jumps.append(via)
            try:
                sock = via.get_transport().open_channel("direct-tcpip", (target.hostname, target.port), ("", 0),
                                                        timeout=timeout)
            except Exception as exc:  # paramiko.ChannelException: the jump host could not reach the node
                raise UnreachableError(f"cannot reach {target.hostname}:{target.port} through "
                                       f"{target.jump.hostname}: {exc}", where=self.host.name,
                                       fix="check the address and that the jump host can reach it") from None
            return _connect(target, sock, self.host, extra_identity)
        if target.proxy_command:
            proxy = ProxyCommand(target.proxy_command, where=self.host.name)
            self._proxies.append(proxy)
            return _connect(target, proxy.sock, self.host, extra_identity, proxy=proxy)
        return _connect(target, _tcp_socket(target.hostname, target.port, timeout), self.host, extra_identity)

    @property
    def _transport(self):
        transport = self._client.get_transport() if self._client else None
        if transport is None or not transport.is_active():
            raise UnreachableError("the SSH connection was lost", where=self.host.name, fix="check the host and its network")
        return transport

    @property
    def alive(self) -> bool:
        """False once the connection is gone (closed, or dropped as a dead peer)."""
        transport = self._client.get_transport() if self._client else None
        return transport is not None and transport.is_active()

    def close(self) -> None:
        if self._docker is not None:
            self._docker.close()
            self._docker = None
        if self._client is not None:
            self._client.close()
            self._client = None
        for jump in reversed(self._jumps):
            jump.close()
        self._jumps = []
        for proxy in self._proxies:
            proxy.close()
        self._proxies = []

    # ---- commands
    def _exec(self, cmd: Command, on_out, on_err) -> CommandResult:
        start = time.monotonic()
        stream = self._start(cmd)
        try:
            while (chunk := stream.next()) is not None:
                (on_out if chunk[0] == "stdout" else on_err)(chunk[1])
            code, timed_out = stream.exit_status()
        except _Deadline:
            code, timed_out = None, True
        finally:
            stream.close()
        return CommandResult(code, "", "", time.monotonic() - start, timed_out)

    def run_reading(self, cmd: Command, consume: Callable[[BinaryIO], Any],
                    on_bytes: Optional[Callable[[int], None]] = None) -> tuple[CommandResult, Any]:
        """Streams: `consume` reads the output as it arrives, in this thread (no spool file)."""
        start = time.monotonic()
        err = self._splitter("stderr", None, cmd)
        stream = self._start(cmd, bulk=True)
        reader = _StdoutReader(stream, err.feed, on_bytes)
        value = None
        try:
            value = consume(reader)
            while reader.read(_CHANNEL_READ):  # what the consumer left (tar's end-of-archive padding)
                pass
            code, timed_out = stream.exit_status()
        except _Deadline:
            code, timed_out, value = None, True, None
        finally:
            stream.close()
        return CommandResult(code, "", err.finish(), time.monotonic() - start, timed_out), value

    def open_stream(self, cmd: Command) -> "_ChannelOutput":
        """The command started on a channel of its own, its output read by whoever polls (executor.Streams)."""
        return _ChannelOutput(self._start(cmd), time.monotonic())

    def _start(self, cmd: Command, bulk: bool = False) -> "_ChannelStream":
        deadline = time.monotonic() + cmd.timeout if cmd.timeout else None
        with _ssh_errors(self.host.name, cmd):
            argv = argv_for(cmd, self.host, self._become, become_asker(self))  # before its channel: it may ask first
            open_timeout = min(self.host.ssh.connect_timeout, cmd.timeout or self.host.ssh.connect_timeout)
            channel = self._transport.open_session(timeout=open_timeout)
            _use_chunk_buffers(channel)  # before exec: no data has arrived yet
            if self.host.ssh.forward_agent:  # off unless the inventory asks (ssh.forward_agent: true)
                import paramiko.agent

                paramiko.agent.AgentRequestHandler(channel)
            channel.exec_command(shlex.join(argv))
            if cmd.stdin:
                channel.sendall(cmd.stdin)
            if not cmd.stdin_open:
                channel.shutdown_write()
        return _ChannelStream(channel, deadline, self.host.name, cmd, bulk)

    # ---- a TCP connect from the node
    def connect_tcp(self, address: str, port: int, timeout: float) -> Optional[str]:
        """Connect from this node to address:port and close again: None when it connected, else
        why not. The node's sshd makes the connection (a direct-tcpip channel), so it leaves from
        the node's own network stack and firewall, with no process started there. Raises
        TcpForwardingDisabled where the node's sshd forbids such channels."""
        paramiko = _paramiko()
        transport = self._transport
        failures = _open_failures(transport)
        try:
            channel = transport.open_channel("direct-tcpip", (address, port), ("127.0.0.1", 0), timeout=timeout)
        except paramiko.ChannelException as exc:
            if exc.code == 1:  # SSH_OPEN_ADMINISTRATIVELY_PROHIBITED
                raise TcpForwardingDisabled(str(exc)) from None
            return failures.pop() if failures else f"connect failed ({exc.text})"
        except paramiko.SSHException:
            if not transport.is_active():
                raise UnreachableError("the SSH connection was lost", where=self.host.name,
                                       fix="check the host and its network") from None
            return f"timed out after {timeout:g} s"
        channel.close()
        return None

    # ---- docker
    def docker(self):
        """A docker-py client whose API requests ride this SSH connection (`docker system dial-stdio`)."""
        if self._docker is None:
            self._docker = _docker_over_ssh(self._client, self.host.address)
        return self._docker


def _connect(target: SSHTarget, sock, host: Host, extra_identity: Optional[str], proxy=None):
    """An authenticated SSHClient over `sock`, its host key judged as ssh would (ssh_files.HostKeyCheck)."""
    import functools

    paramiko = _paramiko()
    if extra_identity and extra_identity not in target.identity_files:
        target = replace(target, identity_files=target.identity_files + (extra_identity,))
    trust = trust_for(host, target)
    timeout = connect_timeout(host, target)
    plan = plan_keys(target, first=os.path.expanduser(host.ssh.identity_file) if host.ssh.identity_file else None)
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(HostKeyCheck(host.name, target, trust))
    order = host_key_order(target, trust, offered_host_key_algorithms())
    try:
        client.connect(target.hostname, target.port, username=target.user, sock=sock, timeout=None,
                       banner_timeout=timeout, auth_timeout=timeout, auth_strategy=key_strategy(target.user, plan),
                       transport_factory=functools.partial(_new_transport, host_key_order=order))
    except HostKeyError:
        client.close()
        raise
    except paramiko.AuthenticationException as exc:
        allowed = _allowed_methods(client, target.user)
        client.close()
        raise UnreachableError(auth_failure(target, plan, allowed, exc), where=host.name,
                               fix="check ssh.user and ssh.identity_file in the inventory (or the agent: ssh-add -l)") from None
    except (OSError, paramiko.SSHException, EOFError) as exc:
        client.close()
        said = f" ({proxy.said()})" if proxy is not None else ""
        raise UnreachableError(
            f"cannot connect to {describe(target)}: {exc or type(exc).__name__}{said}", where=host.name,
            fix="check that sshd runs there, the address/port in the inventory, and routing/firewalls",
        ) from None
    finally:
        plan.close()
    client.get_transport().set_keepalive(target.server_alive_interval or 15)
    if proxy is not None or not isinstance(sock, socket.socket):  # a jump host's channel, a proxy command
        drop_when_silent(client.get_transport(), target.server_alive_interval or DEAD_PEER_S / 2)
    return client


def _allowed_methods(client, user: str) -> list:
    """What the server still allows (asked with `none` after a failure), for the message."""
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        return []
    try:
        transport.auth_none(user)
    except _paramiko().BadAuthenticationType as exc:
        return list(exc.allowed_types)
    except Exception:  # the server hung up: nothing more to learn
        return []
    return []


def _docker_over_ssh(ssh_client, address: str):
    """A docker-py client over `ssh_client`'s connection. Private touch: docker-py's public ssh://
    support (SSHHTTPAdapter) opens a connection of its own (a second handshake, its own host key and
    config handling); no public API takes an existing paramiko client, so its channel pool
    (docker.transport.sshconn.SSHConnectionPool) is used directly over ours.
    tests/unit/test_library_canaries.py fails loudly when docker-py changes it."""
    import docker
    from docker.transport.basehttpadapter import BaseHTTPAdapter
    from docker.transport.sshconn import SSHConnectionPool

    class ExistingSSHAdapter(BaseHTTPAdapter):
        """Hands docker-py a pool of `docker system dial-stdio` channels on our connection."""

        def __init__(self):
            super().__init__()
            self.pool = SSHConnectionPool(ssh_client=ssh_client, timeout=300, maxsize=4, host=address)

        def get_connection(self, url, proxies=None):
            return self.pool

        def get_connection_with_tls_context(self, request, verify, proxies=None, cert=None):
            return self.pool

        def close(self):
            self.pool.close()

    # Built through the public constructor (no connection is made: a version is given), then every
    # request is routed to our adapter: requests' `mount` on the client's session and its URLs'
    # base (`base_url`, as docker-py sets it for ssh:// itself).
    client = docker.DockerClient(base_url="tcp://127.0.0.1:9", version=DOCKER_API_VERSION, timeout=300)
    client.api.mount("http+docker://ssh", ExistingSSHAdapter())
    client.api.base_url = "http+docker://ssh"
    return client


class _Deadline(Exception):
    """The command's timeout passed while its output was being read."""


class _ssh_errors:
    """Connection problems while running a command -> UnreachableError (a consumer's own errors pass)."""

    def __init__(self, host_name: str, cmd: Command):
        self.host_name, self.cmd = host_name, cmd

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, (_Deadline, UnreachableError)):
            return False
        if isinstance(exc, (OSError, EOFError)):
            raise UnreachableError(f"connection lost while running {self.cmd.argv[0]}: {exc}", where=self.host_name) from None
        if type(exc).__module__.startswith("paramiko"):  # SSHException, ChannelException
            raise UnreachableError(f"SSH error while running {self.cmd.argv[0]}: {exc}", where=self.host_name) from None
        return False


class _ChannelStream:
    """The output of one running channel, chunk by chunk, until EOF, then its exit status."""

    def __init__(self, channel, deadline: Optional[float], host_name: str, cmd: Command, bulk: bool = False):
        self.channel, self.deadline = channel, deadline
        self.errors = _ssh_errors(host_name, cmd)
        self.poller = select.poll()
        self.poller.register(channel.fileno(), select.POLLIN)  # paramiko sets this pipe on new data and on EOF
        chunked = hasattr(getattr(channel, "in_buffer", None), "wait_for")  # our chunk buffer (paramiko_setup)
        self.read_size = _CHUNKED_READ if chunked else _CHANNEL_READ
        # a bulk reader (run_reading) waits for a full read; a command's lines pass on at once
        self.fill = bool(chunked and bulk)

    def next(self) -> Optional[tuple[str, bytes]]:
        """("stdout" | "stderr", data), or None at EOF. Raises _Deadline past the timeout."""
        channel = self.channel
        with self.errors:
            while True:
                if channel.recv_ready():
                    if self.fill:
                        channel.in_buffer.wait_for(self.read_size, _FILL_WAIT_S)
                    return "stdout", channel.recv(self.read_size)
                if channel.recv_stderr_ready():
                    return "stderr", channel.recv_stderr(self.read_size)
                if channel.eof_received or channel.closed:
                    if channel.recv_ready() or channel.recv_stderr_ready():
                        continue  # data that arrived just before the EOF
                    return None
                wait = 1.0 if self.deadline is None else self.deadline - time.monotonic()
                if wait <= 0:
                    raise _Deadline()
                self.poller.poll(min(wait, 1.0) * 1000)

    def exit_status(self) -> tuple[Optional[int], bool]:
        """(exit code, timed out) once the output has ended."""
        remaining = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        if self.channel.status_event.wait(remaining):
            return self.channel.recv_exit_status(), False
        return None, True

    def close(self) -> None:
        with self.errors:
            self.channel.close()


class _ChannelOutput:
    """A running channel read without blocking (transport.base.OutputStream). paramiko sets the
    channel's event pipe while data is buffered and once the channel has ended, so polling it is
    level-triggered: what one read leaves behind wakes the poller again."""

    def __init__(self, stream: _ChannelStream, started: float):
        self.stream, self.started = stream, started

    def filenos(self) -> list[int]:
        return [self.stream.channel.fileno()]

    def read_ready(self) -> Optional[list[tuple[str, bytes]]]:
        channel, size = self.stream.channel, self.stream.read_size
        chunks = []
        with self.stream.errors:
            while channel.recv_ready():
                chunks.append(("stdout", channel.recv(size)))
            while channel.recv_stderr_ready():
                chunks.append(("stderr", channel.recv_stderr(size)))
            if chunks or not (channel.eof_received or channel.closed):
                return chunks
            return None

    def exited(self) -> Optional[CommandResult]:
        if not self.stream.channel.status_event.is_set():  # paramiko sets it on exit-status and on close
            return None
        return CommandResult(self.stream.channel.recv_exit_status(), "", "", time.monotonic() - self.started)

    def send(self, data: bytes) -> bool:
        channel = self.stream.channel
        if channel.closed or channel.eof_sent or not channel.send_ready():  # no room: paramiko's send would wait
            return False
        try:
            channel.sendall(data)
        except (OSError, EOFError, _paramiko().SSHException):
            return False
        return True

    def close(self) -> None:
        self.stream.close()


class _StdoutReader:
    """A read-only file over a channel's stdout (stderr goes to `on_err`), for stream consumers."""

    def __init__(self, stream: _ChannelStream, on_err, on_bytes):
        self.stream, self.on_err, self.on_bytes = stream, on_err, on_bytes
        self.chunk, self.pos = b"", 0

    def read(self, size: int = -1) -> bytes:
        while self.pos >= len(self.chunk):
            item = self.stream.next()
            if item is None:
                return b""
            if item[0] == "stderr":
                self.on_err(item[1])
                continue
            self.chunk, self.pos = item[1], 0
            if self.on_bytes:
                self.on_bytes(len(self.chunk))
        if size is None or size < 0 or (self.pos == 0 and size >= len(self.chunk)):
            size = len(self.chunk) - self.pos
        data = self.chunk[self.pos:self.pos + size] if (self.pos, size) != (0, len(self.chunk)) else self.chunk
        self.pos += len(data)
        return data
