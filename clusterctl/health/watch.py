"""What the passive watch reads on a node every 30 s, parsed into events. Pure functions: text
in, values out; unreadable text is a value (`unreadable`), never an exception.

- `nvidia-smi --query-gpu=<WATCH_QUERY> --format=csv,nounits` (with its header, so a driver that
  renames a column, e.g. 580's clocks_event_reasons for clocks_throttle_reasons, still parses)
- Xid lines from `dmesg` / `journalctl -k`: `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has
  fallen off the bus.`, and the driver's Xid-less "has fallen off the bus" notice
- `dcgmi health -c` (its table, or `-j` JSON) where DCGM is installed
Events compare a sample with the previous one, so a count that stays up is said once.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from clusterctl.health.events import Event, GpuId
from clusterctl.node import node_health, node_metrics

# the columns are asked for in one place, the node library, which the detached keeper also runs
WATCH_QUERY = node_health.QUERY
_ALIASES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}
# clocks_throttle_reasons bits that mean the hardware is slowing down to protect itself (NVML), named once
PROTECTIVE = node_metrics.PROTECTIVE_MASK
TEMPERATURE_LIMIT_C = 90.0
# Xids that mean the GPU or its memory/links are broken (NVIDIA's Xid catalog: reset or RMA)
FATAL_XIDS = frozenset({48, 62, 64, 74, 79, 94, 95, 119, 120, 140})
# Xids an application causes (illegal address, bad instruction, its own cleanup): not the node's fault
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68})


# ------------------------------------------------------------------ nvidia-smi


@dataclass(frozen=True)
class GpuSample:
    gpu: GpuId
    bus_id: Optional[str] = None  # normalized: 0000:3b:00
    ecc_volatile: Optional[int] = None
    ecc_aggregate: Optional[int] = None
    retired_pending: Optional[bool] = None
    remap_pending: Optional[bool] = None
    remap_failure: Optional[bool] = None
    remap_uncorrectable: Optional[int] = None
    throttle: Optional[int] = None
    temperature: Optional[float] = None


@dataclass(frozen=True)
class SmiReading:
    gpus: tuple[GpuSample, ...] = ()
    unreadable: Optional[str] = None


def parse_smi_csv(text: str) -> SmiReading:
    lines = [line for line in str(text).splitlines() if line.strip()]
    if not lines:
        return SmiReading(unreadable="nvidia-smi printed nothing")
    header = [_column(cell) for cell in lines[0].split(",")]
    if "index" in header or "uuid" in header:
        lines = lines[1:]
    else:
        header = list(WATCH_QUERY)
    samples = []
    for line in lines:
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(header):
            return SmiReading(tuple(samples), unreadable=f"a line of {len(cells)} columns, not {len(header)}: "
                                                         f"{line[:120]!r}")
        samples.append(_sample(dict(zip(header, cells))))
    return SmiReading(tuple(samples))


def _column(cell: str) -> str:
    name = re.sub(r"\s*\[[^\]]*\]\s*$", "", cell.strip()).lower()
    return _ALIASES.get(name, name)


def _sample(row: Mapping[str, str]) -> GpuSample:
    gpu = GpuId(index=_int(row.get("index")), uuid=_text(row.get("uuid")), serial=_text(row.get("serial")))
    return GpuSample(
        gpu=gpu, bus_id=normalize_bus_id(row.get("pci.bus_id") or ""),
        ecc_volatile=_int(row.get("ecc.errors.uncorrected.volatile.total")),
        ecc_aggregate=_int(row.get("ecc.errors.uncorrected.aggregate.total")),
        retired_pending=_bool(row.get("retired_pages.pending")), remap_pending=_bool(row.get("remapped_rows.pending")),
        remap_failure=_bool(row.get("remapped_rows.failure")),
        remap_uncorrectable=_int(row.get("remapped_rows.uncorrectable")),
        throttle=_int(row.get("clocks_throttle_reasons.active")), temperature=_float(row.get("temperature.gpu")))


def _text(value: Optional[str]) -> Optional[str]:
    value = (value or "").strip()
    return None if not value or value.strip("[]").lower() in ("n/a", "not supported", "unknown error") else value


def _int(value: Optional[str]) -> Optional[int]:
    text = _text(value)
    try:
        return int(text, 16) if text and text.lower().startswith("0x") else int(text) if text else None
    except ValueError:
        return None


def _float(value: Optional[str]) -> Optional[float]:
    try:
        number = float(_text(value) or "nan")
    except ValueError:
        return None
    return None if number != number else number


def _bool(value: Optional[str]) -> Optional[bool]:
    text = (_text(value) or "").lower()
    return True if text in ("yes", "enabled", "1") else False if text in ("no", "disabled", "0") else None


def normalize_bus_id(text: str) -> Optional[str]:
    """00000000:3B:00.0 (nvidia-smi), 0000:3b:00 (Xid lines), 3b:00.0 -> 0000:3b:00."""
    match = re.search(r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?\s*$", str(text).strip())
    if not match:
        return None
    domain = (match.group(1) or "0000")[-4:]
    return f"{domain}:{match.group(2)}:{match.group(3)}".lower()


def sample_events(host: str, now: Sequence[GpuSample], previous: Sequence[GpuSample] = ()) -> list[Event]:
    """Events for what got worse since `previous` (the last sample of the same node; () at first)."""
    before = {sample.gpu.key: sample for sample in previous}
    events = []
    for sample in now:
        events += _gpu_events(host, sample, before.get(sample.gpu.key))
    return events


def _gpu_events(host: str, now: GpuSample, before: Optional[GpuSample]) -> list[Event]:
    def event(kind: str, evidence: str) -> Event:
        return Event(host, kind, "watch", evidence=evidence, gpu=now.gpu)

    first = before is None
    before = before or GpuSample(now.gpu)
    found = []
    if (now.ecc_volatile or 0) > (before.ecc_volatile or 0) or (
            not first and (now.ecc_aggregate or 0) > (before.ecc_aggregate or 0)):
        found.append(event("ecc_uncorrectable", f"uncorrectable ECC: volatile {now.ecc_volatile}, "
                                                f"aggregate {now.ecc_aggregate}"))
    if now.remap_failure and not before.remap_failure:
        found.append(event("row_remap_failure", "remapped_rows.failure: Yes"))
    if (now.retired_pending or now.remap_pending) and not (before.retired_pending or before.remap_pending):
        found.append(event("row_remap_pending", "retired pages or remapped rows pending a GPU reset"))
    slowed = (now.throttle or 0) & PROTECTIVE & ~(before.throttle or 0)
    hot = (now.temperature or 0) >= TEMPERATURE_LIMIT_C > (before.temperature or 0)
    if slowed or hot:
        found.append(event("thermal", f"clocks_throttle_reasons {now.throttle or 0:#x}, {now.temperature} C"))
    return found


# ------------------------------------------------------------------ Xid lines

_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F:.]+)\): (?P<xid>\d{1,5})\b,?\s*"
                     r"(?:pid=(?P<pid>'[^']*'|[^,\s]*),?\s*)?(?:name=(?P<name>[^,]*),?\s*)?(?P<message>.*)")
_FALLEN_RE = re.compile(r"NVRM: The NVIDIA GPU (?P<bus>[0-9a-fA-F:.]+)")


@dataclass(frozen=True)
class XidLine:
    xid: int
    bus_id: Optional[str]
    message: str
    line: str
    pid: Optional[str] = None


def parse_xid_lines(text: str) -> list[XidLine]:
    """Every Xid in kernel log text; a driver's Xid-less "fallen off the bus" notice counts as 79."""
    lines = str(text).splitlines()
    found = []
    for number, line in enumerate(lines):
        match = _XID_RE.search(line)
        if match:
            found.append(XidLine(int(match["xid"]), normalize_bus_id(match["bus"]), match["message"].strip(),
                                 line.strip()[:400], (match["pid"] or "").strip("'") or None))
            continue
        fallen = _FALLEN_RE.search(line)
        if fallen and "fallen off the bus" in " ".join(lines[number:number + 3]):
            found.append(XidLine(79, normalize_bus_id(fallen["bus"]), "GPU has fallen off the bus (no Xid logged)",
                                 line.strip()[:400]))
    return found


def xid_events(host: str, xids: Sequence[XidLine], gpus: Sequence[GpuSample] = ()) -> list[Event]:
    """Events for the Xids that are the node's fault, on the GPU at that bus id where known."""
    by_bus = {sample.bus_id: sample.gpu for sample in gpus if sample.bus_id}
    events = []
    for xid in xids:
        if xid.xid in APPLICATION_XIDS:
            continue
        kind = "xid_fatal" if xid.xid in FATAL_XIDS else "xid"
        events.append(Event(host, kind, "watch", evidence=xid.line, cause=f"Xid {xid.xid}",
                            gpu=by_bus.get(xid.bus_id)))
    return events


# ------------------------------------------------------------------ dcgmi health -c

STATUSES = ("Healthy", "Warning", "Failure")


@dataclass(frozen=True)
class DcgmGpu:
    gpu_id: int
    status: str
    messages: tuple[str, ...] = ()


@dataclass(frozen=True)
class DcgmHealth:
    overall: Optional[str] = None
    gpus: tuple[DcgmGpu, ...] = field(default=())
    unreadable: Optional[str] = None


def parse_dcgm_health(text: str) -> DcgmHealth:
    text = str(text)
    if text.lstrip().startswith("{"):
        try:
            return _dcgm_json(json.loads(text))
        except (ValueError, AttributeError, TypeError):
            return DcgmHealth(unreadable="dcgmi printed JSON that is not a health report")
    return _dcgm_table(text)


def _dcgm_json(document: Any) -> DcgmHealth:
    body = document.get("body") or {}
    overall = _status((body.get("Overall Health") or {}).get("value"))
    gpus = []
    for key, entry in body.items():
        match = re.match(r"GPU ID:?\s*(\d+)", str(key))
        if match and isinstance(entry, dict):
            gpus.append(DcgmGpu(int(match[1]), _status(entry.get("value")) or "Warning",
                                tuple(m for m in _json_values(entry.get("children")) if _status(m) is None)))
    if overall is None:
        return DcgmHealth(unreadable="no Overall Health in dcgmi's JSON")
    return DcgmHealth(overall, tuple(gpus))


def _json_values(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [text for key, value in node.items() for text in
                ([f"{key}: {value}"] if not isinstance(value, (dict, list)) and key != "value" else
                 [str(value)] if key == "value" else _json_values(value))]
    if isinstance(node, list):
        return [text for item in node for text in _json_values(item)]
    return []


def _dcgm_table(text: str) -> DcgmHealth:
    overall, gpus, current = None, [], None
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        left, right = (cells + [""])[:2]
        if left.startswith("Overall Health"):
            overall = _status(right) or _status(left.partition(":")[2])
        elif re.match(r"GPU ID:?\s*\d+", left):
            current = DcgmGpu(int(re.search(r"\d+", left)[0]), _status(right) or "Warning")
            gpus.append(current)
        elif not left and right and current is not None and not set(right) <= set("-=+ "):
            gpus[-1] = current = DcgmGpu(current.gpu_id, current.status, current.messages + (right,))
    if overall is None:
        return DcgmHealth(unreadable="no `Overall Health` row in dcgmi's output")
    return DcgmHealth(overall, tuple(gpus))


def _status(value: Any) -> Optional[str]:
    text = str(value or "").strip()
    return next((status for status in STATUSES if text.lower().startswith(status.lower())), None)


def dcgm_events(host: str, health: DcgmHealth, gpus: Sequence[GpuSample] = ()) -> list[Event]:
    """Failure -> dcgm_failure, Warning -> dcgm_warning, per GPU where dcgmi names one."""
    by_index = {sample.gpu.index: sample.gpu for sample in gpus}
    kinds = {"Failure": "dcgm_failure", "Warning": "dcgm_warning"}
    events = [Event(host, kinds[g.status], "watch", evidence="; ".join(g.messages)[:400] or f"GPU {g.gpu_id}: "
                    f"{g.status}", gpu=by_index.get(g.gpu_id, GpuId(index=g.gpu_id)))
              for g in health.gpus if g.status in kinds]
    if not events and health.overall in kinds:
        events.append(Event(host, kinds[health.overall], "watch", evidence=f"DCGM overall health: {health.overall}"))
    return events
