"""Small text helpers shared by the fact parsers. No I/O."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional

from clusterctl.models import Command, CommandResult

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


def number(digits: Optional[str]) -> Optional[int]:
    """An int from ASCII digits only, at most 18 of them: a node's text may hold a 5000-digit run
    (int() refuses those) or digits of other scripts, and no count or id we read is that long."""
    return int(digits) if digits is not None and re.fullmatch(r"[0-9]{1,18}", digits) else None


def to_int(value: Optional[str]) -> Optional[int]:
    """An int from a tool's cell, None for N/A, [Not Supported], blanks and the like."""
    if value is None:
        return None
    match = re.search(r"-?[0-9]+", value.replace(",", ""))
    if not match or _is_not_available(value):
        return None
    found = number(match.group().lstrip("-"))
    return None if found is None else (-found if match.group().startswith("-") else found)


def _is_not_available(value: str) -> bool:
    lowered = value.strip().lower()
    return lowered in ("", "n/a", "[n/a]", "none", "-") or "not supported" in lowered


def natural_key(name: str) -> tuple:
    """Sort key that puts mlx5_2 before mlx5_10 and GPU2 before GPU10."""
    return tuple((0, number(part)) if number(part) is not None else (1, part) for part in re.split(r"([0-9]+)", name))


def command_missing(text: str, tool: str) -> bool:
    """True when a shell (bash, dash, zsh) or an exec says `tool` is not installed."""
    name = re.escape(tool)
    patterns = (
        rf"{name}: (command )?not found",  # bash: ...: command not found / dash: ...: not found
        rf"{name}: Permission denied",  # on PATH but not executable for this user
        rf"command not found: {name}",  # zsh
        rf"{name}\W*: (No such file or directory|executable file not found)",
        rf"exec: \W*{name}\W*: executable file not found",
        rf"{name}\s*: 未找到命令",  # bash in zh_CN (the probe runs under LC_ALL=C; a pasted output may not)
    )
    return any(re.search(pattern, text) for pattern in patterns)


# What tools print for an option they do not know: GNU getopt ("invalid option -- 'H'", "unrecognized
# option '--json'"), BusyBox ("unrecognized option: B"), iproute2 ("Option "-j" is unknown"), BSD/z/OS.
_UNKNOWN_OPTION = re.compile(
    r"invalid option|unrecognized option|Option \"?-\w+\"? is unknown|unknown option|Unknown option|illegal option",
    re.IGNORECASE)


def unknown_option(text: str) -> bool:
    """True when a tool refused one of its options (an older or a BusyBox version)."""
    return bool(_UNKNOWN_OPTION.search(text))


def excerpt(text: str, lines: int = 3, width: int = 160) -> str:
    """The first lines of a tool's output, for a verdict that names what it could not read."""
    kept = [line.strip() for line in strip_provenance(text).splitlines() if line.strip()][:lines]
    if not kept:
        return "nothing"
    joined = " | ".join(kept)
    return repr(joined if len(joined) <= width else joined[:width] + "...")


# Tools print translated headers and messages under a non-English locale (df's "文件系统 1B-块",
# bash's "未找到命令"); every probe script runs with the C locale so the parsers read one language.
_C_LOCALE = "LC_ALL=C; LANG=C; export LC_ALL LANG; "


def in_c_locale(command: Command) -> Command:
    """`command` run under LC_ALL=C and LANG=C. A `sh -c SCRIPT` gets the exports in its script (no
    `env` binary needed, and a `docker exec` of it keeps them); anything else goes through `env`."""
    argv = command.argv
    if len(argv) >= 3 and argv[0] == "sh" and argv[1] == "-c":
        argv = (argv[0], argv[1], _C_LOCALE + argv[2]) + argv[3:]
    else:
        argv = ("env", "LC_ALL=C", "LANG=C") + argv
    return replace(command, argv=argv)
