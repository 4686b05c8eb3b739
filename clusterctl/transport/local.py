"""Commands on this machine, without SSH (`connection: local`)."""
from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import threading
import time
from typing import Optional

from clusterctl.models import Command, CommandResult, Host
from clusterctl.transport.base import DOCKER_API_VERSION, _Runs, argv_for, become_asker
from clusterctl.transport.become import Decision, known

_READ_SIZE = 1 << 16


class LocalTransport(_Runs):
    """Runs commands on this machine, without SSH (`connection: local`)."""

    def __init__(self, host: Host):
        self.host = host
        self._docker = None
        # how privileged commands run here, taken once (become.py): this process's own user
        import pwd

        uid = os.geteuid()
        try:
            user: Optional[str] = pwd.getpwuid(uid).pw_name
        except KeyError:  # a uid without a passwd entry (a container's arbitrary user)
            user = None
        self._become = Decision(known(host, user, uid == 0))

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

    def _popen(self, cmd: Command) -> subprocess.Popen:
        proc = subprocess.Popen(
            argv_for(cmd, self.host, self._become, become_asker(self)),
            stdin=subprocess.PIPE if cmd.stdin or cmd.stdin_open else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        if cmd.stdin:
            threading.Thread(target=_feed_stdin, args=(proc, cmd.stdin, not cmd.stdin_open), daemon=True).start()
        return proc

    def _exec(self, cmd: Command, on_out, on_err) -> CommandResult:
        start = time.monotonic()
        deadline = start + cmd.timeout if cmd.timeout else None
        try:
            proc = self._popen(cmd)
        except OSError as exc:
            on_err(f"{cmd.argv[0]}: {exc.strerror}\n".encode())
            return CommandResult(127, "", "", time.monotonic() - start)
        try:
            timed_out = _pump_pipes(proc, on_out, on_err, deadline)
        except BaseException:  # Ctrl-C: end the command as a closed SSH session would, letting its traps run
            _terminate(proc)
            raise
        if timed_out:
            proc.kill()
        code = proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
        return CommandResult(None if timed_out else code, "", "", time.monotonic() - start, timed_out)

    def open_stream(self, cmd: Command) -> "_PipeOutput":
        """The command started, its output read by whoever polls (executor.Streams)."""
        started = time.monotonic()
        try:
            return _PipeOutput(self._popen(cmd), started)
        except OSError as exc:
            return _PipeOutput(None, started, f"{cmd.argv[0]}: {exc.strerror}\n".encode())

    def docker(self):
        if self._docker is None:
            import docker

            self._docker = docker.DockerClient(
                base_url=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"), version=DOCKER_API_VERSION
            )
        return self._docker


class _PipeOutput:
    """A local command's stdout and stderr read without blocking (transport.base.OutputStream)."""

    def __init__(self, proc: Optional[subprocess.Popen], started: float, failed_to_start: bytes = b""):
        self.proc, self.started = proc, started
        self.pipes = {} if proc is None else {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
        for fd in self.pipes:
            os.set_blocking(fd, False)
        self.pending = [("stderr", failed_to_start)] if failed_to_start else []

    def filenos(self) -> list[int]:
        return list(self.pipes)

    def read_ready(self) -> Optional[list[tuple[str, bytes]]]:
        chunks, self.pending = self.pending, []
        for fd, name in list(self.pipes.items()):
            try:
                data = os.read(fd, _READ_SIZE)
            except BlockingIOError:
                continue
            if data:
                chunks.append((name, data))
            else:
                del self.pipes[fd]
        return chunks if chunks or self.pipes else None

    def exited(self) -> Optional[CommandResult]:
        if self.proc is None:
            return CommandResult(127, "", "", time.monotonic() - self.started)
        code = self.proc.poll()
        if code is None:
            return None
        self._close_pipes()
        return CommandResult(code, "", "", time.monotonic() - self.started)

    def send(self, data: bytes) -> bool:
        stdin = self.proc.stdin if self.proc is not None else None
        if stdin is None or stdin.closed or self.proc.poll() is not None:
            return False
        try:  # a few bytes into a pipe's 64 KiB: never blocks while the command reads its stdin
            stdin.write(data)
            stdin.flush()
        except (OSError, ValueError):
            return False
        return True

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _terminate(self.proc)
        self._close_pipes()

    def _close_pipes(self) -> None:
        if self.proc is not None:
            for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()
        self.pipes = {}


def _terminate(proc: subprocess.Popen, grace_s: float = 2.0) -> None:
    """TERM to the command's session (it was started in one of its own), KILL what is left after `grace_s`."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # already gone
        pass


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
