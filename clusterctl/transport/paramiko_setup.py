"""paramiko, imported once and tuned: the transport factory (ciphers, window, packet size),
channel buffers that keep packets as a list of chunks, the reasons sshd gives for refusing a
channel, and the TCP socket (no Nagle, dead peers dropped by the kernel).
"""
from __future__ import annotations

import itertools
import socket
import threading
import time
import types
import weakref

from clusterctl.errors import UnreachableError

DEAD_PEER_S = 10  # an SSH connection whose peer stays silent this long is dropped


# AES-GCM first: with AES-NI it costs the client about half the CPU of aes128-ctr + HMAC per byte,
# which matters for collect-logs' bulk streams (paramiko's default order puts the CTR modes first).
PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "aes128-ctr", "aes256-ctr")


# Bytes in flight per channel before the server waits (paramiko: 2 MiB). Larger is not faster: what
# sshd may send but TCP cannot take yet piles up in sshd's buffers (page faults, memmove): a 600 MB
# collect took 1.2-1.8x the time with 16 MiB, 2.3x with 64 MiB (bench/collect.py); 1-4 MiB are alike.
CHANNEL_WINDOW = 4 << 20


CHANNEL_MAX_PACKET = 1 << 15  # paramiko's default; OpenSSH reads a session's output 32 KiB at a time anyway


# paramiko asks for new keys itself after 512 MiB either way, and that rekey races its own window
# adjustments: a busy controller reading a large output then failed with "Key-exchange timed out
# waiting for key negotiation" (paramiko#822, seen on a 1 GiB output in CI). sshd rekeys on its own
# schedule (RekeyLimit: by default after 4 Gi cipher blocks), a path without that race.
PEER_LED_REKEY = 1 << 62


_paramiko_module = None


_setup_lock = threading.Lock()


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
_failure_logs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # transport -> its _OpenFailureLog


def _open_failures(transport) -> list:
    """The reasons list of `transport`'s channel-open failures (its log channel gets a filter once).
    paramiko has no public API for the reason of a refused channel (ChannelException carries only
    the code); its own log line "... open FAILED: <reason>: ..." does, read through the public
    `set_log_channel` (tests/unit/test_library_canaries.py fails if paramiko words it otherwise)."""
    import logging

    with _setup_lock:
        failures = _failure_logs.get(transport)
        if failures is None:
            name = f"paramiko.transport.clusterctl.{next(_log_channels)}"
            transport.set_log_channel(name)
            failures = _failure_logs[transport] = _OpenFailureLog()
            logging.getLogger(name).addFilter(failures)
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


def _new_transport(sock, disabled_algorithms=None, host_key_order=(), **_ignored):
    """SSHClient's transport factory: our window and packet sizes, AES-GCM preferred, and the host
    key algorithms in the order ssh would ask for them (known_hosts.preferred_algorithms)."""
    transport = _transport_class()(sock, disabled_algorithms=disabled_algorithms,
                                   default_window_size=CHANNEL_WINDOW, default_max_packet_size=CHANNEL_MAX_PACKET)
    transport.clusterctl_host_key_order = tuple(host_key_order)
    # Private touch: the thresholds are Packetizer class attributes with no public setter; set on
    # this transport's packetizer only (tests/unit/test_library_canaries.py fails if they go).
    transport.packetizer.REKEY_BYTES = transport.packetizer.REKEY_PACKETS = PEER_LED_REKEY
    options = transport.get_security_options()
    offered = tuple(options.ciphers)
    options.ciphers = tuple(c for c in PREFERRED_CIPHERS if c in offered) + tuple(c for c in offered if c not in PREFERRED_CIPHERS)
    return transport


_ordered_transport = None


def _transport_class():
    """paramiko's Transport, asking for host key algorithms in a given order: paramiko's own
    order puts certificates last, so a server with a host certificate would send its plain key."""
    global _ordered_transport
    if _ordered_transport is None:
        base = _paramiko().Transport

        # Private touch: paramiko's only knob on host key algorithms is `disabled_algorithms`, which
        # removes but cannot reorder; the order is Transport's `preferred_keys` property (no public
        # setter). tests/unit/test_library_canaries.py fails loudly if it goes.
        class OrderedTransport(base):
            clusterctl_host_key_order: tuple = ()

            @property
            def preferred_keys(self):
                return self.clusterctl_host_key_order or base.preferred_keys.fget(self)

        _ordered_transport = OrderedTransport
    return _ordered_transport


def offered_host_key_algorithms() -> tuple[str, ...]:
    """What paramiko can verify: its plain host key algorithms and their certificate forms.
    Private touch: `Transport._preferred_keys` is the class's list; the public read of it
    (`get_security_options().keys`) needs a Transport over a socket (tests/unit/test_library_canaries.py)."""
    plain = tuple(_paramiko().Transport._preferred_keys)
    return plain + tuple(f"{name}-cert-v01@openssh.com" for name in plain)


_chunk_pipe_class = None


def _use_chunk_buffers(channel) -> None:
    """Give the channel receive buffers that keep arriving packets as they are.

    paramiko's BufferedPipe appends every packet to an array.array and copies it out twice per
    read (slice, then tobytes), holding the GIL: at bulk rates (collect-logs) that was the
    client's largest CPU cost. These buffers keep a list of the packets' bytes and join them
    once per read. Same interface; if a paramiko release renames these internals, nothing changes
    but the speed. Private touch: paramiko has no hook for a channel's receive buffer (`in_buffer`,
    `in_stderr_buffer`) and BufferedPipe's state is `_lock`, `_cv`, `_event`, `_closed`;
    tests/unit/test_library_canaries.py fails loudly when a release changes them (the fallback is silent).
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


def drop_when_silent(transport, interval: float, count: int = 3) -> None:
    """OpenSSH's ServerAliveInterval/ServerAliveCountMax for a connection the kernel cannot watch.

    Through a jump host or a proxy command, the TCP socket (`_detect_dead_peer`) is the jump
    host's, which stays alive when the node behind it drops off the network: a command or a pull
    would then wait on the tunnel for good. Every `interval` seconds a `keepalive@openssh.com`
    request asks the node's sshd for a reply; with none for `count` intervals the connection is
    closed, so what runs on it ends as an unreachable node. One thread per tunnelled connection.
    """
    def probe() -> None:
        while transport.is_active():
            time.sleep(interval)
            answered = threading.Event()
            timer = threading.Timer(interval * count, lambda: answered.is_set() or transport.close())
            timer.daemon = True
            timer.start()
            try:
                transport.global_request("keepalive@openssh.com", wait=True)
            except Exception:  # the transport went away while asking: nothing left to watch
                return
            finally:
                answered.set()
                timer.cancel()

    threading.Thread(target=probe, name="clusterctl-ssh-alive", daemon=True).start()
