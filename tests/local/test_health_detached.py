"""Issue 36's passive watch of a detached run: the keeper's sampler on the node (node/node_health.py),
the supervisor keeping each node's newest sample, and the controller parsing it with the attached
watch's parsers and recording each event once (watch/detached_health.py). A real supervisor and keeper
on loopback, with a stand-in `dmesg` that shows the captured Xid 79 line
(tests/fixtures/health/fallen_off_nvsentinel_155.log) and a stand-in `nvidia-smi` printing a real
H100 read (smi_h100_580.csv)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from clusterctl_helpers import wait_until

from clusterctl.health import watch
from clusterctl.health.record import HealthRecord
from clusterctl.watch import detached_health
from clusterctl.node import node_agent, node_health
from clusterctl.run.supervision import BESIDE_AGENT
from clusterctl.state import State

from unit.test_health_detached import FIXTURES, FLEET, XID_79
from clusterctl_helpers import free_port


def _free_port() -> int:
    return free_port()  # tests/clusterctl_helpers.py: below the ephemeral range


def _stand_ins(bin_dir: Path) -> None:
    """dmesg: the captured Xid 79 line stamped with the uptime now (as the kernel stamps a line it logs
    now); nvidia-smi: the real H100 read."""
    bin_dir.mkdir()
    (bin_dir / "dmesg").write_text("#!/bin/sh\nprintf '[%12s] %s\\n' \"$(cut -d' ' -f1 /proc/uptime)\" "
                                   f"'{XID_79}'\n")
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\ncat '{FIXTURES / 'smi_h100_580.csv'}'\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)


def test_a_real_keeper_sends_its_nodes_sample_and_the_supervisor_state_makes_the_node_suspect(tmp_path):
    import time

    port, run_dir = _free_port(), tmp_path / "n1"
    run_dir.mkdir()
    for path in (Path(node_agent.__file__), Path(node_health.__file__), *BESIDE_AGENT):  # as a run ships them
        (run_dir / path.name).write_bytes(path.read_bytes())
    (run_dir / node_agent.CONFIG).write_text(json.dumps({
        "run_id": "r1", "address": "127.0.0.1", "port": port, "lease_s": 5, "lost_after_s": 15,
        "key": node_agent.keeper_key("k" * 64, "n1"), "supervisor_key": "k" * 64,
        "hosts": ["n1"], "host": "n1", "since": time.time() - 5}))
    _stand_ins(tmp_path / "bin")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    procs = [subprocess.Popen([sys.executable, str(run_dir / "node_agent.py"), role, str(run_dir)], env=env)
             for role in ("supervise", "keep")]
    try:
        state_path = run_dir / node_agent.STATE

        def sampled():
            try:
                state = json.loads(state_path.read_text())
            except (OSError, ValueError):
                return None
            return state if (state["nodes"]["n1"].get("health") or {}).get("kernel") else None

        state = wait_until(sampled, 30, interval=0.2, what="the keeper's first health sample")
        (run_dir / "agent.exit").write_text("0\n")
        for proc in procs:
            proc.wait(timeout=60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    store = State(tmp_path / "state")
    assert detached_health.record_samples(store, FLEET, "r1", state, ["n1"]) is None
    with HealthRecord.open(store.health_db, "fleet") as record:
        node = record.state("n1")
    # the job's side alone (issue 47): suspect, with the Xid as its reason, until a second source sees it
    assert node.state == "suspect" and node.verdict.reason.startswith("xid_fatal"), node
