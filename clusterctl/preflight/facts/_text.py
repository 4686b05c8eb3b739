"""Small text helpers shared by the fact parsers. No I/O."""
from __future__ import annotations

import re
from typing import Optional

from clusterctl.models import CommandResult

# Fixture files (and pasted captures) may open with comment lines naming where the
# output came from; they are never part of a tool's output.
_PROVENANCE = re.compile(r"^#\s*(source|captured|command|note|trimmed)\b.*$", re.IGNORECASE)


def strip_provenance(text: str) -> str:
    """Drop leading `# source: ...`-style lines; keep everything else byte for byte."""
    lines = text.splitlines(keepends=True)
    start = 0
    while start < len(lines) and _PROVENANCE.match(lines[start].strip()):
        start += 1
    return "".join(lines[start:])


def combined(result: CommandResult) -> str:
    """stdout then stderr: tools print their failure reasons on either."""
    if result.stderr and result.stdout:
        return result.stdout.rstrip("\n") + "\n" + result.stderr
    return result.stdout or result.stderr


def to_int(value: Optional[str]) -> Optional[int]:
    """An int from a tool's cell, None for N/A, [Not Supported], blanks and the like."""
    if value is None:
        return None
    match = re.search(r"-?\d+", value.replace(",", ""))
    return int(match.group()) if match and not _is_not_available(value) else None


def _is_not_available(value: str) -> bool:
    lowered = value.strip().lower()
    return lowered in ("", "n/a", "[n/a]", "none", "-") or "not supported" in lowered


def natural_key(name: str) -> tuple:
    """Sort key that puts mlx5_2 before mlx5_10 and GPU2 before GPU10."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def command_missing(text: str, tool: str) -> bool:
    """True when a shell (bash, dash, zsh) or an exec says `tool` is not installed."""
    name = re.escape(tool)
    patterns = (
        rf"{name}: (command )?not found",  # bash: ...: command not found / dash: ...: not found
        rf"{name}: Permission denied",  # on PATH but not executable for this user
        rf"command not found: {name}",  # zsh
        rf"{name}\W*: (No such file or directory|executable file not found)",
        rf"exec: \W*{name}\W*: executable file not found",
    )
    return any(re.search(pattern, text) for pattern in patterns)
