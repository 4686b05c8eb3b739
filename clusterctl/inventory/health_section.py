"""The inventory's `health:` section (issue #36): overrides of the health rules' table.

    health:
      rules:
        node_lost: {quarantine_after: 3}          # lost three times (within the window) to quarantine
        straggler: {quarantine_after: never, window_days: 2}

Each rule's kind is a row of clusterctl/health/rules.py (README: "Fleet health"); each value is a
whole number of events (or `never`), `window_days` a number of days (or `never`: every event
since the last release counts).
"""
from __future__ import annotations

from typing import Any, Optional

from clusterctl.health.rules import OVERRIDABLE, RULE_OF
from clusterctl.inventory.values import Doc, describe, did_you_mean
from clusterctl.models import HealthRuleOverride, HealthSettings

HEALTH_KEYS = ("rules",)


def health_settings(doc: Doc, data: Any) -> HealthSettings:
    if data is None:
        return HealthSettings()
    section = doc.mapping(data, ("health",), HEALTH_KEYS)
    rules = section.get("rules")
    if rules is None:
        return HealthSettings()
    path = ("health", "rules")
    if not isinstance(rules, dict):
        doc.fail(path, f"health.rules must be a mapping of rule names, got {describe(rules)}",
                 "write rules: {node_lost: {quarantine_after: 3}}")
    return HealthSettings(rules=tuple(_override(doc, kind, value, path + (kind,)) for kind, value in rules.items()))


def _override(doc: Doc, kind: Any, value: Any, path: tuple) -> HealthRuleOverride:
    if kind not in RULE_OF:
        doc.fail(path, f"unknown health rule '{kind}'{did_you_mean(str(kind), tuple(RULE_OF))}",
                 f"use one of: {', '.join(RULE_OF)}")
    entry = doc.mapping(value, path, OVERRIDABLE)
    if not entry:
        doc.fail(path, f"health rule {kind} changes nothing", f"write e.g. {kind}: {{quarantine_after: 2}}")
    return HealthRuleOverride(kind=kind, values=tuple((key, _count(doc, key, entry[key], path + (key,)))
                                                      for key in OVERRIDABLE if key in entry))


def _count(doc: Doc, key: str, value: Any, path: tuple) -> Optional[float]:
    """A whole number >= 1 (window_days: a number > 0), or `never` (None)."""
    if value == "never":
        return None
    whole = key != "window_days"
    good = not isinstance(value, bool) and (isinstance(value, int) if whole else isinstance(value, (int, float)))
    if not good or value <= 0:
        example = "2" if whole else "7"
        doc.fail(path, f"{key} must be {'a whole number of events' if whole else 'a number of days'} above 0, "
                 f"or never; got {describe(value)}", f"write {key}: {example} (or {key}: never)")
    return value
