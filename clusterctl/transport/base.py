"""What every transport shares: the `Transport` interface, the argv actually run (env and
cwd folded in), several commands in one round trip (batches), and output split into lines.
"""
from __future__ import annotations

import shlex
from typing import Any, BinaryIO, Callable, Optional, Protocol, Sequence

from clusterctl.models import MAX_OUTPUT, Command, CommandResult, Host

OnLine = Callable[[str, str], None]  # (stream "stdout"|"stderr", line without newline)


DOCKER_API_VERSION = "1.41"  # Docker 20.10+; every engine we support speaks it


class Transport(Protocol):
    host: Host

    def run(self, cmd: Command, on_line: Optional[OnLine] = None) -> CommandResult: ...

    def run_to_sink(self, cmd: Command, sink: BinaryIO, on_bytes: Optional[Callable[[int], None]] = None) -> CommandResult: ...

    def run_reading(self, cmd: Command, consume: Callable[[BinaryIO], Any],
                    on_bytes: Optional[Callable[[int], None]] = None) -> tuple[CommandResult, Any]: ...

    def open_stream(self, cmd: Command) -> "OutputStream": ...

    def connect_tcp(self, address: str, port: int, timeout: float) -> Optional[str]: ...

    def docker(self): ...

    def close(self) -> None: ...


class OutputStream(Protocol):
    """A started command whose output is read without blocking, so that one thread can read many
    (executor.Streams: the live log of every node of a run, `logs --follow`)."""

    def filenos(self) -> Sequence[int]:
        """Descriptors that turn readable when output (or its end) arrives; fewer as pipes end."""

    def read_ready(self) -> Optional[list[tuple[str, bytes]]]:
        """("stdout" | "stderr", data) chunks buffered now (maybe none), never blocking; None once
        the output has ended."""

    def exited(self) -> Optional[CommandResult]:
        """Once the output has ended: None until the command's exit status is in, then the result
        (stdout and stderr left empty: they went through read_ready). Never blocks."""

    def close(self) -> None:
        """Ends the command (its stdin closes, as with a closed SSH session), before its end too."""


class TcpForwardingDisabled(Exception):
    """The node's sshd refuses direct-tcpip channels (AllowTcpForwarding no)."""


# A privileged command. By default: as root already, or through `sudo -n` (never a password
# prompt, so never a hang) when the user may; else as the user (the check costs one `sudo -n true`
# per command). A host's `become` (Ansible's ansible_become*) decides instead, through
# CLUSTERCTL_BECOME (`with_become`): `never` runs it as the SSH user; `sudo:USER` always through
# `sudo -n -u USER`, so a user without passwordless sudo gets sudo's own error, not a silent fallback.
_BECOME = ('case "${CLUSTERCTL_BECOME:-auto}" in never) exec "$@";; '
           'sudo:*) u=${CLUSTERCTL_BECOME#sudo:}; [ "$(id -un)" = "$u" ] && exec "$@"; exec sudo -n -u "$u" -- "$@";; esac; '
           'if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; '
           'then exec sudo -n -- "$@"; fi; exec "$@"')


def with_become(argv: list[str], host: Host) -> list[str]:
    """`argv` with the host's escalation choice in its environment, for the privileged commands
    (and the privileged sections of a batch) inside it; unchanged where the inventory says nothing."""
    if host.become is None:
        return argv
    choice = f"sudo:{host.become_user or 'root'}" if host.become else "never"
    return ["env", f"CLUSTERCTL_BECOME={choice}", *argv]


def remote_argv(cmd: Command) -> list[str]:
    """The argv actually executed: env and cwd folded in without a shell around user data."""
    argv = list(cmd.argv)
    if cmd.cwd:
        argv = ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", cmd.cwd, *argv]
    if cmd.env:
        argv = ["env", *(f"{k}={v}" for k, v in cmd.env), *argv]
    if cmd.privileged:
        argv = ["sh", "-c", _BECOME, "sh", *argv]
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
    """run/run_to_sink on top of a transport's `_exec(cmd, on_stdout_bytes, on_stderr_bytes)`. What a
    node prints is kept up to the command's `max_output` per stream, the rest counted and named."""

    def run(self, cmd: Command, on_line: Optional[OnLine] = None) -> CommandResult:
        out, err = self._splitter("stdout", on_line, cmd), self._splitter("stderr", on_line, cmd)
        result = self._exec(cmd, out.feed, err.feed)
        return CommandResult(result.exit_code, out.finish(), err.finish(), result.duration, result.timed_out)

    def _splitter(self, stream: str, on_line: Optional[OnLine], cmd: Command) -> "_LineSplitter":
        return _LineSplitter(stream, on_line, cmd.max_output, f"`{cmd.display[:200]}` on {self.host.name}")

    def run_to_sink(self, cmd: Command, sink: BinaryIO, on_bytes: Optional[Callable[[int], None]] = None) -> CommandResult:
        err = self._splitter("stderr", None, cmd)

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


LONGEST_LINE = 1 << 20  # a line handed to on_line: a longer one goes in pieces of this many characters


class _LineSplitter:
    """One stream of a command: its text kept up to `cap` bytes (the rest counted, then named in a last
    line of the stream: what, where, how many bytes were dropped), its lines handed to `on_line` as they
    come (a line longer than LONGEST_LINE in pieces). Never more than `cap` of a node's output held."""

    def __init__(self, stream: str, on_line: Optional[OnLine], cap: int = MAX_OUTPUT, what: str = "a command"):
        import codecs

        self.stream, self.on_line, self.partial, self.chunks = stream, on_line, "", []
        self.cap, self.what, self.kept, self.dropped = cap, what, 0, 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character split across reads

    def feed(self, data: bytes) -> None:
        room = self.cap - self.kept
        if len(data) > room:
            self.dropped += len(data) - max(room, 0)
            data = data[:max(room, 0)]
        self.kept += len(data)
        text = self.decoder.decode(data)
        if not text:
            return
        self.chunks.append(text)
        if self.on_line is None:
            return
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()
        for line in lines:
            self.on_line(self.stream, line.rstrip("\r"))
        while len(self.partial) > LONGEST_LINE:
            self.on_line(self.stream, self.partial[:LONGEST_LINE])
            self.partial = self.partial[LONGEST_LINE:]

    def finish(self) -> str:
        tail = self.decoder.decode(b"", final=True)
        self.chunks.append(tail)
        self.partial += tail
        if self.on_line is not None and self.partial:
            self.on_line(self.stream, self.partial)
        if self.dropped:
            marker = (f"clusterctl: the {self.stream} of {self.what} passed its cap of {self.cap} bytes; "
                      f"{self.dropped} more bytes were dropped (Command.max_output)")
            self.chunks.append(("" if "".join(self.chunks[-1:]).endswith("\n") else "\n") + marker + "\n")
            if self.on_line is not None:
                self.on_line(self.stream, marker)
        return "".join(self.chunks)
