"""What every verdict shares: statuses, the cause vocabulary, result building, sizes."""
from __future__ import annotations

from collections import Counter
from typing import Hashable, Mapping, Optional

from clusterctl.models import CheckResult, CheckStatus

PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL


CAUSES = ("nic_mismatch", "shm_too_small", "fabricmanager", "docker_no_gpu_runtime", "gpu_ordinal", "oom_killed",
          "duplicate_gpu", "port_in_use", "rdzv_unreachable", "config_divisibility", "driver_too_old",
          "hostname_unresolvable", "ib_config", "version_mismatch")
GIB = 1 << 30


def verdict(host: Optional[str], check: str, status: CheckStatus, detail: str, fix: str = "",
            cause: Optional[str] = None) -> CheckResult:
    return CheckResult(host=host, check=check, status=status, detail=f"{cause}: {detail}" if cause else detail, fix=fix)


def cause_of(result: CheckResult) -> Optional[str]:
    """The cause slug a failed or warned check names, if any."""
    head = result.detail.split(":", 1)[0]
    return head if head in CAUSES else None


def majority(values: Mapping[str, Hashable]) -> Hashable:
    """The most common value; on a tie the one seen first (the master's side)."""
    counts = Counter(values.values())
    order = list(dict.fromkeys(values.values()))
    return max(order, key=lambda value: (counts[value], -order.index(value)))


def human_size(n: Optional[int]) -> str:
    if n is None:
        return "?"
    for unit, scale in (("TiB", 1 << 40), ("GiB", GIB), ("MiB", 1 << 20)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}".replace(".0 ", " ")
    return f"{n} B"


def cannot_read(host: Optional[str], check: str, reason: str, fix: str = "") -> CheckResult:
    """A probe section whose output was not understood: warn and quote it, never pass.

    `reason` names the command and what it printed (the facts' `unreadable`)."""
    return CheckResult(host=host, check=check, status=WARN, detail=f"could not read this on {host}: {reason}",
                       fix=fix or f"run the command on {host} by hand; if its output looks normal, report it "
                                  "(clusterctl does not know this version or format)")
