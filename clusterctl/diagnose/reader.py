"""Reading a log for diagnosis: bad input refused with one clear message, big logs streamed.

A log up to SMALL_LOG (1 MiB) is read whole. A bigger one (10 MB to gigabytes of training output) is read
in 1 MiB chunks and only the lines the rules could care about are kept: in its first HEAD_BYTES (launch,
NCCL init) and last TAIL_BYTES (where a crash ends a log, with torchrun's root-cause block) every
distinct line (lines equal but for their digits count once, the latest kept); in between, the
lines holding a CORE_TRIGGERS word (an error, a warning, a kill, a fault: what a failure
in the middle of a run prints) and the lines after them. Each word search is one C-speed pass over the chunk
(~0.7 GB/s), so the middle gets few of them. Memory stays bounded whatever the size.
`bench/diagnose_bench.py` measures 1 GB.
"""
from __future__ import annotations

import os
from collections import OrderedDict, deque
from pathlib import Path

from clusterctl.errors import UsageError

SMALL_LOG = 1 << 20  # above it, only distinct lines (digits aside) and trigger lines are diagnosed: < 1 s for 10 MB
CHUNK = 1 << 20
HEAD_BYTES = 2 << 20
TAIL_BYTES = 4 << 20
SAMPLE = 64 << 10
HEAD_LINES = 400
TAIL_LINES = 400
FOLLOW_LINES = 3
MAX_KEPT = 20_000  # distinct selected lines
CONTROL_BYTES = bytes(b for b in range(32) if b not in b"\t\n\r\x0b\x0c\x1b")  # text logs hardly hold these
MAX_LINE = 4096  # characters of one line that the rules look at (lines of megabytes exist)
CORE_TRIGGERS = (b"error", b"warn", b"kill", b"fault")  # lower-case; each is one pass over a chunk
# digits -> "0" and upper -> lower case in one pass: lines that differ only by their numbers (steps,
# losses, times, ranks) share a key
NORMALISE = bytes(48 if 48 <= c <= 57 else c + 32 if 65 <= c <= 90 else c for c in range(256))


class LogInputError(UsageError):
    """Input that is not a readable text log: one clear line, exit 2 (errors.UsageError)."""


def read_log(path: Path) -> str:
    """The text of a log file (selected lines if it is big); LogInputError for anything else."""
    path = Path(path)
    check_readable(path)
    size = path.stat().st_size
    with open(path, "rb") as handle:
        sample = handle.read(SAMPLE)
    check_text(path, sample, size)
    if size <= SMALL_LOG:
        return path.read_bytes().decode("utf-8", errors="replace")
    return select_lines(path)


def check_readable(path: Path) -> None:
    if not path.exists():
        raise LogInputError("no such file or directory", where=str(path),
                            fix="give a log file or a directory written by `clusterctl collect-logs`")
    if path.is_dir():
        return
    if not path.is_file():
        raise LogInputError("not a regular file", where=str(path), fix="give a log file (not a device or pipe)")
    if not os.access(path, os.R_OK):
        raise LogInputError("cannot read it: permission denied", where=str(path),
                            fix="make the file readable by this user (or run as its owner)")


def check_text(path: Path, sample: bytes, size: int) -> None:
    if size == 0 or not sample.strip():
        raise LogInputError("the log is empty: there is nothing to diagnose", where=str(path),
                            fix="give the log of the failed run (torchrun/kubectl/docker output), or "
                                "`clusterctl collect-logs` first")
    nul = sample.count(0)
    control = sum(sample.count(c) for c in CONTROL_BYTES)
    if nul > max(4, len(sample) // 1000) or control > len(sample) // 20:
        raise LogInputError(f"not a text log: {nul} NUL bytes in its first {len(sample)} bytes (binary?)",
                            where=str(path), fix="give the text log; decompress it first if it is .gz/.zst")
    invalid = _invalid_utf8(sample)
    if invalid > max(16, len(sample) // 50):
        raise LogInputError(f"not UTF-8 text: {invalid} undecodable bytes in its first {len(sample)}",
                            where=str(path), fix="convert it first, e.g. `iconv -f GB18030 -t UTF-8 LOG > LOG.utf8`")


def _invalid_utf8(sample: bytes) -> int:
    text = sample.decode("utf-8", errors="replace")
    # a multi-byte character cut at the sample's end is not an encoding error
    return max(0, text.count("\ufffd") - (3 if len(sample) == SAMPLE else 0))


def select_lines(path: Path) -> str:
    """The lines of a big log that rules could match, in file order, each distinct line once."""
    head: list[str] = []
    tail: deque = deque(maxlen=TAIL_LINES)
    kept: "OrderedDict[str, None]" = OrderedDict()
    carry = b""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        while True:
            offset = handle.tell()
            full = offset < HEAD_BYTES or offset + CHUNK > size - TAIL_BYTES
            block = handle.read(CHUNK)
            if not block and not carry:
                break
            data = carry + block
            cut = data.rfind(b"\n") + 1 if block else len(data)
            carry, data = data[cut:], data[:cut]
            if len(head) < HEAD_LINES:
                head.extend(_decode(line) for line in data.split(b"\n", HEAD_LINES)[:HEAD_LINES - len(head)])
            for line in (_distinct(data) if full else _selected(data, CORE_TRIGGERS)):
                if line not in kept:
                    if len(kept) >= MAX_KEPT:
                        kept.popitem(last=False)  # keep the latest: a crash ends a log
                    kept[line] = None
            tail.extend(_decode(line) for line in data[-(TAIL_LINES * MAX_LINE):].split(b"\n")[-TAIL_LINES:])
            if not block:
                break
    ordered = list(dict.fromkeys(head + list(kept) + list(tail)))
    return "\n".join(line for line in ordered if line.strip())


def _selected(data: bytes, triggers: tuple) -> list[str]:
    """Lines holding a trigger word, plus the FOLLOW_LINES after each."""
    lowered = data.lower()
    starts = set()
    for trigger in triggers:
        at = lowered.find(trigger)
        while at != -1:
            start = lowered.rfind(b"\n", 0, at) + 1
            starts.add(start)
            end = lowered.find(b"\n", at)
            if end == -1:
                break
            at = lowered.find(trigger, end)
    lines = []
    for start in sorted(starts):
        end = start
        for _ in range(FOLLOW_LINES + 1):
            nxt = data.find(b"\n", end)
            stop = len(data) if nxt == -1 else nxt
            lines.append(_decode(data[end:stop]))
            if nxt == -1:
                break
            end = nxt + 1
    return lines


def _distinct(data: bytes) -> list[str]:
    """Every line once per digit-normalised form, the latest occurrence, in file order."""
    lines = data.split(b"\n")
    latest = dict(zip(data.translate(NORMALISE).split(b"\n"), range(len(lines))))
    return [_decode(lines[index]) for index in sorted(latest.values())]


def _decode(raw: bytes) -> str:
    return raw[:MAX_LINE].decode("utf-8", errors="replace").rstrip("\r")
