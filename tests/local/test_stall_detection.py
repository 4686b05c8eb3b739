"""Stall detection in `run` and `clusterctl stacks`: the inventory key and the option; the watch's
decisions on the node script's real output; and for real, with 2 torchrun gloo ranks on this machine
through a `connection: local` inventory (tests/fixtures/jobs/stall.py): a rank sleeping in a named
function is named and the run stopped; a silent job that computes is left alone; Ctrl-C while the
stacks are taken stops everything; `clusterctl stacks` on a run that goes on."""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clusterctl_helpers import FIXTURE_JOBS, processes_with, wait_until
from json_documents import check_command_output

from unit.test_stall_detection import FIXTURES, watch
from local.test_logs_stop import _clusterctl, _env
from clusterctl_helpers import free_port


# --------------------------------------------------------------------------- for real: torchrun on this machine


def _free_port() -> int:
    return free_port()  # tests/clusterctl_helpers.py: below the ephemeral range


def _inventory(tmp_path: Path, *args: str, name: str = "stall") -> Path:
    path = tmp_path / "inventory.yaml"
    quoted = ", ".join(json.dumps(a) for a in args)
    path.write_text(f"""name: {name}-{os.getpid()}
hosts:
  - {{name: local, connection: local}}
rendezvous: {{port: {_free_port()}}}
job:
  command: [{FIXTURE_JOBS / 'stall.py'}]
  args: [{quoted}]
  nproc_per_node: 2
  outputs: {tmp_path / 'outputs'}
checks: {{ib: off}}
""")
    (tmp_path / "prompt.txt").write_text("a cat\n")
    return path


def _left_over(tmp_path: Path, inventory: Path) -> list:
    name = inventory.read_text().split("\n", 1)[0].split(": ", 1)[1]
    return [p for text in (str(tmp_path / "outputs"), name) for p in processes_with(text) if "pytest" not in p[1]]


def _stack_dirs() -> set:
    return {p for base in ("/tmp", "/var/tmp", "/dev/shm") for p in Path(base).glob("clusterctl-stacks.*")}


def _needs_torch():
    pytest.importorskip("torch")
    pytest.importorskip("clusterctl.watch.sampler").pyspy_binary() or pytest.skip("no py-spy installed")


@pytest.mark.slow
@pytest.mark.heavy
def test_a_rank_sleeping_before_the_all_reduce_is_named_with_its_function_and_the_run_stops(tmp_path):
    _needs_torch()
    before = _stack_dirs()
    inventory = _inventory(tmp_path, "--mode", "hang", "--rank", "1", "--seconds", "600")
    started = time.monotonic()
    proc = _clusterctl(tmp_path, "run", "-i", str(inventory), "--stall-timeout", "10", str(tmp_path / "prompt.txt"))
    out, err = proc.communicate(timeout=120)
    took = time.monotonic() - started
    doc = json.loads(out)
    assert proc.returncode == 1 and doc["ok"] is False, err[-3000:]
    first = doc["first_failure"]
    assert (first["host"], first["rank"]) == ("local", 1)
    finding = first["diagnosis"][0]
    assert (finding["cause"], finding["host"], finding["rank"]) == ("rank_hang", "local", 1)
    assert finding["evidence"].startswith("rank 1 on local in load_shard (stall.py:")
    assert "while 1 rank waits in all_reduce (stall.py:" in finding["evidence"]
    assert took < 60, f"took {took:.0f}s"
    saved = json.loads(Path(first["stacks"]).read_text())
    assert saved["verdict"] == "hang" and len(saved["nodes"]["local"]["samples"]) == 2
    record = json.loads((tmp_path / "state" / "runs" / doc["run_id"] / "run.json").read_text())
    assert record["first_failure"]["diagnosis"][0]["cause"] == "rank_hang" and record["state"] == "ended"
    on_node = list((tmp_path / "outputs" / "logs" / doc["run_id"] / "local").glob("stacks-*.json"))
    assert len(on_node) == 1 and json.loads(on_node[0].read_text())["first_failure"]["rank"] == 1
    assert wait_until(lambda: not _left_over(tmp_path, inventory), 15, what="no process of the run") is True
    assert _stack_dirs() <= before, "the stack script left its temporary directory"

    # what an NCCL timeout would have left beside them (real dumps of gloo ranks, tests/fixtures/flight_recorder)
    for dump in (FIXTURES / "flight_recorder" / "gloo_3ranks_rank1_absent").iterdir():
        shutil.copy(dump, on_node[0].parent / dump.name)
    collect = subprocess.run([sys.executable, "-m", "clusterctl", "collect-logs", "--json", "-i", str(inventory),
                              "--dest", str(tmp_path / "collected")], cwd=tmp_path, env=_env(tmp_path),
                             capture_output=True, text=True, timeout=120)
    collected = json.loads(collect.stdout)
    assert collect.returncode == 0, collect.stderr[-3000:]
    fetched = tmp_path / "collected" / "local" / "outputs" / "logs" / doc["run_id"] / "local"
    assert {p.name for p in fetched.iterdir()} >= {on_node[0].name, "nccl_trace_rank_0", "nccl_trace_rank_1"}
    top = collected["findings"][0]
    assert (top["cause"], top["rank"]) == ("rank_hang", 1) and top["evidence"].startswith("rank 1 on local in load_shard")
    assert "| flight recorder (" in top["evidence"]  # the dumps name the same rank: one finding quoting both


@pytest.mark.slow
@pytest.mark.heavy
def test_a_job_silent_but_computing_is_not_stopped(tmp_path):
    _needs_torch()
    inventory = _inventory(tmp_path, "--mode", "compute", "--seconds", "25")
    proc = _clusterctl(tmp_path, "run", "-i", str(inventory), "--stall-timeout", "5", str(tmp_path / "prompt.txt"),
                       json_output=False)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert err.count("taking every rank's stack") >= 2
    computing = [line for line in err.splitlines() if "the job is computing" in line]
    assert len(computing) == 1 and "busy on a CPU" in computing[0]


@pytest.mark.slow
def test_ctrl_c_while_the_stacks_are_taken_stops_everything(tmp_path):
    _needs_torch()
    before = _stack_dirs()
    inventory = _inventory(tmp_path, "--mode", "hang", "--seconds", "600", name="stall-int")
    proc = _clusterctl(tmp_path, "run", "-i", str(inventory), "--stall-timeout", "5", str(tmp_path / "prompt.txt"),
                       json_output=False)
    try:
        seen, deadline = "", time.monotonic() + 90
        while "taking every rank's stack" not in seen and time.monotonic() < deadline:
            if select.select([proc.stderr], [], [], 1.0)[0]:
                seen += proc.stderr.readline()
        assert "taking every rank's stack" in seen, seen[-2000:]
        time.sleep(0.5)  # inside the 3 s between the two samples
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (seen + err)[-3000:]
    assert "hang:" not in err  # interrupted before any verdict
    assert wait_until(lambda: not _left_over(tmp_path, inventory), 15, what="no process of the run") is True
    assert wait_until(lambda: _stack_dirs() <= before, 10, what="the stack script's temporary directory removed")


@pytest.mark.slow
def test_stacks_of_a_run_that_goes_on_are_grouped_saved_and_name_the_rank_elsewhere(tmp_path):
    _needs_torch()
    inventory = _inventory(tmp_path, "--mode", "hang", "--seconds", "600", name="stall-stacks")
    proc = _clusterctl(tmp_path, "run", "-i", str(inventory), "--stall-timeout", "0", str(tmp_path / "prompt.txt"))
    try:
        logs = tmp_path / "outputs" / "logs"
        wait_until(lambda: any("[stall rank 1] up" in p.read_text(errors="replace")
                               for p in logs.glob("*/local/agent.log")), 90, what="both ranks up")
        time.sleep(1.0)
        query = subprocess.run([sys.executable, "-m", "clusterctl", "stacks", "--json", "-i", str(inventory)],
                               cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
        doc = json.loads(query.stdout)
        assert query.returncode == 0 and doc["ok"] is True, query.stderr[-3000:]
        check_command_output("stacks", query.stdout)  # a subprocess: the suite's own check sees no document
        assert [[r["rank"] for r in g["ranks"]] for g in doc["groups"]] == [[0], [1]]
        assert doc["evidence"].startswith("rank 1 on local in load_shard (stall.py:")
        saved = json.loads(Path(doc["saved"]).read_text())
        assert saved["verdict"] == "snapshot" and Path(doc["saved"]).parent.name == "stacks"
        assert list(logs.glob(f"{doc['run_id']}/local/stacks-*.json")), "no copy in the node's run dir"
        assert proc.poll() is None, "the run must go on"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert wait_until(lambda: not _left_over(tmp_path, inventory), 15, what="no process of the run") is True
