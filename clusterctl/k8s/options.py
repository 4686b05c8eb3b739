"""What `clusterctl export` takes beyond the inventory, parsed and checked. Pure.

The inventory describes bare-metal hosts; a Kubernetes pod also needs requests,
limits, placement and storage, which the inventory has no keys for. They come from
the command line (`--cpu 8:16 --memory 128Gi --node-selector gpu=on ...`) and are
checked here, before any manifest is written.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from clusterctl.errors import UsageError

# Kubernetes resource.Quantity: a decimal number, then a binary or decimal SI suffix or an exponent.
_QUANTITY_RE = re.compile(r"^(?P<num>\d+(?:\.\d*)?|\.\d+)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_SCALE = {"": 1, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
          "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_LABEL_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# Beyond these a request fits almost no GPU node; the seeds' pods sat Pending at 256Gi.
TYPICAL_MAX_MEMORY = 2 ** 40  # 1 TiB
TYPICAL_MAX_CPU = 256


@dataclass(frozen=True)
class Toleration:
    key: str
    value: Optional[str] = None
    effect: Optional[str] = None

    def to_manifest(self) -> dict:
        entry = {"key": self.key, "operator": "Equal" if self.value is not None else "Exists"}
        if self.value is not None:
            entry["value"] = self.value
        if self.effect:
            entry["effect"] = self.effect
        return entry


@dataclass(frozen=True)
class PvcMount:
    claim: str
    mount: str
    read_only: bool = False


@dataclass(frozen=True)
class RequestLimit:
    request: str
    limit: str


@dataclass(frozen=True)
class ExportOptions:
    name: Optional[str] = None  # default: the inventory's name
    namespace: Optional[str] = None
    nodes: Optional[int] = None  # pods; default: the inventory's hosts
    gpus_per_pod: Optional[int] = None  # default: from container.gpus or nproc_per_node
    image: Optional[str] = None  # default: container.image
    cpu: Optional[RequestLimit] = None
    memory: Optional[RequestLimit] = None
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    host_network: bool = False
    pvcs: tuple[PvcMount, ...] = ()
    strict: bool = False
    join_timeout: Optional[int] = None  # seconds the rendezvous waits for every pod
    queue: Optional[str] = None  # Kueue LocalQueue (label kueue.x-k8s.io/queue-name)
    with_runtime: bool = False  # a TrainJob: emit its own ClusterTrainingRuntime (k8s/trainjob.py)


# --------------------------------------------------------------------------- parsing


def quantity_value(text: str, where: str) -> float:
    match = _QUANTITY_RE.match(text.strip())
    if not match:
        raise UsageError(f"{text!r} is not a Kubernetes quantity", where,
                         "write e.g. 8, 500m (CPU) or 128Gi, 512Mi (memory)")
    suffix = match.group("suffix") or ""
    scale = 10 ** int(suffix[1:]) if suffix[:1] in ("e", "E") and len(suffix) > 1 else _SCALE[suffix]
    return float(match.group("num")) * scale


def parse_request_limit(text: str, where: str) -> RequestLimit:
    """"8:16" -> request 8, limit 16; "128Gi" -> both 128Gi."""
    request, _, limit = text.partition(":")
    request, limit = request.strip(), (limit.strip() or request.strip())
    if quantity_value(request, where) > quantity_value(limit, where):
        raise UsageError(f"the request {request} is larger than the limit {limit}", where,
                         f"write REQUEST:LIMIT with REQUEST <= LIMIT, e.g. {limit}:{request}")
    return RequestLimit(request, limit)


def parse_node_selector(items: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        for part in filter(None, (p.strip() for p in item.split(","))):
            key, eq, value = part.partition("=")
            if not eq or not _LABEL_KEY_RE.match(key) or not _LABEL_VALUE_RE.match(value) or len(value) > 63:
                raise UsageError(f"--node-selector {part!r} is not LABEL=VALUE", "--node-selector",
                                 'write e.g. --node-selector gpu=on (a node label and its value)')
            pairs.append((key, value))
    return tuple(pairs)


def parse_toleration(text: str) -> Toleration:
    """key=value:Effect, key:Effect (any value), key=value (every effect), key."""
    head, colon, effect = text.rpartition(":") if ":" in text else (text, "", "")
    key, eq, value = head.partition("=")
    fix = "write KEY=VALUE:EFFECT (Equal) or KEY:EFFECT (Exists), EFFECT one of " + ", ".join(EFFECTS)
    if colon and effect not in EFFECTS:
        raise UsageError(f"--toleration {text!r}: effect {effect!r} is not one of {', '.join(EFFECTS)}", "--toleration", fix)
    if not _LABEL_KEY_RE.match(key) or (eq and not _LABEL_VALUE_RE.match(value)):
        raise UsageError(f"--toleration {text!r} is not a taint key[=value][:effect]", "--toleration", fix)
    return Toleration(key, value if eq else None, effect or None)


def parse_pvc(text: str) -> PvcMount:
    parts = text.split(":")
    fix = "write CLAIM:/mount/path or CLAIM:/mount/path:ro, e.g. --pvc wan-models:/Wan2.2-T2V-A14B:ro"
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise UsageError(f"--pvc {text!r} is not CLAIM:/path[:ro]", "--pvc", fix)
    claim, mount = parts[0], parts[1]
    if not _DNS_SUBDOMAIN_RE.match(claim) or not mount.startswith("/") or mount.rstrip("/") == "":
        raise UsageError(f"--pvc {text!r}: a claim name (lowercase DNS name) and an absolute mount path are needed",
                         "--pvc", fix)
    return PvcMount(claim, mount.rstrip("/"), len(parts) == 3 and parts[2] == "ro")


def job_name(text: str, where: str, max_len: int) -> str:
    """A name every generated object can carry (pod hostnames add -master-0 and the like)."""
    if not _DNS_LABEL_RE.match(text) or len(text) > max_len:
        raise UsageError(f"{text!r} is not usable as a Kubernetes job name", where,
                         f"use at most {max_len} lowercase letters, digits and -, starting and ending alphanumeric")
    return text


def default_name(inventory_name: str, max_len: int) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", inventory_name.lower()).strip("-")[:max_len].strip("-")
    return name or "clusterctl-job"


def queue(text: Optional[str]) -> Optional[str]:
    if text is not None and (not text or len(text) > 63 or not _LABEL_VALUE_RE.match(text)):
        raise UsageError(f"{text!r} is not a Kueue queue name", "--queue",
                         "give the LocalQueue's name in the job's namespace, e.g. --queue team-a")
    return text


def namespace(text: Optional[str]) -> Optional[str]:
    if text is not None and (not _DNS_LABEL_RE.match(text) or len(text) > 63):
        raise UsageError(f"{text!r} is not a namespace name", "--namespace", "use a lowercase DNS label, e.g. hu")
    return text


# --------------------------------------------------------------------------- warnings


def resource_warnings(opts: ExportOptions, shm_bytes: Optional[int]) -> list[str]:
    """Requests that will leave pods Pending or get them killed, said before `kubectl apply`."""
    warnings = []
    if opts.memory is not None:
        request = quantity_value(opts.memory.request, "--memory")
        if request > TYPICAL_MAX_MEMORY:
            warnings.append(f"--memory requests {opts.memory.request} per pod, more than typical GPU nodes have "
                            "(> 1Ti): pods stay Pending with 'Insufficient memory'")
        limit = quantity_value(opts.memory.limit, "--memory")
        if shm_bytes and shm_bytes >= limit:
            warnings.append(f"/dev/shm ({shm_bytes // 2 ** 20}Mi, memory-backed) is not below the memory limit "
                            f"{opts.memory.limit}: what the ranks put there counts against it (OOMKilled)")
    if opts.cpu is not None and quantity_value(opts.cpu.request, "--cpu") > TYPICAL_MAX_CPU:
        warnings.append(f"--cpu requests {opts.cpu.request} per pod, more than typical nodes have (> "
                        f"{TYPICAL_MAX_CPU} cores): pods stay Pending with 'Insufficient cpu'")
    if opts.memory is None or opts.cpu is None:
        missing = " and ".join(n for n, v in (("--memory", opts.memory), ("--cpu", opts.cpu)) if v is None)
        warnings.append(f"no {missing}: the pods get no {'/'.join(m[2:] for m in missing.split(' and '))} request, "
                        "so the scheduler may pack them onto a busy node and they are evicted first")
    return warnings


def options_from_args(args) -> ExportOptions:
    """`clusterctl export`'s options (its argparse namespace) as the builders take them, each checked."""
    if args.gpus_per_pod is not None and args.gpus_per_pod < 0:
        raise UsageError(f"--gpus-per-pod {args.gpus_per_pod} is negative", "--gpus-per-pod", "give 0 (CPU) or more")
    if args.join_timeout < 1:
        raise UsageError(f"--join-timeout {args.join_timeout} must be at least 1", "--join-timeout", "e.g. 900")
    return ExportOptions(
        name=args.name, namespace=namespace(args.namespace), nodes=args.nodes, gpus_per_pod=args.gpus_per_pod,
        image=args.image,
        cpu=parse_request_limit(args.cpu, "--cpu") if args.cpu else None,
        memory=parse_request_limit(args.memory, "--memory") if args.memory else None,
        node_selector=parse_node_selector(args.node_selector),
        tolerations=tuple(parse_toleration(t) for t in args.toleration),
        host_network=args.host_network, pvcs=tuple(parse_pvc(p) for p in args.pvc), strict=args.strict,
        join_timeout=args.join_timeout, queue=queue(getattr(args, "queue", None)),
        with_runtime=bool(getattr(args, "with_runtime", False)))
