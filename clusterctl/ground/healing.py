"""What a run that heals itself does with a failure (issue 35), as the controller asks it: the one
table, cause -> response, and the decision are node/heal_policy.py's (the run's engine, shared with
the nodes); `classify` reads the controller's first failure (watch/failures.py) through it.
"""
from __future__ import annotations

from typing import Mapping, Optional

from clusterctl.node.heal_policy import RESPONSES, TABLE, Verdict, failure_of, response_of, verdict

__all__ = ("RESPONSES", "TABLE", "Verdict", "classify", "response_of")


def classify(first_failure: Optional[dict], overrides: Mapping[str, str] = ()) -> Verdict:
    """The engine's Verdict of a run's first failure (host, global rank, diagnosis)."""
    return verdict(failure_of(first_failure), overrides)
