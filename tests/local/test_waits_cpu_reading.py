"""A flight-recorder round on this machine reads each measured rank's CPU time from /proc (issue 49:
node/collective_waits.node_round with the run's marker, rank_procs.find_ranks and cpu_seconds): a spinning
"rank" of the run is found by its marker and RANK, another run's process with the same RANK is not."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from clusterctl.node import collective_waits as cw
from clusterctl.node.rank_procs import cpu_seconds
from clusterctl.node.safe_files import Dir

HELD = Path(__file__).resolve().parents[1] / "fixtures" / "flight_recorder" / "nccl_h200_ddp_tutorial_rank1_held"
MARKER = {"CLUSTERCTL_CLUSTER": "c", "CLUSTERCTL_HOST": "h", "CLUSTERCTL_RUN_ID": "r-waits-cpu"}
SPIN = "while True:\n    sum(range(1000))\n"


def _run_dir(tmp_path):
    """A node's run dir holding rank 0's dump, written mid-run as a round's is, and its FIFO (opened: the reader
    to close)."""
    run = tmp_path / "run"
    run.mkdir()
    dump = run / "nccl_trace_rank_0"
    shutil.copy(HELD / "nccl_trace_rank_0", dump)
    newest = max(e["time_created_ns"] for e in cw.load(dump.read_bytes())["entries"]) / 1e9
    os.utime(dump, (newest + 0.5, newest + 0.5))
    os.mkfifo(run / "fr_pipe_0.pipe")
    return run, os.open(run / "fr_pipe_0.pipe", os.O_RDONLY | os.O_NONBLOCK)


def test_a_round_with_the_marker_reads_the_ranks_cpu_time(tmp_path):
    run, reader = _run_dir(tmp_path)
    children = [subprocess.Popen([sys.executable, "-c", SPIN if spin else "import time; time.sleep(60)"],
                                 env={**os.environ, **MARKER, "RANK": "0", **extra})
                for spin, extra in ((True, {}), (False, {"CLUSTERCTL_RUN_ID": "another"}))]
    try:
        time.sleep(1.0)
        with Dir.open(str(run)) as d:
            [line] = cw.node_round(d, marker=[f"{k}={v}" for k, v in MARKER.items()])
        assert "wait_s" in line and 0.2 < line["cpu_s"] < 30 and abs(line["at"] - time.time()) < 5, line
        assert cpu_seconds(children[1].pid) < 0.5 < cpu_seconds(children[0].pid)  # the spinning one was read
        assert cpu_seconds(2 ** 22 + 7) is None  # no such process
    finally:
        os.close(reader)
        for child in children:
            child.kill()
            child.wait()


def test_the_keepers_rounds_carry_each_ranks_cpu_to_the_supervisor(tmp_path, monkeypatch):
    """Detached: the keeper's own flight-recorder rounds (node_stragglers.Sampler._waits_loop) read the same CPU
    time, and its beat's `waits` carries it as the supervisor reads it (straggler_verdict.Watch)."""
    from clusterctl.node import node_stragglers, straggler_verdict as verdict, waits_verdict

    monkeypatch.setattr(waits_verdict, "WAITS_FIRST_AFTER_S", 0.2)
    monkeypatch.setattr(verdict, "FIRST_AFTER_S", 3600.0)  # its py-spy samples: not in this test
    run, reader = _run_dir(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", SPIN], env={**os.environ, **MARKER, "RANK": "0"})
    sampler = node_stragglers.Sampler(str(run), marker=[f"{k}={v}" for k, v in MARKER.items()])
    try:
        deadline = time.monotonic() + 20
        while "waits" not in sampler.summary() and time.monotonic() < deadline:
            time.sleep(0.1)
        waits = sampler.summary()["waits"]
        [[rank, wait_s, window_s, count, cpu_s, at]] = waits["ranks"]
        assert rank == 0 and count > 1900 and cpu_s >= 0 and abs(at - time.time()) < 30, waits
        watch = verdict.Watch()
        watch.heard("h", sampler.summary())
        assert len(watch.waits["h"][1][0]) == 5, watch.waits  # wait_s, window_s, collectives, cpu_s, at
    finally:
        sampler.close()
        os.close(reader)
        child.kill()
        child.wait()


def test_a_rounds_gpu_reading_reaches_the_supervisor_with_the_neighbours_pid(tmp_path, monkeypatch):
    """Who runs on the rank's GPU (collective_waits.gpu_tenants), end to end on this machine: the keeper's round
    (node_stragglers.Sampler._waits_loop) reads it with the CPU time and keeps it in the run dir, and its beat
    carries it as the supervisor reads it (the verdict on such figures: tests/unit/test_gpu_tenants.py).
    nvidia-smi is not here: `_pmon` gives the real pmon capture of 2 x H200
    (tests/fixtures/tools/nvidia_smi/pmon_h200x2_neighbour.txt), rank 1's pid 2168 put as this run's spinning rank's."""
    from clusterctl.node import node_stragglers, straggler_verdict, waits_verdict

    capture = (Path(__file__).resolve().parents[1] / "fixtures" / "tools" / "nvidia_smi" /
               "pmon_h200x2_neighbour.txt").read_text()
    monkeypatch.setattr(waits_verdict, "WAITS_FIRST_AFTER_S", 0.2)
    monkeypatch.setattr(straggler_verdict, "FIRST_AFTER_S", 3600.0)  # its py-spy samples: not in this test
    run, reader = _run_dir(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", SPIN], env={**os.environ, **MARKER, "RANK": "0"})
    monkeypatch.setattr(cw, "_pmon", lambda: capture.replace(" 2168 ", f" {child.pid} "))
    sampler = node_stragglers.Sampler(str(run), marker=[f"{k}={v}" for k, v in MARKER.items()])
    try:
        deadline = time.monotonic() + 20
        while "waits" not in sampler.summary() and time.monotonic() < deadline:
            time.sleep(0.1)
        [[rank, *figures]] = sampler.summary()["waits"]["ranks"]
        assert rank == 0 and figures[-3:] == [0.66, 0.33, 2357], figures
        assert (run / cw.PMON_FILE).is_file()  # kept for the next round
        watch = straggler_verdict.Watch()
        watch.heard("h", sampler.summary())
        assert watch.waits["h"][1][0][-3:] == (0.66, 0.33, 2357.0), watch.waits
    finally:
        sampler.close()
        os.close(reader)
        child.kill()
        child.wait()
