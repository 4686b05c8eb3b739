"""`clusterctl health check HOST` (issue 36): is a node fit to come back? Three steps, recorded:

1. the preflight checks on that node alone (preflight/probe.py, the image pull included);
2. a short GPU burn where it has GPUs: a matmul loop on every GPU through the node's python (the
   ranks' own: in the container where there is one), each result compared with the first (a GPU
   that computes wrong or dies fails); skipped, said why, on a node without a CUDA GPU or torch;
3. an nccl-test pair (small sizes) against a node the record calls healthy, where there is one.

All passing (a skip passes) records check_passed, after which `clusterctl health release HOST`
needs no --force; a failing step records preflight_failed with that step's evidence."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from clusterctl.documents import parts
from clusterctl.documents.convert import as_document
from clusterctl.errors import UsageError
from clusterctl.health.events import Event
from clusterctl.models import CheckStatus, Command, Inventory

BURN_S = 10.0
# argv[1]: seconds. Prints `skip: why`, `pass: ...` per GPU, or `fail: ...` (exit 1).
BURN = r'''
import math, sys, time
try:
    import torch
except ImportError as e:
    print("skip: torch cannot be imported by the node's python (%s)" % e); sys.exit(0)
if not torch.cuda.is_available():
    print("skip: no CUDA GPU visible to torch on this node"); sys.exit(0)
seconds, n = float(sys.argv[1]), 4096
gpus = list(range(torch.cuda.device_count()))
pairs = [(torch.randn(n, n, device=f"cuda:{i}", generator=torch.Generator(f"cuda:{i}").manual_seed(i)),
          torch.randn(n, n, device=f"cuda:{i}", generator=torch.Generator(f"cuda:{i}").manual_seed(i + 99))) for i in gpus]
first = [float((a @ b).double().sum()) for a, b in pairs]
steps, end = 0, time.time() + seconds
try:
    while time.time() < end:
        last = [a @ b for a, b in pairs]
        steps += 1
        if steps % 20 == 0:
            for i in gpus:
                torch.cuda.synchronize(i)
    sums = [float(c.double().sum()) for c in last]
except RuntimeError as e:
    print("fail: %s" % str(e).splitlines()[0]); sys.exit(1)
bad = [i for i in gpus if not math.isfinite(sums[i]) or abs(sums[i] - first[i]) > 1e-3 * max(1.0, abs(first[i]))]
for i in gpus:
    name = torch.cuda.get_device_name(i)
    if i in bad:
        print("fail: GPU %d (%s): the same matmul gave %r, then %r" % (i, name, first[i], sums[i]))
    else:
        print("pass: GPU %d (%s): %d matmuls of %dx%d in %gs, %.1f TFLOP/s" % (i, name, steps, n, n, seconds,
              2 * n ** 3 * steps / seconds / 1e12))
sys.exit(1 if bad else 0)
'''


@dataclass(frozen=True)
class Step:
    name: str  # preflight | gpu_burn | nccl_pair
    status: str  # pass | fail | skip
    detail: str

    @property
    def step(self) -> str:
        return self.name

    def to_json(self) -> dict:
        return as_document(parts.CheckupStep, self)


def check_host(app, inventory: Inventory, name: str) -> tuple[list[Step], list]:
    """The steps on `name`, recorded; (the steps, the preflight's CheckResults)."""
    from clusterctl.health.fleet import record_events, partner_for

    host = _host(inventory, name)
    alone = inventory.limited([host.name])
    checks = _preflight(app, alone, host)
    failed = [c for c in checks if c.host in (host.name, None) and c.status is CheckStatus.FAIL]
    steps = [Step("preflight", "fail" if failed else "pass",
                  "; ".join(f"{c.check}: {c.detail}" for c in failed) or f"{len(checks)} checks pass")]
    if not failed:
        steps.append(_burn(app, alone, host))
    if all(s.status != "fail" for s in steps):
        partner = partner_for(app.state.health_db, inventory, host.name)
        steps.append(_pair(app, inventory, host.name, partner))
    bad = [s for s in steps if s.status == "fail"]
    event = (Event(host.name, "preflight_failed", "check", evidence="; ".join(f"{s.name}: {s.detail}" for s in bad)[:800],
                   cause=",".join(s.name for s in bad)) if bad else
             Event(host.name, "check_passed", "check", evidence="; ".join(f"{s.name} {s.status}" for s in steps)))
    note = record_events(app.state.health_db, inventory, [event])
    if note:
        raise UsageError(note, where=str(app.state.health_db), fix="run `clusterctl health check` again once it can be written")
    return steps, checks


def _host(inventory: Inventory, name: str):
    try:
        return inventory.host(name)
    except KeyError:
        raise UsageError(f"no host {name} in the inventory", where=str(inventory.source or "the inventory"),
                         fix=f"choose one of: {', '.join(h.name for h in inventory.hosts)}") from None


def _preflight(app, alone: Inventory, host) -> list:
    from clusterctl.preflight.probe import run_checks
    from clusterctl.registry.image_pull import image_pull_checks

    return run_checks(alone, [host], app.connections, image_pull_checks)


def _burn(app, inventory: Inventory, host) -> Step:
    from clusterctl.executor import for_each_host, run_commands
    from clusterctl.plan.container import in_container

    argv = in_container(inventory, (inventory.job.python, "-c", BURN, f"{BURN_S:g}"))
    command = Command(argv, timeout=BURN_S + 180)
    result = for_each_host([host], lambda t, h: run_commands(t, h, [command]), app.connections)[host.name]
    lines = [line for line in result.stdout.splitlines() if line.split(":")[0] in ("pass", "fail", "skip")]
    if not lines:
        why = (result.stdout.strip().splitlines() or [result.detail or "no output"])[-1]
        return Step("gpu_burn", "fail", f"the burn did not run: {why}"[:400])
    worst = "fail" if any(l.startswith("fail") for l in lines) or not result.succeeded else \
        "skip" if lines[0].startswith("skip") else "pass"
    return Step("gpu_burn", worst, "; ".join(l.partition(": ")[2] for l in lines)[:800])


def _pair(app, inventory: Inventory, name: str, partner: Optional[str]) -> Step:
    from clusterctl.backends.nccl_test import NcclTestOptions, pair_test

    if partner is None:
        return Step("nccl_pair", "skip", "no other node of the inventory is healthy to pair with")
    with app.state.lock(f"run-{inventory.name}", "a `clusterctl run`"):
        entry = pair_test(app, NcclTestOptions(stage="small", connect_timeout=60.0, timeout=300.0), inventory,
                          partner, name)
    if entry.get("ok"):
        return Step("nccl_pair", "pass", f"with {partner}: busbw {entry.get('busbw_gbps')} GB/s, sums exact")
    detail = entry.get("detail") or ((entry.get("first_failure") or {}).get("diagnosis") or [{}])[0].get("evidence")
    return Step("nccl_pair", "fail", f"with {partner}: {detail or entry.get('stages')}"[:800])


def check_outcome(app, inventory, host: str):
    """`clusterctl health check HOST`: the checks, rendered, and the command's Outcome."""
    from clusterctl.health.record import HealthRecord
    from clusterctl.outcome import Outcome

    steps, checks = check_host(app, inventory, host)
    app.renderer.checks_table(checks)
    for step in steps:
        style = {"pass": "green", "skip": "dim", "fail": "bold red"}[step.status]
        app.renderer.message(f"{step.status} {host} {step.name}: {step.detail}", style)
    with HealthRecord.open(app.state.health_db, inventory.name, inventory.health) as record:
        node = record.state(host)
    ok = all(step.status != "fail" for step in steps)
    then = f"; `clusterctl health release {host}` brings it back" if ok and node.state == "quarantined" else ""
    app.renderer.message(f"health check of {host}: {'passed' if ok else 'FAILED'} ({node.state}){then}",
                         "green" if ok else "bold red")
    return Outcome({"ok": ok, "host": host, "steps": [s.to_json() for s in steps],
                    "checks": [c.to_json() for c in checks], "nodes": [node.to_json()]})
