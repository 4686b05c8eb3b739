"""`clusterctl nccl-test`, the pure part: sizes, bandwidth math, records, verdicts, pairs.

No I/O. The rank-side program (node/allreduce_bench.py) prints one `NCCLTEST {json}`
record per event on rank 0 (and writes the same lines to a result file); this module
turns those records into the report: stage by stage, size by size, a verdict against the
bandwidth the link class should give, and for `--pairs` the ranking of node pairs and
the node common to the slowest ones.

Bandwidth follows NVIDIA nccl-tests (doc/PERFORMANCE.md): algbw = S / t and
busbw = algbw * 2(n-1)/n for all_reduce, GB/s = 1e9 bytes per second. Targets are those
of docs/research perf-anchors (section 3 and 6), NVLink multicast (NVLS) off:
NVLink 4 ring on Hopper ~325 GB/s busbw for 2 GPUs, ~345 for 4, ~350 for 8; InfiniBand
NDR 400G ~46 GB/s per NIC; TCP sockets and Gloo: no target, numbers only.
"""
from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

from clusterctl.documents import parts
from clusterctl.documents.convert import plain

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SMALL_MAX = MIB  # the small stage ends here; the full sweep takes the larger sizes
JUDGE_MIN_SIZE = 256 * MIB  # below this all_reduce is latency-bound: no bandwidth verdict
WARN_FRACTION = 0.8  # busbw under target but above this fraction of it: warn, not fail
IB_NDR_GBPS_PER_NIC = 46.0
RECORD_PREFIX = "NCCLTEST "
STAGES = ("connect", "small", "full")

_UNITS = {"": 1, "B": 1, "K": KIB, "KB": KIB, "KIB": KIB, "M": MIB, "MB": MIB, "MIB": MIB,
          "G": GIB, "GB": GIB, "GIB": GIB}
_TORCHRUN_PREFIX = re.compile(r"^\[\S+ rank\d+\]: ?")
_HOPPER = re.compile(r"\bH(100|200|20|800)\b", re.IGNORECASE)


# --------------------------------------------------------------------------- sizes and math


def parse_size(text: str) -> int:
    """'8', '64K', '1M', '1G', '1GiB' -> bytes (binary units). ValueError when not a size."""
    match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
    if not match or match.group(2).upper() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (write e.g. 8, 64K, 1M, 1G)")
    size = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if size < 4:
        raise ValueError(f"{text!r} is smaller than one float32 element (4 bytes)")
    return size


def human_size(size: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def algbw_gbps(size: int, seconds: float) -> float:
    return size / seconds / 1e9


def busbw_gbps(algbw: float, world_size: int) -> float:
    """All-reduce bus bandwidth: what each link carries, comparable across world sizes."""
    return algbw * 2 * (world_size - 1) / world_size


def sweep(min_size: int, max_size: int) -> list[int]:
    """Doubling sizes from min_size to max_size in whole float32 elements (as the ranks do)."""
    size, sizes = max(4, min_size - min_size % 4), []
    top = max_size - max_size % 4
    while size <= top:
        sizes.append(size)
        size *= 2
    if top >= 4 and (not sizes or sizes[-1] != top):
        sizes.append(top)
    return sizes


# --------------------------------------------------------------------------- records


def parse_record(line: str) -> Optional[dict]:
    """One NCCLTEST record from a log line (torchrun's `[host rankN]: ` prefix allowed)."""
    text = _TORCHRUN_PREFIX.sub("", line.strip(), count=1)
    if not text.startswith(RECORD_PREFIX):
        return None
    try:
        record = json.loads(text[len(RECORD_PREFIX):])
    except (ValueError, RecursionError):  # RecursionError: JSON nested thousands deep
        return None
    return record if isinstance(record, dict) and _well_formed(record) else None


_NUMBERS = ("time_us", "algbw_gbps", "busbw_gbps", "init_s", "first_allreduce_s", "start_skew_s", "elapsed_s")


def _well_formed(record: dict) -> bool:
    """A record the report can use: any line of a rank's log may start with the prefix, and a
    size that is not a whole number must not crash the report (it is left out instead)."""
    def whole(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    def number(value) -> bool:
        return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))

    return (isinstance(record.get("stage"), str) and ("size" not in record or whole(record["size"]))
            and whole(record.get("world_size", 0)) and isinstance(record.get("sizes", []), list)
            and all(whole(size) for size in record.get("sizes", [])) and all(number(record.get(k)) for k in _NUMBERS))


def parse_records(lines: Iterable[str]) -> list[dict]:
    """Records from log lines, or from the result file's JSON lines (no prefix needed there)."""
    records = []
    for line in lines:
        stripped = line.strip()
        record = parse_record(stripped if not stripped.startswith("{") else RECORD_PREFIX + stripped)
        if record is not None:
            records.append(record)
    return records


# --------------------------------------------------------------------------- link class


@dataclass(frozen=True)
class LinkClass:
    name: str  # nvlink-hopper | nvlink | pcie | gpu-intra-node | infiniband | tcp | gloo | single-rank
    target_gbps: Optional[float]  # busbw expected at large sizes; None: report only
    basis: str  # where the target comes from, in words

    def to_json(self) -> dict:
        return plain(parts.NcclLink(class_=self.name, target_busbw_gbps=self.target_gbps, basis=self.basis))


def is_hopper(gpu_name: Optional[str]) -> bool:
    return bool(gpu_name and _HOPPER.search(gpu_name))


def nvlink_ring_target(gpus: int) -> float:
    """Hopper NVLink 4, ring (NVLS off): perf-anchors' measured 2/4 GPU figures, 8 from nccl #1455."""
    return 325.0 if gpus <= 3 else 345.0 if gpus <= 7 else 350.0


def link_class(backend: str, world_size: int, machines: int, nproc_per_node: int,
               gpu_name: Optional[str] = None, nvlink: Optional[bool] = None, ib_nics: int = 0) -> LinkClass:
    """What the slowest hop of this all-reduce is, and the busbw it should reach.

    Between machines the NICs are the bottleneck: NCCL's ring uses about one NIC per
    GPU, so min(NICs, GPUs per node) NICs carry it.
    """
    if world_size < 2:
        return LinkClass("single-rank", None, "one rank: the all-reduce moves nothing, so no bandwidth is "
                                              "reported, only whether the sums are right")
    if backend != "nccl":
        return LinkClass("gloo", None, "Gloo over TCP (CPU ranks): no bandwidth target, numbers reported only")
    if machines <= 1:
        return _intra_node(world_size, gpu_name, nvlink)
    if ib_nics <= 0:
        return LinkClass("tcp", None, "several machines and no active InfiniBand/RoCE HCA: NCCL uses TCP "
                                      "sockets; no target, numbers reported only")
    nics = min(ib_nics, nproc_per_node)
    target = IB_NDR_GBPS_PER_NIC * nics
    basis = (f"InfiniBand between machines: ~{IB_NDR_GBPS_PER_NIC:g} GB/s per NDR 400G NIC x {nics} NIC(s) "
             "per node (HDR 200G gives about half)")
    return LinkClass("infiniband", target, basis)


def _intra_node(gpus: int, gpu_name: Optional[str], nvlink: Optional[bool]) -> LinkClass:
    if nvlink and is_hopper(gpu_name):
        target = nvlink_ring_target(gpus)
        return LinkClass("nvlink-hopper", target,
                         f"NVLink 4 ring on {gpu_name}, NVLS off: ~{target:g} GB/s busbw for {gpus} GPUs at >= 1 GiB")
    if nvlink:
        return LinkClass("nvlink", None, f"NVLink on {gpu_name or 'this GPU'}: no target recorded, numbers only")
    if nvlink is False:
        return LinkClass("pcie", None, "GPUs without NVLink between them (PCIe): no target, numbers only")
    return LinkClass("gpu-intra-node", None, "GPUs of one machine, link type unknown (no nvidia-smi topo): numbers only")


def verdict(size: int, busbw: float, link: LinkClass) -> str:
    """pass | warn | fail against the link's target; '-' where no judgement applies."""
    if link.target_gbps is None or size < JUDGE_MIN_SIZE:
        return "-"
    if busbw >= link.target_gbps:
        return "pass"
    return "warn" if busbw >= WARN_FRACTION * link.target_gbps else "fail"


# --------------------------------------------------------------------------- one test's report


def summarize(records: Sequence[Mapping], link: LinkClass, last_stage: str = "full") -> dict:
    """The report of one test from its records: stages, sizes, where it stopped, verdict."""
    plan = next((r for r in records if r.get("stage") == "plan"), {})
    connect = next((r for r in records if r.get("stage") == "connect"), None)
    errors = [dict(r) for r in records if r.get("stage") == "error"]
    done = next((r for r in records if r.get("stage") == "done"), None)
    sizes = [size_row(r, link) for r in records if r.get("stage") in ("small", "full") and "size" in r]
    planned = list(plan.get("sizes", []))
    measured = {row["size"] for row in sizes}
    missing = [s for s in planned if s not in measured]
    stages = {"connect": _connect_stage(connect, errors, bool(plan))}
    for stage in ("small", "full"):
        stages[stage] = _size_stage(stage, planned, sizes, stages, last_stage)
    largest = max(sizes, key=lambda row: row["size"]) if sizes else None
    overall = largest["verdict"] if largest else "-"
    document = {
        "stages": stages, "sizes": sizes, "missing_sizes": missing, "link": link.to_json(), "verdict": overall,
        "correct": all(row["correct"] for row in sizes) if sizes else None,
        "largest": largest, "complete": done is not None and not missing, "errors": errors,
    }
    if missing and sizes:
        document["stopped_after"] = max(measured)
    return document


def size_row(record: Mapping, link: Optional[LinkClass]) -> dict:
    """One size of the report; no verdict before the link is known. With one rank the
    all-reduce copies a buffer in GPU memory and moves nothing between ranks: the rank's
    algbw (size / time) reads as tens of TB/s and busbw is 0 by definition, so neither is
    reported (null), only the time and whether the sum is right."""
    moves_data = link is None or link.name != "single-rank"
    row = {"size": int(record["size"]), "time_us": record.get("time_us"),
           "algbw_gbps": record.get("algbw_gbps") if moves_data else None,
           "busbw_gbps": record.get("busbw_gbps") if moves_data else None, "correct": bool(record.get("correct")),
           "stage": record.get("stage"), "iters": record.get("iters")}
    row["verdict"] = verdict(row["size"], row["busbw_gbps"] or 0.0, link) if link is not None else "-"
    return row


def _connect_stage(connect: Optional[Mapping], errors: list[dict], started: bool) -> dict:
    if connect and connect.get("ok"):
        keep = ("world_size", "backend", "init_s", "first_allreduce_s", "start_skew_s", "last_to_start",
                "torch", "cuda", "nccl", "gpu", "nvlink")
        return {"status": "ok", **{k: connect[k] for k in keep if k in connect}}
    detail = str(errors[0].get("error", "rank 0 reported an error without a message")) if errors else (
        "the ranks started but never finished init_process_group + one all_reduce" if started
        else "the test never started on rank 0 (see the diagnosis)")
    return {"status": "failed", "detail": detail}


def _size_stage(stage: str, planned: list[int], rows: list[dict], stages: dict, last_stage: str) -> dict:
    mine = [s for s in planned if (s <= SMALL_MAX) == (stage == "small")]
    got = [row for row in rows if row["stage"] == stage]
    if STAGES.index(stage) > STAGES.index(last_stage) or (not mine and stages["connect"]["status"] == "ok"):
        return {"status": "skipped", "sizes_planned": len(mine), "sizes_done": len(got)}
    earlier = [stages[s]["status"] for s in STAGES[: STAGES.index(stage)]]
    if any(status in ("failed", "not_reached") for status in earlier) and not got:
        return {"status": "not_reached", "sizes_planned": len(mine), "sizes_done": 0}
    bad = [row["size"] for row in got if not row["correct"]]
    status = "ok" if len(got) >= len(mine) and not bad else "failed"
    entry = {"status": status, "sizes_planned": len(mine), "sizes_done": len(got)}
    if bad:
        entry["wrong_sums_at"] = bad
    return entry


def report_ok(report: Mapping, exit_code: int) -> bool:
    """The test passed: the job ended well, every planned size ran and summed right, no failing verdict."""
    stages_ok = all(s["status"] in ("ok", "skipped") for s in report["stages"].values())
    return exit_code == 0 and stages_ok and report["correct"] is not False and report["verdict"] != "fail"


def stop_note(report: Mapping) -> Optional[str]:
    """Where the sweep stopped, in words, when it did not finish (the seed's 'stopped after 32K')."""
    if report["stages"]["connect"]["status"] != "ok":
        return f"stopped at the connectivity stage: {report['stages']['connect']['detail']}"
    if report.get("stopped_after") is not None:
        nxt = report["missing_sizes"][0]
        return (f"the sweep stopped after {human_size(report['stopped_after'])}: {human_size(nxt)} never completed "
                f"({len(report['missing_sizes'])} size(s) missing)")
    if report["missing_sizes"]:
        return f"connected, but no size completed: {human_size(report['missing_sizes'][0])} never finished"
    return None


# --------------------------------------------------------------------------- text


def _gbps(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value >= 1 else f"{value:.4f}"


def _time(us: Optional[float]) -> str:
    if us is None:
        return "-"
    return f"{us / 1000:.2f} ms" if us >= 10000 else f"{us:.1f} us"


def size_line(row: Mapping) -> str:
    """One size as a table row (also the live line while the sweep runs)."""
    return (f"{human_size(row['size']):>9}  {_time(row['time_us']):>10}  {_gbps(row['algbw_gbps']):>9}  "
            f"{_gbps(row['busbw_gbps']):>9}  {'yes' if row['correct'] else 'NO':>7}  {row.get('verdict', '-'):>7}")


TABLE_HEADER = f"{'size':>9}  {'time':>10}  {'algbw GB/s':>9}  {'busbw GB/s':>9}  {'correct':>7}  {'verdict':>7}"


def table_lines(report: Mapping) -> list[str]:
    lines = [TABLE_HEADER] + [size_line(row) for row in report["sizes"]]
    link = report["link"]
    target = link["target_busbw_gbps"]
    lines.append(f"link: {link['class']}; " + (f"target busbw >= {target:g} GB/s at >= {human_size(JUDGE_MIN_SIZE)}"
                                                if target else "no bandwidth target") + f" ({link['basis']})")
    return lines


# --------------------------------------------------------------------------- pairs


def pair_rounds(names: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Every pair of nodes once, in rounds where no node is in two pairs (circle method).

    n nodes give n-1 rounds (n even) or n rounds (n odd, one node rests each round).
    Within a pair the node earlier in `names` comes first (it hosts the rendezvous).
    """
    order = {name: i for i, name in enumerate(names)}
    ring: list[Optional[str]] = list(names) + ([None] if len(names) % 2 else [])
    rounds = []
    for _ in range(len(ring) - 1):
        pairs = []
        for i in range(len(ring) // 2):
            a, b = ring[i], ring[len(ring) - 1 - i]
            if a is not None and b is not None:
                pairs.append(tuple(sorted((a, b), key=order.__getitem__)))
        rounds.append(pairs)
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return [r for r in rounds if r]


def rank_pairs(pairs: Sequence[Mapping]) -> list[dict]:
    """Pairs slowest first by busbw at the largest size; a failed pair counts as 0 GB/s."""
    ranked = sorted((dict(p) for p in pairs), key=lambda p: (_pair_busbw(p), p["hosts"]))
    for position, pair in enumerate(ranked, 1):
        pair["rank"] = position
    return ranked


def _pair_busbw(pair: Mapping) -> float:
    return float(pair.get("busbw_gbps") or 0.0) if pair.get("ok") else 0.0


def node_scores(pairs: Sequence[Mapping]) -> dict[str, float]:
    """Each node's median busbw over the pairs it was in."""
    seen: dict[str, list[float]] = {}
    for pair in pairs:
        for host in pair["hosts"]:
            seen.setdefault(host, []).append(_pair_busbw(pair))
    return {host: statistics.median(values) for host, values in seen.items()}


def slowest_node(pairs: Sequence[Mapping]) -> dict:
    """The node common to the slowest pairs: the lower-scoring node of the slowest pair.

    Needs three nodes at least (with two there is one pair and no way to tell which end
    is slow). `outlier` says whether it stands out: its score is under WARN_FRACTION of
    the median of the other nodes' scores.
    """
    scores = node_scores(pairs)
    if len(scores) < 3:
        return {"host": None, "reason": "three nodes at least are needed to tell which end of a slow pair is slow",
                "scores": scores, "outlier": False}
    slowest_pair = rank_pairs(pairs)[0]
    a, b = slowest_pair["hosts"]
    if scores[a] == scores[b]:
        return {"host": None, "reason": f"{a} and {b} score the same: no single node is common to the slowest pairs",
                "scores": scores, "outlier": False}
    host = a if scores[a] < scores[b] else b
    others = statistics.median(v for k, v in scores.items() if k != host)
    outlier = scores[host] < WARN_FRACTION * others
    return {"host": host, "score_gbps": scores[host], "others_median_gbps": others, "outlier": outlier,
            "scores": scores}


def pairs_table_lines(ranked: Sequence[Mapping]) -> list[str]:
    lines = [f"{'rank':>4}  {'pair':<40}  {'size':>9}  {'busbw GB/s':>10}  {'result':<8}"]
    for pair in ranked:
        size = human_size(pair["size"]) if pair.get("size") else "-"
        result = "ok" if pair.get("ok") else "FAILED"
        lines.append(f"{pair['rank']:>4}  {' + '.join(pair['hosts']):<40}  {size:>9}  "
                     f"{_gbps(pair.get('busbw_gbps')):>10}  {result:<8}")
    return lines
