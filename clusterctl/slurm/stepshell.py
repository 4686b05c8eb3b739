"""One long-lived step per node that runs the short commands sent to it (a shell over srun's stdin).

Why: every `srun` is a new job step. A run polls each node every second (run/runner.py), and
Slurm caps the steps of one job (MaxStepCount, 40000 by default: 5.5 hours of a 2-node run at
one step per poll) and logs and schedules each; a busy slurmctld also makes a step slower to
start than the poll's few seconds. So the short commands of a node (polls, tails, scans) go to
one step that stays, the way an SSH connection stays open; what streams, takes stdin or outlives
its call (the live log's follower, the launch) still gets a step of its own.

The protocol is line-based and binary-safe: the controller writes `ID BASE64(script)`; the step
runs the script with stdin from /dev/null and answers `@@cc-out ID` + base64 stdout,
`@@cc-err ID` + base64 stderr, `@@cc-end ID CODE`. A command that outlives its timeout ends the
step (the next command starts another): the step never answers out of order.
"""
from __future__ import annotations

import base64
import os
import select
import subprocess
import threading
import time
from typing import Optional

from clusterctl.models import CommandResult
from clusterctl.transport.local import _terminate

MARK = "@@cc-"
SERVER = r'''d=$(mktemp -d) || exit 1
trap 'rm -rf "$d"' EXIT
while IFS= read -r line; do
  id=${line%% *}
  printf '%s' "${line#* }" | base64 -d > "$d/cmd" 2>/dev/null || { echo "@@cc-end $id 127"; continue; }
  sh "$d/cmd" </dev/null >"$d/out" 2>"$d/err"; code=$?
  echo "@@cc-out $id"; base64 -w0 < "$d/out"; echo
  echo "@@cc-err $id"; base64 -w0 < "$d/err"; echo
  echo "@@cc-end $id $code"
done
'''


class StepShell:
    """The shell step of one node: `run(script, timeout)` -> CommandResult, or None when the step is
    busy (another thread's command) or cannot start: the caller then uses a step of its own."""

    def __init__(self, argv_prefix: tuple[str, ...]):
        self.argv_prefix = argv_prefix
        self._proc: Optional[subprocess.Popen] = None
        self._buffer = b""
        self._next_id = 0
        self._lock = threading.Lock()

    def run(self, script: str, timeout: float) -> Optional[CommandResult]:
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self._run_locked(script, timeout)
        finally:
            self._lock.release()

    def _run_locked(self, script: str, timeout: float) -> Optional[CommandResult]:
        started = time.monotonic()
        if self._proc is None or self._proc.poll() is not None:
            try:
                self._proc = subprocess.Popen([*self.argv_prefix, "sh", "-c", SERVER], stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                              start_new_session=True)
            except OSError:
                return None
            self._buffer = b""
        self._next_id += 1
        ident = str(self._next_id)
        try:
            self._proc.stdin.write(f"{ident} {base64.b64encode(script.encode()).decode()}\n".encode())
            self._proc.stdin.flush()
        except (OSError, ValueError):
            self.close()
            return None
        answer = self._read_answer(ident, started + timeout)
        if answer is None:  # timed out or the step died: never reuse a step that may answer late
            timed_out = time.monotonic() >= started + timeout
            self.close()
            return CommandResult(None, "", "", time.monotonic() - started, timed_out=True) if timed_out else None
        code, out, err = answer
        return CommandResult(code, out, err, time.monotonic() - started)

    def _read_answer(self, ident: str, deadline: float) -> Optional[tuple[int, str, str]]:
        fd = self._proc.stdout.fileno()
        fields: dict[str, bytes] = {}
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                text = line.decode("ascii", "replace")
                if text.startswith(f"{MARK}end {ident} "):
                    code = text.rsplit(" ", 1)[1]
                    return (int(code) if code.isdigit() else 1), _decoded(fields.get("out")), _decoded(fields.get("err"))
                for key in ("out", "err"):
                    if text == f"{MARK}{key} {ident}":
                        fields["pending"] = key.encode()
                        break
                else:
                    pending = fields.pop("pending", b"").decode()
                    if pending:
                        fields[pending] = line
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                return None
            data = os.read(fd, 1 << 16)
            if not data:
                return None
            self._buffer += data

    def close(self) -> None:
        """The end of its stdin ends the step's shell; one that does not end (a command still
        running) is terminated, as an SSH session's end would."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(2.0)
        except subprocess.TimeoutExpired:
            _terminate(proc, grace_s=1.0)


def _decoded(data: Optional[bytes]) -> str:
    try:
        return base64.b64decode(data or b"").decode("utf-8", "replace")
    except ValueError:  # binascii.Error: a line cut short
        return ""
