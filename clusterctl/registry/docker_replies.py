"""What a node's Docker engine (and its shell) answers, read without trusting its shape.

Engines from Docker 1.12 to 29, registry proxies and anyone with `docker container update`
stand between clusterctl and these replies: each reader returns a value for any input and
never raises (tests/unit/test_remote_text_properties.py feeds them arbitrary data).
"""
from __future__ import annotations

import json
from typing import Any, Optional


LABEL_CONFIG = "clusterctl.config"  # the wanted config, as JSON, on the container clusterctl made


def memlock_limit(ulimit_output: str) -> int:
    """`ulimit -H -l` on the node -> the memlock to ask for: -1 (unlimited) or the node's hard cap in bytes."""
    text = ulimit_output.strip()
    # isascii: str.isdigit() is true for '²', which int() refuses. Limits too large for Docker's
    # int64 in bytes (over 15 digits of KiB) are as good as unlimited.
    return int(text) * 1024 if text.isascii() and text.isdigit() and len(text) <= 15 else -1


def stored_config(labels: Any) -> dict:
    """The wanted config a container was created with, from its label; {} when the label is
    missing or is not what clusterctl wrote (anyone may `docker container update` labels)."""
    try:
        config = json.loads((labels or {}).get(LABEL_CONFIG, "{}"))
    except (ValueError, TypeError, AttributeError, RecursionError):
        return {}
    return config if isinstance(config, dict) else {}


def pull_failure(ref: str, message: str, context=None) -> str:
    """A failed pull, named by its cause (registry, tag, credentials, TLS, ...) with the fix
    (clusterctl.registry.pull_errors); `context` says whose credentials were sent."""
    from clusterctl.registry.pull_errors import PullContext, diagnose_pull, failure_line

    return failure_line(ref, diagnose_pull(ref, message, context or PullContext(host="this node")))


def api_message(exc) -> str:
    """What the engine said in a docker.errors.APIError (its explanation), else the error itself."""
    return str(getattr(exc, "explanation", None) or exc).strip()


def pull_status(status: Any, layers: dict) -> Optional[str]:
    """One message of the engine's pull stream: its error text, or None after noting the
    layer's progress in `layers` (id -> (bytes done, bytes total)). Engines and registry
    proxies vary: whatever is not a number where a number belongs is left out."""
    if not isinstance(status, dict):
        return None
    if "error" in status:
        return str(status["error"])
    detail = status.get("progressDetail")
    layer = status.get("id")
    if isinstance(detail, dict) and isinstance(layer, str) and layer:
        current, total = detail.get("current", 0), detail.get("total")
        if _count(total) and total > 0 and _count(current):
            layers[layer] = (current, total)
    return None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
