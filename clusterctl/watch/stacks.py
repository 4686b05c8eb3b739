"""A rank's Python stack as py-spy reports it, read from py-spy's output. Pure: text in, values out.

py-spy (`py-spy dump --pid PID`) prints every Python thread of a process, innermost frame first.
`--json` gives the same as a list of threads (py-spy 0.3.12+, the binary clusterctl ships is 0.4);
the text form is read too, for a py-spy found on the node that is older. Whatever py-spy printed
(an error, a partial line, a stack trace of py-spy itself), the parsers return values and never
raise: the text comes from a node.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Optional

from clusterctl.node import straggler_verdict as verdict

# Where library code lives: a frame there is "inside" a library, not the job's own code.
_STDLIB_RE = verdict.STDLIB_RE
# A process state (/proc's `State:` letter) in which a rank cannot take part: held from outside (T, t: SIGSTOP, a
# debugger), stuck in the kernel (D: a dead NFS mount, a hung driver call), dead and not reaped (Z, X)
HELD_STATES = {"T": "stopped (state T: SIGSTOP or a job-control stop)", "t": "stopped by a tracer (state t)",
               "D": "in uninterruptible sleep (state D)", "Z": "a zombie (state Z: dead, not reaped)",
               "X": "dead (state X)"}
# Which frames wait for the other ranks (torch.distributed's files, CUDA's host-side syncs): the straggler
# verdict's, on the nodes too (node/straggler_verdict.py)


@dataclass(frozen=True)
class Frame:
    function: str
    file: str  # as py-spy shortens it: `torch/distributed/distributed_c10d.py`, `train.py`
    line: int
    path: str = ""  # the full path, when py-spy gave it

    def __str__(self) -> str:
        return f"{self.function} ({self.file}:{self.line})"

    @property
    def in_library(self) -> bool:
        return verdict.in_library(self.path or self.file)

    @property
    def in_torch_distributed(self) -> bool:
        return verdict.in_collective(self.path or self.file)

    @property
    def is_cuda_wait(self) -> bool:
        return verdict.is_cuda_wait(self.function, self.path or self.file)


@dataclass(frozen=True)
class ThreadStack:
    name: str
    active: Optional[bool]  # on a CPU when sampled (py-spy's "active"); None when not said
    frames: tuple[Frame, ...]  # innermost first


@dataclass(frozen=True)
class RankStack:
    """One rank's stack at one moment, on one node."""

    host: str
    rank: int
    local_rank: Optional[int]
    pid: int  # in the node's (host's) PID namespace
    threads: tuple[ThreadStack, ...] = ()
    error: str = ""  # why there is no stack (py-spy's own message, shortened)
    cpu_s: Optional[float] = None  # its main thread's CPU seconds so far, to tell a wait from a hot loop
    sockets: tuple = field(default=(), compare=False)  # its TCP connections (rollcall.Socket)
    state: str = ""  # its main thread's kernel state when sampled (R, S, D, T, Z ...; "" unknown)
    wchan: str = ""  # the kernel function it sleeps in ("" none or unknown)

    @property
    def held(self) -> str:
        """Why this rank cannot take part, from its process state ("" when it can)."""
        said = HELD_STATES.get(self.state, "")
        return f"{said[:-1]}, in {self.wchan})" if said and self.wchan else said

    @property
    def asleep_in_library(self) -> bool:
        """Its main thread asleep in the kernel (S) with a library's frame innermost: waiting for a peer
        inside torch's C++ (DDP's reducer under loss.backward(), FSDP's hooks, DeepSpeed's engine)."""
        return self.state == verdict.ASLEEP and self.innermost is not None and self.innermost.in_library

    @property
    def main(self) -> Optional[ThreadStack]:
        """The thread a rank's work runs in: MainThread, else the first one py-spy listed."""
        for thread in self.threads:
            if thread.name == "MainThread":
                return thread
        return self.threads[0] if self.threads else None

    @property
    def frames(self) -> tuple[Frame, ...]:
        main = self.main
        return main.frames if main else ()

    @property
    def innermost(self) -> Optional[Frame]:
        return self.frames[0] if self.frames else None

    @property
    def own_code(self) -> Optional[Frame]:
        """The innermost frame in the job's own code (what the user wrote), if any."""
        return next((f for f in self.frames if not f.in_library), None)

    @property
    def in_collective(self) -> bool:
        return any(f.in_torch_distributed for f in self.frames)

    @property
    def in_cuda_wait(self) -> bool:
        """Its main thread waits for the GPU (torch.cuda's synchronize): with NCCL, where a rank whose
        all_reduce cannot finish sits, since the collective itself returns at once."""
        return bool(self.frames) and self.frames[0].is_cuda_wait


# --------------------------------------------------------------------------- py-spy --json


def parse_pyspy_json(text: str) -> tuple[tuple[ThreadStack, ...], str]:
    """py-spy's `dump --json` -> (threads, error). An output that is not that JSON is the error."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return (), _error_of(text)
    if not isinstance(data, list):
        return (), _error_of(text)
    threads = []
    for item in data:
        if not isinstance(item, dict) or not isinstance(item.get("frames"), list):
            continue
        frames = tuple(frame for frame in (_json_frame(f) for f in item["frames"]) if frame is not None)
        name = item.get("thread_name")
        active = item.get("active")
        threads.append(ThreadStack(name if isinstance(name, str) else "", active if isinstance(active, bool) else None,
                                   frames))
    return tuple(threads), "" if threads or not data else _error_of(text)


def _json_frame(item) -> Optional[Frame]:
    if not isinstance(item, dict):
        return None
    name, path, short, line = (item.get(k) for k in ("name", "filename", "short_filename", "line"))
    if not isinstance(name, str):
        return None
    path = path if isinstance(path, str) else ""
    short = short if isinstance(short, str) and short else shorten_path(path)
    line = line if isinstance(line, int) and not isinstance(line, bool) and 0 <= line < 1 << 31 else 0
    return Frame(name, short, line, path)


# --------------------------------------------------------------------------- py-spy text


_THREAD_RE = re.compile(r'^Thread (?:0x)?[0-9A-Fa-f]+ \((?P<state>[^)]*)\)(?:: "(?P<name>.*)")?\s*$')
_FRAME_RE = re.compile(r"^\s+(?P<function>.+?) \((?P<file>.+):(?P<line>[0-9]{1,9})\)\s*$")


def parse_pyspy_text(text: str) -> tuple[tuple[ThreadStack, ...], str]:
    """py-spy's plain `dump` output -> (threads, error)."""
    threads: list[ThreadStack] = []
    current: Optional[tuple[str, Optional[bool]]] = None
    frames: list[Frame] = []
    for line in text.splitlines():
        thread = _THREAD_RE.match(line)
        if thread:
            if current is not None:
                threads.append(ThreadStack(current[0], current[1], tuple(frames)))
            state = thread.group("state")
            current = (thread.group("name") or "", "active" in state if state else None)
            frames = []
            continue
        frame = _FRAME_RE.match(line) if current is not None else None
        if frame:
            where = frame.group("file")
            path = where if where.startswith("/") else ""
            frames.append(Frame(frame.group("function"), shorten_path(where) if path else where,
                                int(frame.group("line")), path))
    if current is not None:
        threads.append(ThreadStack(current[0], current[1], tuple(frames)))
    return tuple(threads), "" if threads else _error_of(text)


def parse_pyspy(text: str) -> tuple[tuple[ThreadStack, ...], str]:
    """Either form, whichever py-spy printed."""
    if text.lstrip().startswith("["):
        threads, error = parse_pyspy_json(text)
        if threads or not error:
            return threads, error
    return parse_pyspy_text(text)


def _error_of(text: str) -> str:
    """py-spy's error in one line: `Error: ...` and its first cause, without py-spy's own backtrace."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    error = next((i for i, line in enumerate(lines) if line.startswith(("Error:", "error:"))), None)
    if error is None:
        return (" ".join(lines[:2]) or "py-spy printed nothing")[:300]
    causes = [line for line in lines[error + 1:error + 6] if re.match(r"^\d+: ", line)]
    said = lines[error].split(":", 1)[1].strip()
    return (said + (f" ({causes[0].split(': ', 1)[1]})" if causes else ""))[:300]


def shorten_path(path: str) -> str:
    """A full path as py-spy shortens it: the part after site-packages/, or the file name."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    stdlib = _STDLIB_RE.search(path)
    if stdlib:
        return path[stdlib.end():]
    return path.rsplit("/", 1)[-1] or path
