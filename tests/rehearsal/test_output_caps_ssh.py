"""Node output held by the controller is bounded over SSH too (issue 47, M2): a rehearsal node whose command
prints 1 GiB through paramiko's channel costs the controller a bounded memory; the excess is dropped and
named (host, command, bytes). The `connection: local` twin is tests/local/test_output_caps.py."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from clusterctl.models import MAX_OUTPUT
from clusterctl_helpers import Cli

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

PRINTED = 1 << 30
BOUND_MB = 500  # generous: the cap is 32 MiB a stream; before the cap, 1 GiB printed cost over 2 GB


def test_a_node_printing_a_gibibyte_over_ssh_costs_the_controller_a_bounded_memory(sandbox, tmp_path):
    cli = Cli(tmp_path / "state")
    probe = ("import resource, subprocess, sys, json; "
             "done = subprocess.run(sys.argv[1:], capture_output=True); "
             "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024; "
             "sys.stdout.write(json.dumps({'code': done.returncode, 'peak': peak, "
             "'out': done.stdout[-4000:].decode('utf-8', 'replace')}))")
    argv = [sys.executable, "-m", "clusterctl", "exec", "-i", str(sandbox.inventory_path), "--limit", "node1", "--json",
            "--", "sh", "-c", f"head -c {PRINTED} /dev/zero | tr '\\0' a"]
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=540,
                          env=cli.env, cwd=tmp_path)
    report = json.loads(done.stdout)
    assert report["peak"] < BOUND_MB, report
    assert "on node1 passed its cap of" in report["out"], report["out"][-600:]
    assert f"{PRINTED - MAX_OUTPUT} more bytes were dropped" in report["out"], report["out"][-600:]
