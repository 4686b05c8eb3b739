"""The only module that talks to hosts: SSH (paramiko), Docker's engine API, or local.

A `Transport` runs a `Command` (an argv tuple) on one host and returns a `CommandResult`.
Quoting happens here and only here (`shlex.join`). Connection problems raise
`UnreachableError` / `HostKeyError`; the executor turns them into per-host results.

Host keys are verified against the inventory's known_hosts file, never auto-added:
`strict` refuses unknown and changed keys, `accept-new` records unknown keys (like
OpenSSH's StrictHostKeyChecking=accept-new) and still refuses changed ones.
"""
from __future__ import annotations

import getpass
import itertools
import os
import select
import shlex
import socket
import subprocess
import threading
import time
import types
from pathlib import Path
from typing import Any, BinaryIO, Callable, Optional, Protocol

from clusterctl.errors import HostKeyError, UnreachableError
from clusterctl.models import Command, CommandResult, Host

OnLine = Callable[[str, str], None]  # (stream "stdout"|"stderr", line without newline)
DOCKER_API_VERSION = "1.41"  # Docker 20.10+; every engine we support speaks it
_READ_SIZE = 1 << 16
# Take everything a channel has buffered in one recv: paramiko's buffer drops what was read from
# its front (`del buf[:n]`), so reading a full window in 64 KiB pieces costs O(window²) memmoves.
_CHANNEL_READ = 1 << 30
# With our chunk buffers (below) reads take at most this much; a bulk reader (run_reading) waits
# until it is buffered (or the output ends, or _FILL_WAIT_S passes) and takes it in one read.
_CHUNKED_READ = 512 << 10
_FILL_WAIT_S = 0.02
DEAD_PEER_S = 10  # an SSH connection whose peer stays silent this long is dropped
_known_hosts_lock = threading.Lock()


class Transport(Protocol):
    host: Host

    def run(self, cmd: Command, on_line: Optional[OnLine] = None) -> CommandResult: ...

    def run_to_sink(self, cmd: Command, sink: BinaryIO, on_bytes: Optional[Callable[[int], None]] = None) -> CommandResult: ...

    def run_reading(self, cmd: Command, consume: Callable[[BinaryIO], Any],
                    on_bytes: Optional[Callable[[int], None]] = None) -> tuple[CommandResult, Any]: ...

    def connect_tcp(self, address: str, port: int, timeout: float) -> Optional[str]: ...

    def docker(self): ...

    def close(self) -> None: ...


class TcpForwardingDisabled(Exception):
    """The node's sshd refuses direct-tcpip channels (AllowTcpForwarding no)."""


def remote_argv(cmd: Command) -> list[str]:
    """The argv actually executed: env and cwd folded in without a shell around user data."""
    argv = list(cmd.argv)
    if cmd.cwd:
        argv = ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", cmd.cwd, *argv]
    if cmd.env:
        argv = ["env", *(f"{k}={v}" for k, v in cmd.env), *argv]
    return argv


BATCH_MARK = "@@@clusterctl-section "


def batch_command(sections: "list[tuple[str, Command]]", timeout: float = 120.0) -> Command:
    """Several commands in one round trip; each section's output (stdout+stderr) is kept apart.

    Exit codes are not kept: facts judge their own output. Split with `split_batch`.
    """
    script = "\n".join(f"echo '{BATCH_MARK}{name}'; {shlex.join(remote_argv(cmd))} 2>&1" for name, cmd in sections)
    return Command(("sh", "-c", script + "\nexit 0"), timeout=timeout)


def split_batch(stdout: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in stdout.splitlines():
        if line.startswith(BATCH_MARK):
            current = line[len(BATCH_MARK):].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return {name: "\n".join(lines) + ("\n" if lines else "") for name, lines in sections.items()}


class _Runs:
    """run/run_to_sink on top of a transport's `_exec(cmd, on_stdout_bytes, on_stderr_bytes)`."""

    def run(self, cmd: Command, on_line: Optional[OnLine] = None) -> CommandResult:
        out, err = _LineSplitter("stdout", on_line), _LineSplitter("stderr", on_line)
        result = self._exec(cmd, out.feed, err.feed)
        return CommandResult(result.exit_code, out.finish(), err.finish(), result.duration, result.timed_out)

    def run_to_sink(self, cmd: Command, sink: BinaryIO, on_bytes: Optional[Callable[[int], None]] = None) -> CommandResult:
        err = _LineSplitter("stderr", None)

        def write(data: bytes) -> None:
            sink.write(data)
            if on_bytes:
                on_bytes(len(data))

        result = self._exec(cmd, write, err.feed)
        return CommandResult(result.exit_code, "", err.finish(), result.duration, result.timed_out)

    def run_reading(self, cmd: Command, consume: Callable[[BinaryIO], Any],
                    on_bytes: Optional[Callable[[int], None]] = None) -> tuple[CommandResult, Any]:
        """Run `cmd` and hand its stdout to `consume(file)`; returns (result, what consume returned,
        or None when the command failed or timed out). Here: spooled to a temporary file first;
        SSHTransport streams instead."""
        import tempfile

        with tempfile.TemporaryFile() as spool:
            result = self.run_to_sink(cmd, spool, on_bytes)
            if not result.ok:
                return result, None
            spool.seek(0)
            return result, consume(spool)


class _LineSplitter:
    def __init__(self, stream: str, on_line: Optional[OnLine]):
        self.stream, self.on_line, self.partial, self.chunks = stream, on_line, "", []

    def feed(self, data: bytes) -> None:
        text = data.decode("utf-8", errors="replace")
        self.chunks.append(text)
        if self.on_line is None:
            return
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()
        for line in lines:
            self.on_line(self.stream, line.rstrip("\r"))

    def finish(self) -> str:
        if self.on_line is not None and self.partial:
            self.on_line(self.stream, self.partial)
        return "".join(self.chunks)


# --------------------------------------------------------------------------- SSH


class _AcceptNewPolicy:
    """Record an unknown host key in known_hosts; paramiko itself refuses changed keys."""

    def __init__(self, path: Path):
        self.path = path

    def missing_host_key(self, client, hostname, key) -> None:
        with _known_hosts_lock:
            client.get_host_keys().add(hostname, key.get_name(), key)
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(self.path, "a") as handle:
                os.chmod(self.path, 0o600)
                handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class _RejectPolicy:
    def __init__(self, path: Path):
        self.path = path

    def missing_host_key(self, client, hostname, key) -> None:
        raise HostKeyError(
            f"unknown host key for {hostname} ({key.get_name()}) and host_key_policy is strict",
            fix=f"add the key to {self.path} (ssh-keyscan -p PORT HOST >> {self.path}) "
            "or set ssh.host_key_policy: accept-new for the first connection",
        )


class SSHTransport(_Runs):
    """One persistent SSH connection to one host, reused by every command of an invocation."""

    def __init__(self, host: Host):
        self.host = host
        self._client = None
        self._jumps: list = []  # clients of ProxyJump hops, closed with this one
        self._docker = None

    # ---- connection
    def open(self) -> "SSHTransport":
        """Connect with paramiko directly (no Fabric: its import pulls in Invoke, ~50 ms per process).

        ~/.ssh/config (HostName, User, Port, IdentityFile, ProxyJump, ProxyCommand) applies;
        CLUSTERCTL_SSH_CONFIG names another file (tests, shared jump-host setups). Jump hosts
        are verified against the same known_hosts and policy as the node itself.
        """
        ssh = self.host.ssh
        target = _resolve(self.host.address, ssh.user, ssh.port, ssh.proxy_jump)
        keys = ([os.path.expanduser(ssh.identity_file)] if ssh.identity_file else []) + target.identity_files
        try:
            sock = self._socket(target, keys)
            self._client = _connect(target, sock, keys, self.host, look_for_keys=not ssh.identity_file)
        except BaseException:
            self.close()
            raise
        return self

    def _socket(self, target: "_Target", keys: list[str]):
        """A TCP socket to the node, a channel through the jump hosts, or a ProxyCommand."""
        ssh = self.host.ssh
        if target.jumps:
            via = None
            for hop in target.jumps:  # first hop first; each later hop is reached through the previous
                hop_sock = via.get_transport().open_channel(
                    "direct-tcpip", (hop.hostname, hop.port), ("", 0), timeout=ssh.connect_timeout
                ) if via else _tcp_socket(hop.hostname, hop.port, ssh.connect_timeout)
                via = _connect(hop, hop_sock, keys + hop.identity_files, self.host, look_for_keys=True)
                self._jumps.append(via)
            try:
                return via.get_transport().open_channel(
                    "direct-tcpip", (target.hostname, target.port), ("", 0), timeout=ssh.connect_timeout)
            except Exception as exc:  # paramiko.ChannelException: the jump host could not reach the node
                raise UnreachableError(f"cannot reach {target.hostname}:{target.port} through "
                                       f"{target.jumps[-1].hostname}: {exc}", where=self.host.name,
                                       fix="check the address and that the jump host can reach it") from None
        if target.proxy_command:
            return _paramiko().ProxyCommand(target.proxy_command)
        return _tcp_socket(target.hostname, target.port, ssh.connect_timeout)

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
        err = _LineSplitter("stderr", None)
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

    def _start(self, cmd: Command, bulk: bool = False) -> "_ChannelStream":
        deadline = time.monotonic() + cmd.timeout if cmd.timeout else None
        with _ssh_errors(self.host.name, cmd):
            open_timeout = min(self.host.ssh.connect_timeout, cmd.timeout or self.host.ssh.connect_timeout)
            channel = self._transport.open_session(timeout=open_timeout)
            _use_chunk_buffers(channel)  # before exec: no data has arrived yet
            if self.host.ssh.forward_agent:  # off unless the inventory asks (ssh.forward_agent: true)
                import paramiko.agent

                paramiko.agent.AgentRequestHandler(channel)
            channel.exec_command(shlex.join(remote_argv(cmd)))
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


# --------------------------------------------------------------------------- SSH connection setup

# AES-GCM first: with AES-NI it costs the client about half the CPU of aes128-ctr + HMAC per byte,
# which matters for collect-logs' bulk streams (paramiko's default order puts the CTR modes first).
PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "aes128-ctr", "aes256-ctr")
# Bytes in flight per channel before the server waits (paramiko: 2 MiB). Larger is not faster: what
# sshd may send but TCP cannot take yet piles up in sshd's buffers (page faults, memmove): a 600 MB
# collect took 1.2-1.8x the time with 16 MiB, 2.3x with 64 MiB (bench/collect.py); 1-4 MiB are alike.
CHANNEL_WINDOW = 4 << 20
CHANNEL_MAX_PACKET = 1 << 15  # paramiko's default; OpenSSH reads a session's output 32 KiB at a time anyway
_paramiko_module = None
_setup_lock = threading.Lock()
_ssh_configs: dict = {}
_known_hosts_files: dict = {}


class _OpenFailureLog:
    """sshd's reason for a refused channel ("Connection refused", "No route to host"): paramiko
    keeps it only in a log record of the connection's own log channel, caught here (and not
    printed)."""

    def __init__(self):
        self.reasons: list[str] = []

    def filter(self, record) -> bool:
        message = record.getMessage()
        if " open FAILED: " in message:
            self.reasons.append(message.split(" open FAILED: ", 1)[1].rsplit(": ", 1)[0])
            return False
        return True


_log_channels = itertools.count(1)


def _open_failures(transport) -> list:
    """The reasons list of `transport`'s channel-open failures (its log channel gets a filter once)."""
    import logging

    failures = getattr(transport, "_clusterctl_open_failures", None)
    if failures is None:
        name = f"paramiko.transport.clusterctl.{next(_log_channels)}"
        transport.set_log_channel(name)
        failures = _OpenFailureLog()
        logging.getLogger(name).addFilter(failures)
        transport._clusterctl_open_failures = failures
    failures.reasons.clear()
    return failures.reasons


def _paramiko():
    """paramiko, imported once. paramiko.config imports Invoke, when it is installed, for `Match
    exec` alone: a stand-in module defers that import to first use instead of costing every
    process ~50 ms (clusterctl itself does not depend on Invoke)."""
    global _paramiko_module
    if _paramiko_module is None:
        with _setup_lock:
            if _paramiko_module is None:
                import sys

                if "invoke" not in sys.modules:
                    sys.modules["invoke"] = _DeferredModule("invoke")
                try:
                    import paramiko
                finally:
                    if isinstance(sys.modules.get("invoke"), _DeferredModule):
                        del sys.modules["invoke"]  # later imports get the real module
                _paramiko_module = paramiko
    return _paramiko_module


class _DeferredModule(types.ModuleType):
    """Imports the real module on the first attribute a caller reads from it."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        import importlib

        return getattr(importlib.import_module(self.__name__), name)


class _Target:
    """Where one SSH hop goes, after ~/.ssh/config: address, port, user, keys, and how to get there."""

    def __init__(self, hostname: str, port: int, user: str, identity_files: list, jumps: list, proxy_command):
        self.hostname, self.port, self.user = hostname, port, user
        self.identity_files, self.jumps, self.proxy_command = identity_files, jumps, proxy_command

    @property
    def known_hosts_name(self) -> str:
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def _ssh_config():
    """~/.ssh/config then /etc/ssh/ssh_config (or only $CLUSTERCTL_SSH_CONFIG), parsed once per process."""
    path = os.environ.get("CLUSTERCTL_SSH_CONFIG") or None
    paramiko = _paramiko()
    with _setup_lock:
        if path not in _ssh_configs:
            config = paramiko.SSHConfig()
            for name in [path] if path else [os.path.expanduser("~/.ssh/config"), "/etc/ssh/ssh_config"]:
                if os.path.isfile(name):
                    with open(name) as handle:
                        config.parse(handle)
            _ssh_configs[path] = config
        return _ssh_configs[path]


_resolved: dict = {}


def _resolve(address: str, user: Optional[str], port: Optional[int], proxy_jump: Optional[str], depth: int = 0) -> _Target:
    """The hop after ~/.ssh/config, looked up once per process and config (a lookup expands every
    matching block's tokens: ~8 % of the client's CPU per new connection)."""
    key = (os.environ.get("CLUSTERCTL_SSH_CONFIG"), address, user, port, proxy_jump, depth)
    target = _resolved.get(key)
    if target is None:
        target = _resolved[key] = _lookup(address, user, port, proxy_jump, depth)
    return target


def _lookup(address: str, user: Optional[str], port: Optional[int], proxy_jump: Optional[str], depth: int) -> _Target:
    config = _ssh_config().lookup(address)
    hostname = config.get("hostname", address)
    user = user or config.get("user") or getpass.getuser()
    port = int(port or config.get("port", 22))
    files = [os.path.expanduser(f) for f in config.get("identityfile", [])]
    spec = proxy_jump or config.get("proxyjump")
    jumps, command = [], None
    if spec and spec.lower() != "none" and depth < 4:
        for index, hop in enumerate(h.strip() for h in spec.split(",")):
            hop_user, hop_host, hop_port = _split_hop(hop)
            if hop_host in (address, hostname):
                break  # a wildcard Host block naming its own jump host
            resolved = _resolve(hop_host, hop_user, hop_port, None, depth + 1)
            jumps += (resolved.jumps if index == 0 else []) + [resolved]
    elif config.get("proxycommand", "none").lower() != "none":
        command = config["proxycommand"]
    return _Target(hostname, port, user, files, jumps, command)


def _split_hop(hop: str) -> tuple:
    """ProxyJump's [user@]host[:port], with [v6]:port."""
    user, _, rest = hop.rpartition("@")
    port = None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else None
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    else:
        host = rest
    return user or None, host, int(port) if port else None


def _known_keys(path: Path, name: str) -> list:
    """The keys known_hosts lists for `name`. The file is parsed once per process (again when it
    changes), not once per host as SSHClient.load_host_keys does: that costs O(lines²) per host."""
    try:
        stat = path.stat()
    except OSError:
        return []
    stamp = (stat.st_mtime_ns, stat.st_size)
    _paramiko()
    with _known_hosts_lock:
        cached = _known_hosts_files.get(path)
        if cached is None or cached[0] != stamp:
            cached = _known_hosts_files[path] = (stamp, _parse_known_hosts(path))
    keys, types = [], set()
    for hostnames, key in cached[1]:
        if key.get_name() not in types and any(_host_matches(name, h) for h in hostnames):
            keys.append(key)
            types.add(key.get_name())  # the first line of a key type wins, as with HostKeys.lookup
    return keys


def _parse_known_hosts(path: Path) -> list:
    entry_type = _paramiko().hostkeys.HostKeyEntry
    entries = []
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                entry = entry_type.from_line(line, number)
            except Exception:  # unknown key types, @cert-authority lines: skipped, like paramiko does
                continue
            if entry is not None and entry.key is not None:
                entries.append((tuple(entry.hostnames), entry.key))
    return entries


def _host_matches(name: str, pattern: str) -> bool:
    if pattern == name:
        return True
    if pattern.startswith("|1|"):
        import hmac

        return hmac.compare_digest(_paramiko().HostKeys.hash_host(name, pattern), pattern)
    return False


def _new_transport(sock, disabled_algorithms=None, **_ignored):
    """SSHClient's transport factory: our window and packet sizes, AES-GCM preferred."""
    transport = _paramiko().Transport(sock, disabled_algorithms=disabled_algorithms,
                                      default_window_size=CHANNEL_WINDOW, default_max_packet_size=CHANNEL_MAX_PACKET)
    options = transport.get_security_options()
    offered = tuple(options.ciphers)
    options.ciphers = tuple(c for c in PREFERRED_CIPHERS if c in offered) + tuple(c for c in offered if c not in PREFERRED_CIPHERS)
    return transport


_chunk_pipe_class = None


def _use_chunk_buffers(channel) -> None:
    """Give the channel receive buffers that keep arriving packets as they are.

    paramiko's BufferedPipe appends every packet to an array.array and copies it out twice per
    read (slice, then tobytes), holding the GIL: at bulk rates (collect-logs) that was the
    client's largest CPU cost. These buffers keep a list of the packets' bytes and join them
    once per read. Same interface; if a paramiko release renames these internals, nothing changes.
    """
    global _chunk_pipe_class
    if _chunk_pipe_class is None:
        _chunk_pipe_class = _make_chunk_pipe(_paramiko().buffered_pipe)
    if _chunk_pipe_class and hasattr(channel, "in_buffer") and hasattr(channel, "in_stderr_buffer"):
        channel.in_buffer = _chunk_pipe_class()
        channel.in_stderr_buffer = _chunk_pipe_class()


def _make_chunk_pipe(module):
    base = getattr(module, "BufferedPipe", None)
    if base is None or not all(hasattr(base(), a) for a in ("_lock", "_cv", "_event", "_closed")):
        return False

    class ChunkPipe(base):
        def __init__(self):
            super().__init__()
            self._chunks, self._size, self._want = [], 0, 0

        def feed(self, data):
            with self._lock:
                if self._event is not None:
                    self._event.set()
                self._chunks.append(bytes(data) if not isinstance(data, bytes) else data)
                self._size += len(data)
                if self._size >= self._want:
                    self._cv.notify_all()

        def wait_for(self, nbytes: int, timeout: float) -> None:
            """Until `nbytes` are buffered, the channel's input ends, or `timeout` passes: a bulk
            reader then wakes once per many packets instead of once per packet."""
            with self._lock:
                end = time.monotonic() + timeout
                self._want = nbytes
                try:
                    while self._size < nbytes and not self._closed:
                        remaining = end - time.monotonic()
                        if remaining <= 0:
                            break
                        self._cv.wait(remaining)
                finally:
                    self._want = 0

        def read_ready(self):
            with self._lock:
                return self._size > 0

        def __len__(self):
            with self._lock:
                return self._size

        def read(self, nbytes, timeout=None):
            with self._lock:
                if self._size == 0 and not self._closed:
                    if timeout == 0.0:
                        raise module.PipeTimeout()
                    deadline = None if timeout is None else time.monotonic() + timeout
                    while self._size == 0 and not self._closed:
                        remaining = None if deadline is None else deadline - time.monotonic()
                        if remaining is not None and remaining <= 0:
                            raise module.PipeTimeout()
                        self._cv.wait(remaining)
                return self._take(nbytes)

        def empty(self):
            with self._lock:
                return self._take(self._size)

        def _take(self, nbytes: int) -> bytes:
            if self._size <= nbytes:
                out = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
                self._chunks, self._size = [], 0
                if self._event is not None and not self._closed:
                    self._event.clear()
                return out
            parts, taken = [], 0
            while taken < nbytes:
                chunk = self._chunks[0]
                if taken + len(chunk) <= nbytes:
                    parts.append(self._chunks.pop(0))
                    taken += len(chunk)
                else:
                    parts.append(chunk[:nbytes - taken])
                    self._chunks[0] = chunk[nbytes - taken:]
                    taken = nbytes
            self._size -= taken
            return b"".join(parts)

    return ChunkPipe


def _tcp_socket(address: str, port: int, timeout: float) -> socket.socket:
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except OSError as exc:
        raise UnreachableError(
            f"cannot reach {address}:{port} within {timeout:g}s: {exc.strerror or exc}",
            fix="check that the host is up, sshd listens on that port, and no firewall drops it",
        ) from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # else Nagle/delayed-ACK stalls of ~40 ms
    _detect_dead_peer(sock)
    return sock


def _detect_dead_peer(sock: socket.socket, seconds: int = DEAD_PEER_S) -> None:
    """Have the kernel drop the connection once the peer has been silent for about `seconds`.

    A host cut off the network sends no FIN or RST: without this, a command or a Docker API
    stream (a pull) waits on the dead connection until TCP gives up, a quarter of an hour later.
    Keepalive probes cover an idle connection, TCP_USER_TIMEOUT one with data in flight; a node
    that is merely busy still answers the probes (its kernel does, not sshd).
    """
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle, interval = max(1, seconds // 3), max(1, seconds // 6)
    for option, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval),
                          ("TCP_KEEPCNT", max(1, (seconds - idle) // interval)),
                          ("TCP_USER_TIMEOUT", seconds * 1000)):
        if hasattr(socket, option):  # Linux; elsewhere the system's keepalive defaults apply
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


_loaded_keys: dict = {}
_keys_lock = threading.Lock()


def _first_loadable_key(paths: list) -> tuple[Optional[str], Any]:
    """(path, key) of the first of `paths` that loads without a passphrase, read once per process
    (again when the file changes): given a file name, paramiko reads and parses it on every
    connection, trying RSA, ECDSA and Ed25519 in turn (~15 % of the client's CPU per new
    connection). Files with a certificate beside them are left to paramiko, which loads both."""
    paramiko = _paramiko()
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            continue
        if os.path.exists(f"{path}-cert.pub"):
            continue
        stamp = (path, stat.st_mtime_ns, stat.st_size)
        with _keys_lock:
            if stamp not in _loaded_keys:
                try:
                    _loaded_keys[stamp] = paramiko.PKey.from_path(path)
                except Exception:  # encrypted, or a type paramiko reads another way: its own way
                    _loaded_keys[stamp] = None
            key = _loaded_keys[stamp]
        if key is not None:
            return path, key
    return None, None


def _connect(target: _Target, sock, keys: list, host: Host, look_for_keys: bool):
    """An authenticated SSHClient over `sock`, the host key verified against the inventory's known_hosts."""
    paramiko = _paramiko()
    first_path, first_key = _first_loadable_key(keys)
    keys = [path for path in keys if path != first_path]  # tried after the loaded key, by paramiko
    ssh = host.ssh
    known_hosts = Path(os.path.expanduser(ssh.known_hosts))
    client = paramiko.SSHClient()
    for key in _known_keys(known_hosts, target.known_hosts_name):
        client.get_host_keys().add(target.known_hosts_name, key.get_name(), key)
    client.set_missing_host_key_policy(
        _AcceptNewPolicy(known_hosts) if ssh.host_key_policy == "accept-new" else _RejectPolicy(known_hosts))
    try:
        client.connect(
            target.hostname, target.port, username=target.user, sock=sock, timeout=None,
            pkey=first_key, key_filename=keys or None, look_for_keys=look_for_keys,
            allow_agent=ssh.forward_agent or look_for_keys, banner_timeout=ssh.connect_timeout,
            auth_timeout=ssh.connect_timeout, transport_factory=_new_transport,
        )
    except HostKeyError:
        client.close()
        raise
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise HostKeyError(
            f"host key for {target.hostname} CHANGED (got {exc.key.get_name()} "
            f"{exc.key.get_fingerprint().hex()}, known_hosts has a different key): refusing to connect",
            where=host.name,
            fix=f"if the host was really reinstalled: ssh-keygen -f {known_hosts} -R {target.known_hosts_name}; "
            "otherwise treat this as a possible man-in-the-middle",
        ) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        raise UnreachableError(
            f"authentication failed as {target.user}@{target.hostname}: {exc}",
            where=host.name,
            fix="check ssh.user and ssh.identity_file in the inventory (or the agent)",
        ) from None
    except (OSError, paramiko.SSHException, EOFError) as exc:
        client.close()
        raise UnreachableError(
            f"cannot connect to {target.hostname}:{target.port}: {exc or type(exc).__name__}",
            where=host.name,
            fix="check that sshd runs there, the address/port in the inventory, and routing/firewalls",
        ) from None
    client.get_transport().set_keepalive(15)
    return client


def _docker_over_ssh(ssh_client, address: str):
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

    api = docker.APIClient(base_url="tcp://127.0.0.1:9", version=DOCKER_API_VERSION, timeout=300)
    adapter = ExistingSSHAdapter()
    api.mount("http+docker://ssh", adapter)
    api._custom_adapter = adapter
    api.base_url = "http+docker://ssh"
    client = docker.DockerClient.__new__(docker.DockerClient)
    client.api = api
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
        chunked = _chunk_pipe_class and isinstance(getattr(channel, "in_buffer", None), _chunk_pipe_class)
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


# --------------------------------------------------------------------------- local


class LocalTransport(_Runs):
    """Runs commands on this machine, without SSH (`connection: local`)."""

    def __init__(self, host: Host):
        self.host = host
        self._docker = None

    def open(self) -> "LocalTransport":
        return self

    alive = True

    def close(self) -> None:
        if self._docker is not None:
            self._docker.close()
            self._docker = None

    def connect_tcp(self, address: str, port: int, timeout: float) -> Optional[str]:
        try:
            socket.create_connection((address, port), timeout=timeout).close()
        except OSError as exc:
            return "timed out" if isinstance(exc, socket.timeout) else (exc.strerror or str(exc))
        return None

    def _exec(self, cmd: Command, on_out, on_err) -> CommandResult:
        start = time.monotonic()
        deadline = start + cmd.timeout if cmd.timeout else None
        try:
            proc = subprocess.Popen(
                remote_argv(cmd),
                stdin=subprocess.PIPE if cmd.stdin or cmd.stdin_open else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            on_err(f"{cmd.argv[0]}: {exc.strerror}\n".encode())
            return CommandResult(127, "", "", time.monotonic() - start)
        if cmd.stdin:
            threading.Thread(target=_feed_stdin, args=(proc, cmd.stdin, not cmd.stdin_open), daemon=True).start()
        timed_out = _pump_pipes(proc, on_out, on_err, deadline)
        if timed_out:
            proc.kill()
        code = proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
        return CommandResult(None if timed_out else code, "", "", time.monotonic() - start, timed_out)

    def docker(self):
        if self._docker is None:
            import docker

            self._docker = docker.DockerClient(
                base_url=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"), version=DOCKER_API_VERSION
            )
        return self._docker


def _feed_stdin(proc: subprocess.Popen, data: bytes, close: bool = True) -> None:
    try:
        proc.stdin.write(data)
        proc.stdin.flush()
        if close:
            proc.stdin.close()
    except (OSError, ValueError):  # the process exited (or its stdin was closed) meanwhile
        pass


def _pump_pipes(proc: subprocess.Popen, on_out, on_err, deadline: Optional[float]) -> bool:
    poller = select.poll()
    handlers = {proc.stdout.fileno(): on_out, proc.stderr.fileno(): on_err}
    for fd in handlers:
        poller.register(fd, select.POLLIN | select.POLLHUP)
    while handlers:
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            return True
        for fd, _event in poller.poll(None if wait is None else wait * 1000):
            data = os.read(fd, _READ_SIZE)
            if data:
                handlers[fd](data)
            else:
                poller.unregister(fd)
                del handlers[fd]
    return False


def connect(host: Host):
    """Open a transport to `host`. Raises UnreachableError or HostKeyError."""
    transport = LocalTransport(host) if host.is_local else SSHTransport(host)
    return transport.open()
