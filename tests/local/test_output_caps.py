"""Node output held by the controller is bounded (issue 47, M2): a `connection: local` host whose command
prints 2 GiB, and a sparse 1 GiB metrics.jsonl under `top`'s probe, cost the controller a bounded memory;
the excess is dropped and named (what, where, how much)."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from clusterctl.models import MAX_OUTPUT

from unit.test_cli import local_inventory

REPO = Path(__file__).resolve().parents[2]
BOUND_MB = 600  # generous: the cap is 32 MiB a stream; before, 2 GiB printed cost over 4 GB


def _peak_mb_of(argv: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    """argv run as a child of a fresh python, with that child's peak RSS (the only child it waits for)."""
    probe = ("import resource, subprocess, sys, json; "
             "done = subprocess.run(sys.argv[1:], capture_output=True); "
             "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024; "
             "sys.stdout.write(json.dumps({'code': done.returncode, 'peak': peak, "
             "'out': done.stdout[-4000:].decode('utf-8', 'replace'), 'err': done.stderr[-2000:].decode('utf-8', 'replace')}))")
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, cwd=cwd, timeout=540,
                          env={**os.environ, "PYTHONPATH": str(REPO), "CLUSTERCTL_STATE": str(cwd / "state")})
    report = json.loads(done.stdout)
    return report, report["peak"]


@pytest.mark.slow
def test_a_command_printing_two_gibibytes_costs_the_controller_a_bounded_memory_and_says_what_was_dropped(
        tmp_path, reliability):
    row = reliability("a node command printing 2 GiB on stdout (`connection: local`, `clusterctl exec --json`)",
                      f"the controller keeps {MAX_OUTPUT >> 20} MiB of it, names the host, the command and the bytes "
                      f"dropped; its peak RSS stays under {BOUND_MB} MB", section="Hostile input")
    inventory = local_inventory(tmp_path)
    report, peak = _peak_mb_of([sys.executable, "-m", "clusterctl", "exec", "-i", str(inventory), "--json", "--",
                                "head -c 2147483648 /dev/zero | tr '\\0' a"], tmp_path)
    assert peak < BOUND_MB, (peak, report["err"])
    assert "passed its cap of" in report["out"] and "on here" in report["out"], report["out"][-600:]
    assert f"{(2 << 30) - MAX_OUTPUT} more bytes were dropped" in report["out"], report["out"][-600:]
    row.observe(f"peak RSS {peak:.0f} MB; the document ends: {report['out'][-220:]!r}")


def test_the_transport_keeps_the_cap_and_names_the_rest_with_a_split_character_decoded_whole():
    from clusterctl.inventory.load import parse_inventory
    from clusterctl.models import Command
    from clusterctl.transport.local import LocalTransport

    host = parse_inventory("name: t\nhosts:\n  - {name: here, connection: local}\n").hosts[0]
    transport = LocalTransport(host)
    result = transport.run(Command(("sh", "-c", "printf 'é%.0s' $(seq 1 3000); echo oops >&2"), max_output=1000))
    kept, _, marker = result.stdout.partition("\nclusterctl: ")
    assert kept == "é" * 500 and "the stdout of `sh -c" in marker and "on here passed its cap of 1000 bytes" in marker
    assert "5000 more bytes were dropped" in marker and result.stderr == "oops\n"
    lines = []
    transport.run(Command(("sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x")), on_line=lambda s, line: lines.append(line))
    assert max(map(len, lines)) <= 1 << 20 and sum(map(len, lines)) == 3000000


@pytest.mark.slow
def test_top_reads_only_the_end_of_a_sparse_one_gibibyte_metrics_file(tmp_path):
    from clusterctl.inventory.load import parse_inventory
    from clusterctl.observe.top import parse_probe, probe_command
    from clusterctl.transport.local import LocalTransport

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(run_dir / "metrics.jsonl", "wb") as f:  # sparse: no disk used, one line of 1 GiB of zeros
        f.truncate(1 << 30)
    inventory = parse_inventory(f"name: t\nhosts:\n  - {{name: here, connection: local}}\njob:\n  command: [x.py]\n"
                                f"  outputs: {tmp_path}\n")
    transport = LocalTransport(inventory.hosts[0])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = transport.run(probe_command(inventory, str(run_dir)))
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert len(result.stdout) < 70000 and grown_mb < 100, (len(result.stdout), grown_mb)
    assert parse_probe("here", result.stdout).sample is None
    with open(run_dir / "metrics.jsonl", "ab") as f:  # a sample after it: still read
        f.write(b'\n{"t": 5.0, "cpu_pct": 12.5}\n')
    assert parse_probe("here", transport.run(probe_command(inventory, str(run_dir))).stdout).sample["cpu_pct"] == 12.5
