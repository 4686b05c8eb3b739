"""The only module that talks to hosts: SSH (Fabric/paramiko), Docker's engine API, or local.

A `Transport` runs a `Command` (an argv tuple) on one host and returns a `CommandResult`.
Quoting happens here and only here (`shlex.join`). Connection problems raise
`UnreachableError` / `HostKeyError`; the executor turns them into per-host results.

Host keys are verified against the inventory's known_hosts file, never auto-added:
`strict` refuses unknown and changed keys, `accept-new` records unknown keys (like
OpenSSH's StrictHostKeyChecking=accept-new) and still refuses changed ones.
"""
from __future__ import annotations

import os
import select
import shlex
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import BinaryIO, Callable, Optional, Protocol

from clusterctl.errors import HostKeyError, UnreachableError
from clusterctl.models import Command, CommandResult, Host

OnLine = Callable[[str, str], None]  # (stream "stdout"|"stderr", line without newline)
DOCKER_API_VERSION = "1.41"  # Docker 20.10+; every engine we support speaks it
_READ_SIZE = 1 << 16
DEAD_PEER_S = 10  # an SSH connection whose peer stays silent this long is dropped
_known_hosts_lock = threading.Lock()


class Transport(Protocol):
    host: Host

    def run(self, cmd: Command, on_line: Optional[OnLine] = None) -> CommandResult: ...

    def run_to_sink(self, cmd: Command, sink: BinaryIO, on_bytes: Optional[Callable[[int], None]] = None) -> CommandResult: ...

    def docker(self): ...

    def close(self) -> None: ...


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
            try:
                sink.write(data)
            except OSError as exc:  # the local disk, not the connection: kept apart from network errors
                raise _SinkError(exc) from None
            if on_bytes:
                on_bytes(len(data))

        try:
            result = self._exec(cmd, write, err.feed)
        except _SinkError as exc:
            raise exc.args[0] from None
        return CommandResult(result.exit_code, "", err.finish(), result.duration, result.timed_out)


class _SinkError(Exception):
    """A write to the local sink failed (e.g. a full disk); carries the OSError."""



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
        self._conn = None
        self._docker = None

    # ---- connection
    def open(self) -> "SSHTransport":
        import paramiko
        from fabric import Config, Connection

        ssh = self.host.ssh
        known_hosts = Path(os.path.expanduser(ssh.known_hosts))
        connect_kwargs = {
            "banner_timeout": ssh.connect_timeout,
            "auth_timeout": ssh.connect_timeout,
            "allow_agent": ssh.forward_agent or not ssh.identity_file,
        }
        if ssh.identity_file:
            connect_kwargs["key_filename"] = [os.path.expanduser(ssh.identity_file)]
            connect_kwargs["look_for_keys"] = False
        # ~/.ssh/config (HostName, User, Port, IdentityFile, ProxyJump) applies; CLUSTERCTL_SSH_CONFIG
        # names another file (tests, shared jump-host setups).
        config = Config(runtime_ssh_path=os.environ.get("CLUSTERCTL_SSH_CONFIG") or None,
                        overrides={"load_ssh_configs": True})
        conn = Connection(
            self.host.address,
            user=ssh.user,
            port=ssh.port,
            config=config,
            connect_timeout=max(1, int(ssh.connect_timeout)),
            forward_agent=ssh.forward_agent,
            gateway=Connection(ssh.proxy_jump) if ssh.proxy_jump else None,
            connect_kwargs=connect_kwargs,
        )
        client = conn.client
        client.get_host_keys().clear()
        if known_hosts.exists():
            client.load_host_keys(str(known_hosts))
        policy = _AcceptNewPolicy(known_hosts) if ssh.host_key_policy == "accept-new" else _RejectPolicy(known_hosts)
        client.set_missing_host_key_policy(policy)
        if not conn.gateway:
            conn.connect_kwargs["sock"] = self._tcp_socket(conn.host, conn.port, ssh.connect_timeout)
            conn.connect_timeout = None
        try:
            conn.open()
        except HostKeyError:
            conn.close()
            raise
        except paramiko.BadHostKeyException as exc:
            conn.close()
            raise HostKeyError(
                f"host key for {self.host.address} CHANGED (got {exc.key.get_name()} "
                f"{exc.key.get_fingerprint().hex()}, known_hosts has a different key): refusing to connect",
                where=self.host.name,
                fix=f"if the host was really reinstalled: ssh-keygen -f {known_hosts} -R {self.host.address}; "
                "otherwise treat this as a possible man-in-the-middle",
            ) from None
        except paramiko.AuthenticationException as exc:
            conn.close()
            raise UnreachableError(
                f"authentication failed as {conn.user}: {exc}",
                where=self.host.name,
                fix="check ssh.user and ssh.identity_file in the inventory (or the agent)",
            ) from None
        except (OSError, paramiko.SSHException, EOFError) as exc:
            conn.close()
            raise UnreachableError(
                f"cannot connect to {conn.host}:{conn.port}: {exc or type(exc).__name__}",
                where=self.host.name,
                fix="check that sshd runs there, the address/port in the inventory, and routing/firewalls",
            ) from None
        transport = conn.client.get_transport()
        transport.set_keepalive(15)
        self._conn = conn
        return self

    @staticmethod
    def _tcp_socket(address: str, port: int, timeout: float) -> socket.socket:
        try:
            sock = socket.create_connection((address, port), timeout=timeout)
        except OSError as exc:
            raise UnreachableError(
                f"cannot reach {address}:{port} within {timeout:g}s: {exc.strerror or exc}",
                fix="check that the host is up, sshd listens on that port, and no firewall drops it",
            ) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _detect_dead_peer(sock)
        return sock

    @property
    def _transport(self):
        transport = self._conn.client.get_transport() if self._conn else None
        if transport is None or not transport.is_active():
            raise UnreachableError("the SSH connection was lost", where=self.host.name, fix="check the host and its network")
        return transport

    @property
    def alive(self) -> bool:
        """False once the connection is gone (closed, or dropped as a dead peer)."""
        transport = self._conn.client.get_transport() if self._conn else None
        return transport is not None and transport.is_active()

    def close(self) -> None:
        if self._docker is not None:
            self._docker.close()
            self._docker = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ---- commands
    def _exec(self, cmd: Command, on_out, on_err) -> CommandResult:
        start = time.monotonic()
        deadline = start + cmd.timeout if cmd.timeout else None
        try:
            open_timeout = min(self.host.ssh.connect_timeout, cmd.timeout or self.host.ssh.connect_timeout)
            channel = self._transport.open_session(timeout=open_timeout)
            channel.exec_command(shlex.join(remote_argv(cmd)))
            if cmd.stdin:
                channel.sendall(cmd.stdin)
            if not cmd.stdin_open:
                channel.shutdown_write()
            timed_out = self._pump(channel, on_out, on_err, deadline)
            code = None if timed_out else channel.recv_exit_status()
            channel.close()
        except (OSError, EOFError) as exc:
            raise UnreachableError(f"connection lost while running {cmd.argv[0]}: {exc}", where=self.host.name) from None
        except Exception as exc:  # paramiko.SSHException and ChannelException
            if type(exc).__module__.startswith("paramiko"):
                raise UnreachableError(f"SSH error while running {cmd.argv[0]}: {exc}", where=self.host.name) from None
            raise
        return CommandResult(code, "", "", time.monotonic() - start, timed_out)

    @staticmethod
    def _pump(channel, on_out, on_err, deadline: Optional[float]) -> bool:
        """Copy the channel's output to the callbacks until EOF and exit; True on timeout."""
        poller = select.poll()
        poller.register(channel.fileno(), select.POLLIN)  # paramiko sets this pipe on new data and on EOF
        while True:
            while channel.recv_ready():
                on_out(channel.recv(_READ_SIZE))
            while channel.recv_stderr_ready():
                on_err(channel.recv_stderr(_READ_SIZE))
            if channel.eof_received or channel.closed:
                while channel.recv_ready():
                    on_out(channel.recv(_READ_SIZE))
                while channel.recv_stderr_ready():
                    on_err(channel.recv_stderr(_READ_SIZE))
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if channel.status_event.wait(remaining):
                    return False
                channel.close()
                return True
            wait = 1.0 if deadline is None else deadline - time.monotonic()
            if wait <= 0:
                channel.close()
                return True
            poller.poll(min(wait, 1.0) * 1000)

    # ---- docker
    def docker(self):
        """A docker-py client whose API requests ride this SSH connection (`docker system dial-stdio`)."""
        if self._docker is None:
            self._docker = _docker_over_ssh(self._conn.client, self.host.address)
        return self._docker


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
