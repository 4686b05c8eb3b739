"""What a run that heals itself does with a failure (issue 35): one table, cause -> response.

- `node`: the failure is the node's (its GPU, its network, its disk, its kernel killed a rank):
  that host is left out of the run and a spare takes its place (or the job is planned again on
  fewer nodes, down to `job.min_nodes`).
- `job`: the failure is the job's own (an import error, the model's CUDA OOM, bad arguments, a
  Python exception): any node would fail alike, so the run ends at once, as without `restarts`.
- `transient`: nobody is to blame (the rendezvous or a collective timed out with no node named):
  relaunched on the same nodes.

A cause not in the table is a job fault (fail fast: nothing is retried that nobody understood).
The inventory's `job.heal: {CAUSE: node | job | transient}` overrides a row. Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

RESPONSES = ("node", "job", "transient")

TABLE: dict[str, str] = {
    # the node's own fault: leave it out
    "node_unreachable": "node", "gpu_xid": "node", "ecc_error": "node", "fabricmanager": "node",
    "ib_config": "node", "nic_mismatch": "node", "disk_full": "node", "oom_killed": "node",
    "killed_by_signal": "node", "container_lost_gpu": "node", "docker_no_gpu_runtime": "node",
    "driver_too_old": "node", "shm_too_small": "node",
    # nobody to blame: relaunch on the same nodes
    "rdzv_unreachable": "transient", "nccl_timeout_slow_rank": "transient", "rank_hang": "transient",
    "nccl_socket_error": "transient", "port_in_use": "transient",
    # the job's own fault: every node would fail alike
    "import_error": "job", "cuda_oom": "job", "launcher_args": "job", "launcher_missing": "job",
    "config_divisibility": "job",
    "gpu_ordinal": "job", "duplicate_gpu": "job", "version_mismatch": "job", "library_too_old": "job",
    "nccl_too_old": "job", "permission_denied": "job", "segfault": "job", "unknown": "job",
    "platform_backend_unsupported": "job", "hostname_unresolvable": "job", "image_pull_failed": "job",
    "insufficient_resources": "job", "shm_permission": "job",
    "sighup_session_closed": "job",
}


@dataclass(frozen=True)
class Verdict:
    """What to do with one attempt's first failure: `response` (node | job | transient), the cause it
    was read from, and the host a node fault blames."""

    response: str
    cause: str
    host: Optional[str]

    def says(self) -> str:
        where = f" on {self.host}" if self.host else ""
        return {"node": f"{self.host} lost ({self.cause})",
                "transient": f"{self.cause}{where}, no node to blame",
                "job": f"{self.cause}{where} is the job's own fault: not retried"}[self.response]


def response_of(cause: str, overrides: Mapping[str, str] = ()) -> str:
    """The table's row for `cause`, or the inventory's override of it."""
    return dict(overrides).get(cause) or TABLE.get(cause, "job")


def classify(first_failure: Optional[dict], overrides: Mapping[str, str] = ()) -> Verdict:
    """The response to a run's first failure (watch/failures.py: host, global rank, diagnosis). A node
    fault with no host named is relaunched on the same nodes: nothing can be left out."""
    if not first_failure:
        return Verdict("job", "unknown", None)
    diagnosis = first_failure.get("diagnosis") or [{}]
    cause = diagnosis[0].get("cause") or "unknown"
    host = first_failure.get("host") or diagnosis[0].get("host")
    response = response_of(cause, overrides)
    if response == "node" and not host:
        response = "transient"
    return Verdict(response, cause, host)


def latest_checkpoint_command(directory: str, complete: str) -> tuple[str, ...]:
    """argv (run on a node) printing the newest checkpoint under `directory` that is complete: a
    subdirectory holding a file that matches `complete` (a name or a glob). Newest by name in natural
    order (step-9 before step-10); a checkpoint without its marker is never printed."""
    script = ('cd "$1" 2>/dev/null || exit 0; for d in */; do d=${d%/}; for m in "$d"/$2; do '
              '[ -e "$m" ] && { echo "$d"; break; }; done; done | sort -V | tail -n 1')
    return ("sh", "-c", script, "clusterctl-checkpoint", directory, complete)
