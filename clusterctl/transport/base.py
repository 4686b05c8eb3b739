"""What every transport shares: the `Transport` interface, the argv actually run (env and
cwd folded in), several commands in one round trip (batches), and output split into lines.
"""
from __future__ import annotations

import shlex
from typing import Any, BinaryIO, Callable, Optional, Protocol, Sequence

from clusterctl.models import MAX_OUTPUT, Command, CommandResult, Host
from clusterctl.transport.become import prefix as become_prefix

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

    def send(self, data: bytes) -> bool:
        """Writes `data` to the command's stdin (a command started with `stdin_open`), never blocking for
        long; False where it could not (the command ended, its stdin closed, no room)."""

    def close(self) -> None:
        """Ends the command (its stdin closes, as with a closed SSH session), before its end too."""


class TcpForwardingDisabled(Exception):
    """The node's sshd refuses direct-tcpip channels (AllowTcpForwarding no)."""


# A privileged command. By default: as root already, or through `sudo -n` (never a password
# prompt, so never a hang) when the user may; else as the user. A host's `become` (Ansible's
# ansible_become*) decides instead. Each connection takes the choice once (transport/become.py) and
# runs a privileged argv behind its prefix; this script, which takes it per command, is what a batch's
# privileged sections run (the connection's choice in CLUSTERCTL_BECOME: `never` runs it as the SSH
# user, `sudo` through `sudo -n`, `sudo:USER` always through `sudo -n -u USER`, so a user without
# passwordless sudo gets sudo's own error, not a silent fallback) and, unset, the choice made here.
_BECOME = ('case "${CLUSTERCTL_BECOME:-auto}" in never) exec "$@";; '
           'sudo) exec sudo -n -- "$@";; sudo:*) u=${CLUSTERCTL_BECOME#sudo:}; [ "$(id -un)" = "$u" ] && exec "$@"; exec sudo -n -u "$u" -- "$@";; esac; '
           'if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; '
           'then exec sudo -n -- "$@"; fi; exec "$@"')


def with_become(argv: list[str], host: Host, choice: Optional[str] = None) -> list[str]:
    """`argv` with the connection's escalation `choice` (else the host's, from the inventory) in its
    environment, for the privileged sections of a batch inside it; unchanged where none is known or
    nothing inside asks (a privileged command alone took the choice's prefix in `remote_argv`)."""
    if choice is None and host.become is not None:
        choice = f"sudo:{host.become_user or 'root'}" if host.become else "never"
    if choice is None or not any(_BECOME in arg for arg in argv):
        return argv
    return ["env", f"CLUSTERCTL_BECOME={choice}", *argv]


def remote_argv(cmd: Command, become: Optional[str] = None) -> list[str]:
    """The argv actually executed: env and cwd folded in without a shell around user data; a
    privileged one behind the connection's `become` choice (transport/become.py), else behind the
    script that chooses per command."""
    argv = list(cmd.argv)
    if cmd.cwd:
        argv = ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", cmd.cwd, *argv]
    if cmd.env:
        argv = ["env", *(f"{k}={v}" for k, v in cmd.env), *argv]
    if cmd.privileged:
        argv = [*become_prefix(become), *argv] if become is not None else ["sh", "-c", _BECOME, "sh", *argv]
    return argv


def needs_become(cmd: Command) -> bool:
    """Whether `cmd` runs anything privileged (itself, or a batch's section): then its connection's
    choice is wanted before it starts."""
    return cmd.privileged or any(_BECOME in arg for arg in cmd.argv)


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


def become_asker(transport) -> Callable[[], Optional[str]]:
    """Asks `transport`'s node for its choice (become.CHECK), once: None where it cannot tell."""
    from clusterctl.transport.become import CHECK, from_check

    def ask() -> Optional[str]:
        result = transport.run(CHECK)
        return from_check(result.stdout) if result.ok else None

    return ask


def argv_for(cmd: Command, host: Host, decision, ask: Callable[[], Optional[str]]) -> list[str]:
    """What a transport runs for `cmd`: its connection's choice (`decision`, a become.Decision, asked
    through `ask` the first time a privileged command needs it) before it or in its batch's environment."""
    choice = decision.choice(ask) if needs_become(cmd) else None
    return with_become(remote_argv(cmd, choice), host, choice)


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
