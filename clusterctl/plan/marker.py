"""The marker every agent and rank clusterctl starts carries in its environment (inherited by every
child): `CLUSTERCTL_CLUSTER`, `CLUSTERCTL_HOST` and `CLUSTERCTL_RUN_ID`. Part of what starts on a node;
cleanup (modules/process.py) matches those exact lines of /proc/PID/environ, never a command-line pattern."""
from __future__ import annotations

MARKER_CLUSTER = "CLUSTERCTL_CLUSTER"
MARKER_HOST = "CLUSTERCTL_HOST"
MARKER_RUN = "CLUSTERCTL_RUN_ID"


def marker_env(cluster: str, host: str, run_id: str) -> tuple[tuple[str, str], ...]:
    return ((MARKER_CLUSTER, cluster), (MARKER_HOST, host), (MARKER_RUN, run_id))
