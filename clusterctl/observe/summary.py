"""A node's metrics.jsonl (job/node_metrics.py's samples) summarised for the run record (pure).

`summarise(samples)` -> per node: the mean and max of CPU %, memory used, and over every GPU's
samples of utilisation, memory used, power and temperature; the number of samples and the span they
cover; the GPUs' worst ECC count and every throttle reason seen. collect-logs writes it into
run.json as `"metrics": {host: summary}` once it brought the files back (the controller may be
gone while a detached run ends, so the run's end is not the place).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Optional

GPU_FIELDS = ("util_pct", "mem_used_mb", "power_w", "temp_c")
NODE_FIELDS = ("cpu_pct", "mem_used_mb")


def read_samples(path: Path) -> list[dict]:
    """The samples of a metrics.jsonl; lines that are not a JSON object (a write cut short) are left out.
    Read a line at a time and at most metrics_file.MAX_LINES of them (the report's bound): the file
    comes from a node, and its size is the node's to choose."""
    from clusterctl.observe.metrics_file import MAX_LINES

    samples = []
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for count, line in enumerate(handle):
                if count >= MAX_LINES:
                    break
                try:
                    sample = json.loads(line)
                except ValueError:
                    continue
                if isinstance(sample, dict):
                    samples.append(sample)
    except OSError:
        return []
    return samples


def _number(value) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _mean_max(values: Iterable) -> Optional[dict]:
    numbers = [n for n in map(_number, values) if n is not None]
    if not numbers:
        return None
    return {"mean": round(sum(numbers) / len(numbers), 2), "max": round(max(numbers), 2)}


def _gpus(samples: list[dict]) -> list[dict]:
    return [g for s in samples for g in (s.get("gpus") if isinstance(s.get("gpus"), list) else []) if isinstance(g, dict)]


def summarise(samples: list[dict]) -> dict:
    """One node's summary (see the module's doc); {"samples": 0} without samples."""
    if not samples:
        return {"samples": 0}
    times = [t for t in (_number(s.get("t")) for s in samples) if t is not None]
    gpus = _gpus(samples)
    summary = {"samples": len(samples), "span_s": round(max(times) - min(times), 1) if times else 0.0}
    for field in NODE_FIELDS:
        summary[field] = _mean_max(s.get(field) for s in samples)
    summary["gpu_count"] = max((len(s.get("gpus") or []) for s in samples), default=0)
    for field in GPU_FIELDS:
        summary[f"gpu_{field}"] = _mean_max(g.get(field) for g in gpus)
    ecc = [int(n) for n in (_number(g.get("ecc_volatile_uncorrected")) for g in gpus) if n is not None]
    summary["gpu_ecc_volatile_uncorrected_max"] = max(ecc) if ecc else None
    summary["gpu_throttle_seen"] = sorted({str(r) for g in gpus for r in (g.get("throttle") or [])})
    return summary


def summarise_bundle(dest: Path, run_id: str, hosts: Iterable[str]) -> dict:
    """{host: summary} of the metrics.jsonl files collect-logs brought to `dest` (hosts without one: left out)."""
    from clusterctl.observe.sampling import bundle_path

    found = {}
    for host in hosts:
        path = bundle_path(dest, run_id, host)
        if path.is_file():
            found[host] = summarise(read_samples(path))
    return found


def with_metrics(store, run_id: str, record: dict, dest: Path, hosts: Iterable[str]) -> dict:
    """collect-logs' run record with `"metrics": {host: summary}` of the files it brought back; an ended
    run's local record (.clusterctl/runs/<id>/run.json) gets it too (a running one's is left to its run)."""
    found = summarise_bundle(dest, run_id, hosts)
    if not found:
        return record
    record = {**record, "metrics": found}
    if record.get("state") != "running":
        try:
            store.write_json(store.run_dir(run_id) / "run.json", record)
        except OSError:
            pass  # the bundle's run.json has it; the local record is a copy
    return record
