"""A node's metrics.jsonl (node/node_metrics.py's samples) summarised for the run record (pure).

`summarise(samples)` -> per node: the mean and max of CPU %, memory used, and over every GPU's
samples of utilisation, memory used, power and temperature; the number of samples and the span they
cover; the GPUs' worst ECC count and every throttle reason seen. collect-logs writes it into
run.json as `"metrics": {host: summary}` once it brought the files back (the controller may be
gone while a detached run ends, so the run's end is not the place).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from clusterctl.observe.metrics_file import Sample, read_file

GPU_FIELDS = ("util_pct", "mem_used_mb", "power_w", "temp_c")
NODE_FIELDS = ("cpu_pct", "mem_used_mb")


def _mean_max(values: Iterable[Optional[float]]) -> Optional[dict]:
    numbers = [n for n in values if n is not None]
    if not numbers:
        return None
    return {"mean": round(sum(numbers) / len(numbers), 2), "max": round(max(numbers), 2)}


def summarise(samples: list[Sample]) -> dict:
    """One node's summary (see the module's doc); {"samples": 0} without samples."""
    if not samples:
        return {"samples": 0}
    times = [s.t for s in samples]
    gpus = [g for s in samples for g in s.gpus]
    summary = {"samples": len(samples), "span_s": round(max(times) - min(times), 1)}
    for field in NODE_FIELDS:
        summary[field] = _mean_max(getattr(s, field) for s in samples)
    summary["gpu_count"] = max(len(s.gpus) for s in samples)
    for field in GPU_FIELDS:
        summary[f"gpu_{field}"] = _mean_max(getattr(g, field) for g in gpus)
    ecc = [int(g.ecc_volatile_uncorrected) for g in gpus if g.ecc_volatile_uncorrected is not None]
    summary["gpu_ecc_volatile_uncorrected_max"] = max(ecc) if ecc else None
    summary["gpu_throttle_seen"] = sorted({reason for g in gpus for reason in g.throttle})
    return summary


def summarise_bundle(dest: Path, run_id: str, hosts: Iterable[str]) -> dict:
    """{host: summary} of the metrics.jsonl files collect-logs brought to `dest` (hosts without one: left out)."""
    from clusterctl.plan.metrics_sampler import bundle_path

    found = {}
    for host in hosts:
        path = bundle_path(dest, run_id, host)
        if path.is_file():
            found[host] = summarise(read_file(path, host)[0])
    return found


def with_metrics(store, run_id: str, record: dict, dest: Path, hosts: Iterable[str]) -> dict:
    """collect-logs' run record with `"metrics": {host: summary}` of the files it brought back; an ended
    run's local record (.clusterctl/runs/<id>/run.json) gets it too (a running one's is left to its run)."""
    found = summarise_bundle(dest, run_id, hosts)
    if not found:
        return record
    from clusterctl.ground.records import RunRecord, RunStore

    record = {**record, "metrics": found}
    if record.get("state") != "running":
        try:
            RunStore(store).write(RunRecord.from_json(record, run_id))
        except OSError:
            pass  # the bundle's run.json has it; the local record is a copy
    return record
