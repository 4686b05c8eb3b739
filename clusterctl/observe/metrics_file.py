"""Reading the nodes' `metrics.jsonl` (issue 41) as a collected bundle holds it: one JSON object per
line per sample, written by the node-side sampler (the contract: `t`, `host`, `cpu_pct`,
`mem_used_mb`, `mem_total_mb`, `net_rx_bytes`, `net_tx_bytes`, `gpus`: [{`index`, `util_pct`,
`mem_used_mb`, `mem_total_mb`, `power_w`, `temp_c`, `throttle`, `ecc_volatile_uncorrected`, ...}]).
Tolerant: a missing key is None, a line that is not a JSON object (a write cut short) is skipped and
counted, an absent file is no samples. The one reader of the file: the report (node_metrics) and
run.json's summary (observe/summary.py, via read_file) both read through it. Pure but for reading."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from clusterctl.node import layout

FILE_NAME = layout.METRICS
MAX_LINES = 500_000  # a week at one sample a second per node is 600k: keep the report's reading bounded


@dataclass(frozen=True)
class GpuSample:
    index: int
    util_pct: Optional[float] = None
    mem_used_mb: Optional[float] = None
    mem_total_mb: Optional[float] = None
    power_w: Optional[float] = None
    temp_c: Optional[float] = None
    ecc_volatile_uncorrected: Optional[float] = None
    throttle: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sample:
    t: float
    host: str
    cpu_pct: Optional[float] = None
    mem_used_mb: Optional[float] = None
    mem_total_mb: Optional[float] = None
    gpus: tuple[GpuSample, ...] = ()

    @property
    def mem_pct(self) -> Optional[float]:
        if self.mem_used_mb is None or not self.mem_total_mb:
            return None
        return 100.0 * self.mem_used_mb / self.mem_total_mb


@dataclass(frozen=True)
class NodeMetrics:
    host: str
    samples: tuple[Sample, ...]
    skipped_lines: int = 0
    source: str = ""  # the file, relative to the bundle

    def gpu_indices(self) -> list[int]:
        return sorted({g.index for s in self.samples for g in s.gpus})


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def _gpu(item: Any, position: int) -> Optional[GpuSample]:
    if not isinstance(item, dict):
        return None
    index = item.get("index")
    throttle = item.get("throttle") if isinstance(item.get("throttle"), list) else []
    return GpuSample(index=index if isinstance(index, int) and not isinstance(index, bool) else position,
                     throttle=tuple(str(reason) for reason in throttle),
                     **{key: _number(item.get(key)) for key in ("util_pct", "mem_used_mb", "mem_total_mb",
                                                                  "power_w", "temp_c", "ecc_volatile_uncorrected")})


def parse_sample(line: str, host: str) -> Optional[Sample]:
    """One line -> a Sample; None for a line that is not a sample (no time)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or _number(data.get("t")) is None:
        return None
    gpus = data.get("gpus") if isinstance(data.get("gpus"), list) else []
    return Sample(t=float(data["t"]), host=str(data.get("host") or host), cpu_pct=_number(data.get("cpu_pct")),
                  mem_used_mb=_number(data.get("mem_used_mb")), mem_total_mb=_number(data.get("mem_total_mb")),
                  gpus=tuple(g for g in (_gpu(item, i) for i, item in enumerate(gpus)) if g is not None))


def read_samples(lines: Iterable[str], host: str) -> tuple[list[Sample], int]:
    samples, skipped = [], 0
    for count, line in enumerate(lines):
        if count >= MAX_LINES:
            break
        if not line.strip():
            continue
        sample = parse_sample(line, host)
        if sample is None:
            skipped += 1
        else:
            samples.append(sample)
    samples.sort(key=lambda s: s.t)
    return samples, skipped


def read_file(path: Path, host: str) -> tuple[list[Sample], int]:
    """A metrics.jsonl's samples (oldest first) and its skipped lines; an unreadable file has none."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return read_samples(handle, host)
    except OSError:
        return [], 0


def metrics_files(bundle: Path, host: str, run_id: str) -> list[Path]:
    """Every metrics.jsonl of `host` in a collected bundle: beside its logs, in its run dir (and those
    of earlier attempts, set aside as `<host>.attempt-N`: collect/gather.py's layout). The host name comes
    from the bundle's run.json, which a crafted bundle chooses: a name that is no plain file name (`../x`)
    finds nothing, and only regular files inside the bundle (no link) are read."""
    if not host or host in (".", "..") or "/" in host or "\0" in host:
        return []
    found = sorted((bundle / host).rglob(FILE_NAME)) if (bundle / host).is_dir() else []
    shared = bundle / layout.bundle_shared_run_logs(run_id)
    if shared.is_dir():
        found += sorted(p for p in shared.glob(f"{host}*/{FILE_NAME}")
                        if p.parent.name == host or p.parent.name.startswith(f"{host}.attempt-"))
    return [p for p in found if _inside(p, bundle)]


def _inside(path: Path, bundle: Path) -> bool:
    try:
        path.resolve().relative_to(bundle.resolve())
    except (OSError, ValueError):
        return False
    return not path.is_symlink() and path.is_file()


def node_metrics(bundle: Optional[Path], hosts: Iterable[str], run_id: str) -> list[NodeMetrics]:
    """Every host's samples that the bundle holds (hosts without a file are left out)."""
    found = []
    for host in hosts:
        paths = metrics_files(bundle, host, run_id) if bundle is not None else []
        samples, skipped = {}, 0
        for path in paths:
            read, bad = read_file(path, host)
            samples.update({(s.t, s.host): s for s in read})  # a file linked beside the logs counts once
            skipped += bad
        if paths:
            found.append(NodeMetrics(host, tuple(sorted(samples.values(), key=lambda s: s.t)), skipped,
                                     ", ".join(str(p.relative_to(bundle)) for p in paths)))
    return found
