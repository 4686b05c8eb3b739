"""df: free space where outputs land, and the size of /dev/shm.

The probe runs df under LC_ALL=C, in bytes (`-P -B1`). Where df knows no `-B` (BusyBox
builds, BSD) it falls back to `-P -k`; the header says the unit (`1B-blocks`, `1024-blocks`,
`1K-blocks`), so the parser reads the unit from it. A path that does not exist yet
(job.outputs before the first run) is read at its nearest existing parent: that is the
filesystem the directory will be created on.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from clusterctl.models import Command
from clusterctl.preflight.facts._text import excerpt, number, strip_provenance, unknown_option


@dataclass(frozen=True)
class DiskUsage:
    filesystem: str
    size_bytes: int
    used_bytes: int
    avail_bytes: int
    mount: str
    read_at: Optional[str] = None  # the path df was run on, when it is a parent of the one asked about


def df_command(path: str) -> Command:
    return Command(argv=("df", "-P", "-B1", path), timeout=30.0)


# Prints `path: P` (the nearest existing ancestor of $1), then df's table. `-B1` first; `-k` where
# this df refuses -B. POSIX sh: no `realpath`, no arrays.
_DF_AT = r'''p=$1
while [ ! -e "$p" ] && [ "$p" != / ] && [ -n "$p" ]; do p=$(dirname "$p"); done
echo "path: $p"
out=$(df -P -B1 "$p" 2>&1) || case $out in
  *"invalid option"*|*"unrecognized option"*|*"nknown option"*|*"illegal option"*) out=$(df -P -k "$p" 2>&1);;
esac
printf '%s\n' "$out"'''


def df_at_argv(path: str) -> tuple[str, ...]:
    """argv for DF_AT on `path` (the nearest existing parent is read when `path` does not exist)."""
    return ("sh", "-c", _DF_AT, "sh", path)


_BLOCK = re.compile(r"^([0-9]{1,12})([KMGT]?)(?:i?B)?-")  # 1B-blocks, 1024-blocks, 1K-blocks, 1B-块 (zh_CN)
_SCALE = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_df(text: str) -> Optional[DiskUsage]:
    """`df -B1 PATH` or `df -P -k PATH` (any header language); DF_AT's `path:` line too.

    None when df printed no data row (see `df_unreadable` for why)."""
    unit, read_at = 1, None
    rows: list[list[str]] = []
    for line in strip_provenance(text).splitlines():
        if line.startswith("path: "):
            read_at = line[len("path: "):].strip()
            continue
        fields = line.split()
        if not fields:
            continue
        block = _BLOCK.match(fields[1]) if len(fields) > 1 else None
        if block:  # the header row, in whatever language: its second column names the block size
            unit = int(block.group(1)) * _SCALE[block.group(2)]
            continue
        rows.append(fields)
    for index, row in enumerate(rows):
        # A long device name makes df wrap its row in two lines (without -P): rejoin them.
        if len(row) == 1 and index + 1 < len(rows):
            row = row + rows[index + 1]
        cells = [number(cell) for cell in row[1:4]]
        if len(row) < 6 or None in cells:
            continue
        size, used, avail = (cell * unit for cell in cells)
        return DiskUsage(filesystem=row[0], size_bytes=size, used_bytes=used, avail_bytes=avail,
                         mount=" ".join(row[5:]), read_at=read_at)
    return None


def df_unreadable(text: str, command: str = "df -P -B1") -> str:
    """Why parse_df found no data row, naming the command and quoting its output."""
    body = "\n".join(line for line in strip_provenance(text).splitlines() if not line.startswith("path: "))
    if unknown_option(body):
        return f"`{command}` and `df -P -k` were both refused: {excerpt(body, lines=1)}"
    return f"`{command}` printed {excerpt(body)}"
