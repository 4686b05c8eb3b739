"""Reading log lines and node diagnostics, whatever wrote them.

Understands the prefixes and timestamps of torchrun/elastic, glog (c10d, NCCL watchdog),
DeepSpeed (`host: [default0]:`), torch's `[rank3]:`, mpirun `[1,3]<stdout>:`, srun
`--label` (`3: `), Kubernetes/`kubectl logs --timestamps`, NCCL's `host:pid:tid [dev]`,
and torchrun's ChildFailedError summary. Pure functions over text; no I/O.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import lru_cache
from typing import Optional

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>]")
SOURCE_COMMENT = re.compile(r"^# (?:source|cause|confirmed|fix|thread): ")  # fixture and corpus headers
RANK_FILE = re.compile(r"(?P<host>.+)-r(?P<rank>\d+)\.log$")
AGENT_FILE = re.compile(r"(?P<host>.+)-agent\.log$")

_TS_FORMATS = (  # (regex, strptime format, has year)
    (re.compile(r"^\[?(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:[.,](\d+))?(?:Z|[+-]\d\d:?\d\d)?\]?\s*"),
     "%Y-%m-%d %H:%M:%S", True),
    (re.compile(r"^\[([IWEF]\d{3,4} \d\d:\d\d:\d\d)(?:\.(\d+))?[^\]]*\]\s*"), "%m%d %H:%M:%S", False),
    (re.compile(r"^([IWEF]\d{4} \d\d:\d\d:\d\d)(?:\.(\d+))?(?: +\d+ +\S+\])?\s*"), "%m%d %H:%M:%S", False),
)
_RESUME_TS = re.compile(r"^(?:\[?[\w.-]+\]?\s*\|\|\s*)")  # determined.ai style "[ts] id || "
_PREFIXES = tuple(re.compile(p) for p in (
    r"^\[(?P<host>[\w.-]+) r(?:ank)?(?P<rank>\d+)\]:?\s?",  # clusterctl: "[node-1 rank3]: ", "[node-1 r3] "
    r"^\[default(?P<local_rank>\d+)\]:\s?",  # torchrun --tee / DeepSpeed
    r"^\[rank(?P<rank>\d+)\]:\s?",  # torch >= 2.2
    r"^\[RANK (?P<rank>\d+)\]\s*:?\s?",
    r"^\[\d+,(?P<rank>\d+)\]<std(?:out|err)>:\s?",  # mpirun --tag-output
    r"^(?P<rank>\d{1,4}):\s",  # srun --label
    r"^\[(?P<pid>\d+)\]\s(?=\[rank)",
    r"^(?P<host>[A-Za-z0-9][\w.-]*[\d-][\w.-]*):\s(?=\S)",  # pdsh / DeepSpeed launcher "worker-1: "
))
# a "name: " that is a program, not a pdsh host: its message must keep its name (nvidia-container-cli: ...)
_NOT_HOSTS = re.compile(r"(?:error|exception|warning|info|debug|note|\.py|\.sh|\.cc|\.cpp|\.h|\.so)$"
                        r"|^(?:nvidia|docker|containerd|kube|cuda|nccl|torch|python\d?|enroot|apptainer|singularity)[-.]"
                        r"|-(?:cli|hook|runtime|smi|ctk)$",
                        re.IGNORECASE)
NCCL_HOST = re.compile(r"^([\w.-]+):\d+:\d+ \[\d+\]")
TEXT_RANK = re.compile(r"\[(?:PG \S+ )?Rank (\d+)\]")


@dataclass(frozen=True)
class LogLine:
    text: str  # prefixes and timestamp removed
    raw: str  # ANSI-free original line
    number: int
    ts: Optional[float] = None
    rank: Optional[int] = None
    host: Optional[str] = None


@dataclass
class RootCause:
    """torchrun's 'Root Cause (first observed failure)' block."""

    fields: dict = field(default_factory=dict)

    @property
    def rank(self) -> Optional[int]:
        match = re.match(r"\s*(\d+)", self.fields.get("rank", ""))
        return int(match.group(1)) if match else None

    @property
    def host(self) -> Optional[str]:
        return self.fields.get("host") or None


# Logs pasted into forums, blogs and Q&A sites come back typeset: curly quotes and apostrophes ("doesn’t"),
# en/em dashes for "--", no-break spaces. Programs print the ASCII forms, which is what every signature reads.
_TYPESET = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
                          "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2033": '"',
                          "\u2013": "-", "\u2014": "--", "\u2212": "-", "\u00a0": " ", "\u202f": " ",
                          "\u3000": " ", "\uff1a": ": ", "\uff08": "(", "\uff09": ")", "\uff0c": ", "})


def plain_text(text: str) -> str:
    """`text` as the program printed it: no terminal escapes, one newline convention, ASCII punctuation."""
    return ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n").translate(_TYPESET)


def parse_timestamp(line: str, year: int = 1900) -> tuple[Optional[float], str]:
    """The leading timestamp of `line` as epoch seconds, and the line without it."""
    for pattern, fmt, has_year in _TS_FORMATS:
        match = pattern.match(line)
        if not match:
            continue
        stamp = match.group(1).replace("T", " ")
        seconds = _epoch(stamp if has_year else f"{year} {stamp[1:]}", fmt if has_year else f"%Y {fmt}")
        if seconds is None:
            return None, line
        fraction = float("0." + match.group(2)) if match.group(2) else 0.0
        return seconds + fraction, line[match.end():]
    return None, line


@lru_cache(maxsize=4096)
def _epoch(stamp: str, fmt: str) -> Optional[float]:
    try:
        return datetime.strptime(stamp, fmt).timestamp()
    except ValueError:
        return None


def strip_prefixes(line: str, year: int) -> tuple[str, dict]:
    """Peel launcher/scheduler prefixes off `line`; returns the rest and what they said."""
    found: dict = {}
    for _ in range(6):
        before = line
        ts, line = parse_timestamp(line, year)
        if ts is not None:
            found.setdefault("ts", ts)
            line = _RESUME_TS.sub("", line, count=1)
        for pattern in _PREFIXES:
            match = pattern.match(line)
            if match and not _NOT_HOSTS.search(match.groupdict().get("host") or "-"):
                for key, value in match.groupdict().items():
                    found.setdefault(key, value)
                line = line[match.end():]
                break
        if line == before:
            break
    return line, found


def parse_lines(text: str, host: Optional[str] = None, rank: Optional[int] = None,
                year: int = 1900) -> tuple[list[LogLine], list[RootCause]]:
    """Every meaningful line of `text` with its time, rank and host, plus torchrun's root causes."""
    lines: list[LogLine] = []
    roots: list[RootCause] = []
    block: Optional[RootCause] = None
    last_ts: Optional[float] = None
    for number, raw in enumerate(plain_text(text).split("\n"), 1):
        if not raw.strip() or SOURCE_COMMENT.match(raw):
            continue
        body, found = strip_prefixes(raw.strip(), year)
        last_ts = found.get("ts", last_ts)
        block = _track_root_cause(body, block, roots)
        line_rank = _first_int(found.get("rank"), block and block.rank, rank, _text_rank(body))
        line_host = host or (block and block.host) or found.get("host") or _nccl_host(body)
        lines.append(LogLine(body, raw.rstrip(), number, last_ts, line_rank, line_host))
    return lines, roots


def _track_root_cause(body: str, block: Optional[RootCause], roots: list[RootCause]) -> Optional[RootCause]:
    if body.startswith("Root Cause (first observed failure)"):
        roots.append(RootCause())
        return roots[-1]
    if block is None:
        return None
    if body.startswith("====") or body.startswith("----"):
        return None
    match = re.match(r"^(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*)$", body)
    if match:
        block.fields[match.group(1)] = match.group(2).strip()
    return block


def _first_int(*values) -> Optional[int]:
    for value in values:
        if value is not None and value != "":
            return int(value)
    return None


def _text_rank(body: str) -> Optional[int]:
    match = TEXT_RANK.search(body)
    return int(match.group(1)) if match else None


def _nccl_host(body: str) -> Optional[str]:
    match = NCCL_HOST.match(body)
    return match.group(1) if match else None


def identity_from_name(name: Optional[str], host: Optional[str], rank: Optional[int]):
    """Host and rank from a collected log's file name (`<host>-r<rank>.log`, `<host>-agent.log`)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1] if name else ""
    match = RANK_FILE.match(base) or AGENT_FILE.match(base)
    if match:
        host = host or match.group("host")
        if rank is None and "rank" in match.groupdict():
            rank = int(match.group("rank"))
    return host, rank


def with_rank(line: LogLine, rank: Optional[int]) -> LogLine:
    return line if rank is None else replace(line, rank=rank)


def guess_year(text: str) -> int:
    """The year of the first dated timestamp, to date glog's year-less ones alike."""
    match = re.search(r"\b(20\d\d)-\d\d-\d\d[T _]\d\d:\d\d", text)
    return int(match.group(1)) if match else 1900


# --------------------------------------------------------------------------- node diagnostics


def shm_size_bytes(df_text: str) -> Optional[int]:
    """Size of /dev/shm from `df -B1 /dev/shm` output."""
    for row in df_text.splitlines():
        cols = row.split()
        if len(cols) >= 6 and cols[-1] == "/dev/shm" and cols[1].isdigit():
            return int(cols[1])
    return None


def docker_shm_bytes(inspect_text: str) -> Optional[int]:
    try:
        data = json.loads(inspect_text)
    except ValueError:
        return None
    data = data[0] if isinstance(data, list) and data else data
    host_config = data.get("HostConfig", {}) if isinstance(data, dict) else {}
    if str(host_config.get("IpcMode", "")) == "host":
        return None
    size = host_config.get("ShmSize")
    return int(size) if isinstance(size, int) and size > 0 else None


def docker_image_id(inspect_text: str) -> Optional[str]:
    try:
        data = json.loads(inspect_text)
    except ValueError:
        return None
    data = data[0] if isinstance(data, list) and data else data
    image = data.get("Image") if isinstance(data, dict) else None
    return image if isinstance(image, str) and image else None


def env_vars(env_text: str) -> dict:
    pairs = (row.split("=", 1) for row in env_text.splitlines() if "=" in row)
    return {key.strip().removeprefix("export "): value.strip() for key, value in pairs}


def interface_names(ip_addr_text: str) -> set[str]:
    return set(re.findall(r"^\d+:\s+([\w.-]+)(?:@\S+)?:", ip_addr_text, re.MULTILINE))


def human_bytes(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.4g} {unit}"
    return f"{size} B"
