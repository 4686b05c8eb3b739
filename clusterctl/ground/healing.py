"""What a run that heals itself does with a failure (issue 35), as the controller asks it: the one
table, cause -> response, and the decision are node/heal_policy.py's (the run's engine, shared with
the nodes); `classify` reads the controller's first failure (watch/failures.py) through it.
"""
from __future__ import annotations

from typing import Mapping, Optional

from clusterctl.node.heal_policy import RESPONSES, TABLE, Verdict, failure_of, response_of, verdict

__all__ = ("RESPONSES", "TABLE", "Verdict", "classify", "latest_checkpoint_command", "response_of")


def classify(first_failure: Optional[dict], overrides: Mapping[str, str] = ()) -> Verdict:
    """The engine's Verdict of a run's first failure (host, global rank, diagnosis)."""
    return verdict(failure_of(first_failure), overrides)


def latest_checkpoint_command(directory: str, complete: str) -> tuple[str, ...]:
    """argv (run on a node) printing the newest checkpoint under `directory` that is complete: a
    subdirectory holding a file that matches `complete` (a name or a glob). Newest by name in natural
    order (step-9 before step-10); a checkpoint without its marker is never printed, nor one that is a
    link, not ours, or has a name with other characters than heal_policy.CHECKPOINT_NAME's (the name
    reaches an env file): node/heal_policy.complete_steps' rules, for the controller's side."""
    script = ('cd "$1" 2>/dev/null || exit 0; for d in */; do d=${d%/}; case $d in [!A-Za-z0-9]*|*[!A-Za-z0-9._+-]*) '
              'continue;; esac; [ -L "$d" ] || [ ! -O "$d" ] && continue; for m in "$d"/$2; do '
              '[ -f "$m" ] && [ ! -L "$m" ] && { echo "$d"; break; }; done; done | sort -V | tail -n 1')
    return ("sh", "-c", script, "clusterctl-checkpoint", directory, complete)
