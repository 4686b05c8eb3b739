"""Verdicts on a node's resources: /dev/shm, disk and memory."""
from __future__ import annotations

from typing import Optional

from clusterctl.models import CheckResult, CheckSettings, ContainerSpec
from clusterctl.preflight.facts.disk import DiskUsage
from clusterctl.preflight.facts.host import MemInfo
from clusterctl.preflight.verdicts.common import FAIL, GIB, PASS, WARN, cannot_read, human_size, verdict


def check_shm(host: str, shm: Optional[DiskUsage], settings: CheckSettings,
              container: Optional[ContainerSpec] = None, unreadable: Optional[str] = None) -> CheckResult:
    """/dev/shm as the ranks see it (`df -B1 /dev/shm` inside the container)."""
    if container is not None and container.ipc == "host":
        return verdict(host, "shm", PASS, "container.ipc is host: ranks share the host's /dev/shm")
    if shm is None:
        return cannot_read(host, "shm", f"the size of /dev/shm: {unreadable or 'df printed no data row'}",
                           "set container.shm_size: 16g or container.ipc: host to be sure")
    if shm.size_bytes < settings.shm_min_bytes:
        fix = ("set container.shm_size: 16g or container.ipc: host" if container is not None and container.runtime == "docker"
               else f"grow /dev/shm on {host} (`mount -o remount,size=16g /dev/shm`)")
        return verdict(host, "shm", FAIL, f"/dev/shm on {host} is {human_size(shm.size_bytes)}, below "
                       f"{human_size(settings.shm_min_bytes)}: NCCL and DataLoader workers run out of shared memory",
                       fix, "shm_too_small")
    return verdict(host, "shm", PASS, f"/dev/shm is {human_size(shm.size_bytes)} ({human_size(shm.avail_bytes)} free)")


def check_disk(host: str, usage: Optional[DiskUsage], settings: CheckSettings, path: str,
               unreadable: Optional[str] = None) -> CheckResult:
    """Free space where outputs and rank logs go (job.outputs), or at its nearest existing parent
    when it does not exist yet: the filesystem it will be created on."""
    if usage is None:
        return cannot_read(host, "disk", f"free space at {path}: {unreadable or 'df printed no data row'}",
                           f"check that job.outputs ({path}) or a parent of it exists on {host} and `df -P {path}` works")
    where = path
    if usage.read_at and usage.read_at.rstrip("/") != path.rstrip("/"):
        where = f"{usage.read_at} (job.outputs {path} does not exist yet on {host}; it will be created there)"
    if usage.avail_bytes < settings.disk_min_bytes:
        return verdict(host, "disk", FAIL, f"only {human_size(usage.avail_bytes)} free at {where} ({usage.mount} on "
                       f"{usage.filesystem}), below {human_size(settings.disk_min_bytes)}",
                       f"free space on {usage.mount} of {host}, or point job.outputs at a filesystem with room")
    return verdict(host, "disk", PASS, f"{human_size(usage.avail_bytes)} free at {where} ({usage.mount})")


def check_memory(host: str, mem: Optional[MemInfo], min_available_bytes: int = 4 * GIB,
                 unreadable: Optional[str] = None) -> CheckResult:
    if mem is None:
        return cannot_read(host, "memory", f"/proc/meminfo: {unreadable or 'no MemTotal line'}")
    low = mem.available_bytes < min_available_bytes or mem.available_bytes < mem.total_bytes // 10
    detail = f"{human_size(mem.available_bytes)} of {human_size(mem.total_bytes)} RAM available on {host}"
    if low:
        return verdict(host, "memory", WARN, f"{detail}: ranks may be OOM-killed while loading weights",
                       f"stop what holds memory on {host}, or run fewer ranks there (job.nproc_per_node)", "oom_killed")
    return verdict(host, "memory", PASS, detail)
