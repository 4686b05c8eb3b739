"""Verdicts that compare nodes: software versions, clocks, and the topology the planner built."""
from __future__ import annotations

from statistics import median
from typing import Any, Callable, Mapping, Optional, Union

from clusterctl.errors import ClusterctlError
from clusterctl.models import CheckResult, CheckSettings, ContainerSpec
from clusterctl.preflight.facts.host import Versions
from clusterctl.preflight.verdicts.common import FAIL, PASS, WARN, majority, verdict


def check_versions(versions: Mapping[str, Versions], container: Optional[ContainerSpec] = None) -> list[CheckResult]:
    """python / torch / CUDA / NCCL must be identical on every node."""
    working = {h: v for h, v in versions.items() if v.torch}
    common = majority({h: v.key for h, v in working.items()}) if working else None
    reference = next((v for v in working.values() if v.key == common), None)
    agreeing = [h for h, v in working.items() if v.key == common]
    in_image = container is not None and container.runtime == "docker"
    results = []
    for host, version in versions.items():
        if not version.torch:
            fix = (f"use a container.image that has torch (python {version.python or '?'} there has none)" if in_image
                   else f"install torch on {host} (job.python: {version.python or 'python3'} cannot import it)")
            results.append(verdict(host, "versions", FAIL, f"torch unusable on {host}: {version.error}", fix))
        elif version.key == common:
            results.append(verdict(host, "versions", PASS, version.describe()))
        else:
            fix = ("set container.pull: always: the image tag resolves to different builds on different nodes"
                   if in_image else f"install the same versions on {host} as on {agreeing[0]}")
            results.append(verdict(host, "versions", FAIL, f"{host} has {version.describe()} but "
                                   f"{', '.join(agreeing)} have {reference.describe()}", fix, "version_mismatch"))
    return results


def check_clock_skew(offsets: Mapping[str, float], settings: CheckSettings) -> list[CheckResult]:
    """Clock offsets (seconds, each node minus the controller) compared with the nodes' median."""
    middle = median(offsets.values()) if offsets else 0.0
    results = []
    for host, offset in offsets.items():
        skew = offset - middle
        if abs(skew) > settings.clock_skew_warn_s:
            side = "ahead of" if skew > 0 else "behind"
            results.append(verdict(host, "clock_skew", WARN, f"{host}'s clock is {abs(skew):.2f} s {side} the other "
                                   f"nodes (limit checks.clock_skew_warn_s: {settings.clock_skew_warn_s} s): log "
                                   "timestamps will not line up", f"enable NTP on {host} (`timedatectl set-ntp true` "
                                   "or chrony)"))
        else:
            results.append(verdict(host, "clock_skew", PASS, f"clock within {abs(skew):.3f} s of the other nodes"))
    return results


def check_topology(build: Union[Callable[[], Any], str, BaseException]) -> CheckResult:
    """Wraps the topology planner: a callable that builds it (raising TopologyError), or its message."""
    if callable(build):
        try:
            topology = build()
        except ClusterctlError as exc:
            return verdict(None, "topology", FAIL, exc.what, exc.fix or "", "config_divisibility"
                           if "divid" in exc.what else None)
        summary = ", ".join(f"{key} {getattr(topology, key)}" for key in ("world_size", "nproc_per_node", "nnodes")
                            if hasattr(topology, key))
        return verdict(None, "topology", PASS, summary or "the job lays out on the hosts")
    if isinstance(build, ClusterctlError):
        return verdict(None, "topology", FAIL, build.what, build.fix or "")
    return verdict(None, "topology", FAIL, str(build), "")
