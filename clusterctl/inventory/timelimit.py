"""Slurm's time limits as Slurm writes and reads them, in seconds.

One reader for what the user writes (`scheduler.time`, sbatch's `--time` forms) and what
sinfo prints (`%l`): `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`, and
`infinite`/`UNLIMITED` (None: no limit). Pure.
"""
from __future__ import annotations

import re
from typing import Optional

_FORM = re.compile(r"^(?:(?P<days>\d{1,4})-)?(?P<a>\d{1,7})(?::(?P<b>\d{1,2}))?(?::(?P<c>\d{1,2}))?$")
UNLIMITED_WORDS = ("infinite", "unlimited")


class TimeLimitError(ValueError):
    """Not a Slurm time limit."""


def seconds(text: str) -> Optional[int]:
    """A Slurm time limit in seconds; None for no limit. Raises TimeLimitError."""
    word = text.strip()
    if word.lower() in UNLIMITED_WORDS:
        return None
    match = _FORM.match(word)
    if not match:
        raise TimeLimitError(f"{text!r} is not a Slurm time limit")
    days, a, b, c = (match.group(k) for k in ("days", "a", "b", "c"))
    parts = [int(p) for p in (a, b, c) if p is not None]
    if any(p >= 60 for p in parts[1:]):
        raise TimeLimitError(f"{text!r}: minutes and seconds are below 60")
    if days is not None:
        # with days: D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, secs = (parts + [0, 0])[:3]
        if hours >= 24:
            raise TimeLimitError(f"{text!r}: hours after the day are below 24")
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + secs
    if len(parts) == 1:
        return parts[0] * 60  # MM
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]  # MM:SS
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]  # HH:MM:SS


def text(secs: Optional[int]) -> str:
    """Seconds -> `[D-]HH:MM:SS` (what sbatch takes); None -> `UNLIMITED`."""
    if secs is None:
        return "UNLIMITED"
    days, rest = divmod(int(secs), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs_ = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs_:02d}"
    return f"{days}-{clock}" if days else clock
