"""Typed evidence from the system around a job: c10d/TCPStore/rendezvous messages, Docker/containerd/
registry errors, kernel lines (OOM killer, Xid, PCIe AER, segfault, IOMMU faults).

Part of the evidence layer: evidence.extract runs these parsers with the others; families.py weighs
what they support. Each is a bounded regex behind a cheap literal check.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from clusterctl.diagnose.logformat import LogLine
from clusterctl.diagnose.reader import MAX_LINE
from clusterctl.diagnose.textmatch import compile_kinds, first_kind, gated


@dataclass(frozen=True)
class StoreMessage:
    line: LogLine
    kind: str  # timeout | wait_timeout | collective_timeout | refused | unreachable | closed | bind | resolve


@dataclass(frozen=True)
class ContainerError:
    line: LogLine
    component: str  # docker | containerd | registry | nvidia-container | kubernetes
    kind: str  # pull | auth | start | gpu_runtime | requirement | disk | other


@dataclass(frozen=True)
class KernelLine:
    line: LogLine
    kind: str  # oom | xid | pcie | segfault | iommu_fault
    value: str = ""


_STORE = re.compile(r"TCPStore|c10d|\bstore\b|rendezvous|rdzv|MASTER_ADDR|init_process_group|DistStoreError"
                    r"|DistNetworkError", re.IGNORECASE)
_STORE_KINDS = (
    ("bind", r"address already in use|errno:? ?98|EADDRINUSE|failed to bind"),
    ("resolve", r"name or service not known|could not resolve|gaierror|temporary failure in name resolution"),
    ("refused", r"connection refused|ECONNREFUSED|errno:? ?111"),
    ("unreachable", r"no route to host|network is unreachable|ENETUNREACH|EHOSTUNREACH"),
    ("timeout", r"timed? ?out|timeout|deadline exceeded"),
    ("closed", r"closed|shut ?down|reset by peer|broken pipe"),
)
_STORE_KIND_RE = compile_kinds(_STORE_KINDS)

_CONTAINER = re.compile(r"Error response from daemon|docker:|containerd|\bctr:|failed to pull|pull access|manifest"
                        r"|registry|OCI runtime|nvidia-container|ImagePull|ErrImage|podman|crictl|kubelet", re.IGNORECASE)
_CONTAINER_KINDS = (
    ("requirement", r"requirement error|unsatisfied condition"),
    # the NVIDIA hook ran (the GPU runtime is there) and failed a step inside the new container
    ("start", r"nvidia-container-cli\S*: (?:container error|permission error)"),
    ("gpu_runtime", r"could not select device driver|nvidia-container|runtime name|unknown runtime|capabilities: \[\["),
    ("disk", r"no space left|disk quota"),
    ("auth", r"unauthorized|denied|authentication required|no basic auth|forbidden|\b401\b|\b403\b"),
    ("pull", r"pull|manifest|not found|name unknown|resolve reference|toomanyrequests|registry|i/o timeout|"
             r"tls: |x509|ImagePull|ErrImage"),
)
_CONTAINER_KIND_RE = compile_kinds(_CONTAINER_KINDS)

_KERNEL = (
    ("oom", re.compile(r"Out of memory: Kill|invoked oom-killer|oom[-_]kill(?::| events?\b)|oom_reaper"
                       r"|Memory cgroup out of memory",
                       re.IGNORECASE)),
    ("xid", re.compile(r"NVRM: Xid \([^)]{0,40}\): (\d+)")),
    ("pcie", re.compile(r"PCIe Bus Error|AER: (?:Uncorrected|Corrected|Multiple)", re.IGNORECASE)),
    ("segfault", re.compile(r"\w[\w.-]{0,40}\[\d+\]: segfault at [0-9a-f]+|traps: \S+\[\d+\] general protection")),
    ("iommu_fault", re.compile(r"DMAR: \[?DMA (?:Read|Write)|DMAR: DRHD: handling fault|IO_PAGE_FAULT|AMD-Vi: Event"
                               r"|iommu fault", re.IGNORECASE)),
)


_COLLECTIVE_WORDS = ("nccl", "hccl", "rccl", "ccl", "gloo", "collective", "allreduce", "all_reduce", "watchdog",
                     "notify", "heartbeat", "checktimeout")
_STORE_WORDS = ("store", "c10d", "rendezvous", "rdzv", "master_addr", "init_process_group")


@gated(*_COLLECTIVE_WORDS, *_STORE_WORDS)
def store_messages(line: LogLine, lowered: str) -> list[StoreMessage]:
    text = line.text[:MAX_LINE]
    if any(w in lowered for w in _COLLECTIVE_WORDS) and _TIMEOUT.search(text) and _COLLECTIVE.search(text):
        # a collective library (NCCL, HCCL, RCCL, gloo...) waited too long on a peer: a slow or dead rank
        return [StoreMessage(line, "collective_timeout")]
    if not any(w in lowered for w in _STORE_WORDS):
        return []
    if not _STORE.search(text):
        return []
    kind = first_kind(_STORE_KIND_RE, text)
    if kind == "timeout" and _WAITING.search(text):  # connected, then waited: the peer is slow, not unreachable
        kind = "wait_timeout"
    return [StoreMessage(line, kind)] if kind else []


_COLLECTIVE = re.compile(r"ProcessGroupNCCL|WorkNCCL|Watchdog|checkTimeout|collective|\b[HRN]CCL\b|HCCL_\w+|oneCCL"
                         r"|\bgloo\b|AllReduce|all_reduce|AllGather|Notify|[Hh]eartbeat", re.IGNORECASE)
_TIMEOUT = re.compile(r"timed? ?out|timeout|time out|heartbeat lost", re.IGNORECASE)
_WAITING = re.compile(r"waitForInput|recvValue|poll for socket|wait(?:ing)? for (?:clients|workers|the other|key)",
                      re.IGNORECASE)


@gated("daemon", "docker", "containerd", "pull", "manifest", "registry", "oci runtime", "nvidia-container", "errimage",
       "podman", "ctr:", "crictl", "kubelet")
def container_errors(line: LogLine, lowered: str) -> list[ContainerError]:
    text = line.text[:MAX_LINE]
    if not _CONTAINER.search(text):
        return []
    component = ("nvidia-container" if "nvidia-container" in lowered else "containerd" if "containerd" in lowered
                 else "kubernetes" if ("imagepull" in lowered or "errimage" in lowered or "kubelet" in lowered)
                 else "registry" if "registry" in lowered else "docker")
    kind = first_kind(_CONTAINER_KIND_RE, text, "other")
    return [ContainerError(line, component, kind)]


_POSSIBLE = re.compile(r"potential root causes|possible (?:root )?causes?|may have been|might have been|possibly",
                       re.IGNORECASE)


@gated("oom", "memory", "xid", "segfault", "general protection", "dmar", "iommu", "amd-vi", "io_page_fault", "pcie",
       "aer:")
def kernel_lines(line: LogLine, lowered: str) -> list[KernelLine]:
    text = line.text[:MAX_LINE]
    out = []
    if _POSSIBLE.search(text):  # a notice listing what might have happened is not a record of it
        return out
    for kind, regex in _KERNEL:
        match = regex.search(text)
        if match:
            out.append(KernelLine(line, kind, match.group(1) if match.groups() else ""))
    return out
