"""The shape of the rule table: a `Rule` (a cause, its README summary, its fix) holds weighted `Signal`s.

rules.py and rules_topology.py hold the rows; matching.py searches them; families.py's evidence
joins the same causes under its own family keys.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Pattern

from clusterctl.diagnose.textmatch import compiled, required_literals


@dataclass(frozen=True)
class Signal:
    pattern: str
    weight: float
    requires: str = ""
    unless: str = ""
    consequence: bool = False
    unless_log: str = ""  # a regex that, anywhere in the log, hands the line to a more specific cause
    fix: str = ""  # this signal's own fix template, where its cause's does not fit what it names

    @property
    def regex(self) -> Pattern[str]:
        return compiled(self.pattern)

    @property
    def keywords(self) -> Optional[tuple[str, ...]]:
        return required_literals(self.pattern)


def S(pattern: str, weight: float, requires: str = "", unless: str = "", consequence: bool = False,
      unless_log: str = "", fix: str = "") -> Signal:
    return Signal(pattern, weight, requires, unless, consequence, unless_log, fix)


@dataclass(frozen=True)
class Rule:
    cause: str
    summary: str
    fix: str
    signals: tuple[Signal, ...] = field(default=())
