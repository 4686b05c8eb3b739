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

import pytest

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


def _until_waits(sampler):
    """Until the keeper's first flight-recorder round is in its beat's summary (20 s at most)."""
    deadline = time.monotonic() + 20
    while "waits" not in sampler.summary() and time.monotonic() < deadline:
        time.sleep(0.1)


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
        _until_waits(sampler)
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


@pytest.mark.parametrize("slowing", [False, True], ids=["tenants", "tenants-and-throttle"])
def test_a_rounds_gpu_reading_reaches_the_supervisor_with_the_neighbours_pid(tmp_path, monkeypatch, slowing):
    """Who runs on the rank's GPU (collective_waits.gpu_tenants), end to end on this machine: the keeper's round
    (node_stragglers.Sampler._waits_loop) reads it with the CPU time and keeps it in the run dir, and its beat
    carries it as the supervisor reads it (the verdict on such figures: tests/unit/test_gpu_tenants.py).
    nvidia-smi is not here: `_pmon` gives the real pmon capture of 2 x H200
    (tests/fixtures/tools/nvidia_smi/pmon_h200x2_neighbour.txt), rank 1's pid 2168 put as this run's spinning rank's.
    `slowing`: the run dir's metrics.jsonl also says that GPU slows its own clocks (collective_waits.gpus_slowing):
    the real line of 4 x H100 under matmuls (tests/fixtures/tools/metrics/, GPU 2 in sw_thermal_slowdown), dated
    now and its GPUs 1 and 2 swapped so that the slowed one is the GPU pmon puts the rank on; the beat carries
    its throttle bits too."""
    import json

    from clusterctl.node import node_metrics, node_stragglers, straggler_verdict, waits_verdict

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "tools"
    capture = (fixtures / "nvidia_smi" / "pmon_h200x2_neighbour.txt").read_text()
    monkeypatch.setattr(waits_verdict, "WAITS_FIRST_AFTER_S", 0.2)
    monkeypatch.setattr(straggler_verdict, "FIRST_AFTER_S", 3600.0)  # its py-spy samples: not in this test
    run, reader = _run_dir(tmp_path)
    if slowing:
        line = json.loads((fixtures / "metrics" / "sampler_h100x4_load.jsonl").read_text().splitlines()[-1])
        for gpu in line["gpus"]:
            gpu["index"] = {1: 2, 2: 1}.get(gpu["index"], gpu["index"])
        (run / node_metrics.FILE).write_text(json.dumps({**line, "t": time.time()}) + "\n")
    child = subprocess.Popen([sys.executable, "-c", SPIN], env={**os.environ, **MARKER, "RANK": "0"})
    monkeypatch.setattr(cw, "_pmon", lambda: capture.replace(" 2168 ", f" {child.pid} "))
    sampler = node_stragglers.Sampler(str(run), marker=[f"{k}={v}" for k, v in MARKER.items()])
    expected = [0.66, 0.33, 2357] + ([0x20] if slowing else [])
    try:
        _until_waits(sampler)
        [[rank, *figures]] = sampler.summary()["waits"]["ranks"]
        assert rank == 0 and figures[5:] == expected, figures
        assert (run / cw.PMON_FILE).is_file()  # kept for the next round
        watch = straggler_verdict.Watch()
        watch.heard("h", sampler.summary())
        assert list(watch.waits["h"][1][0][5:]) == expected, watch.waits
    finally:
        sampler.close()
        os.close(reader)
        child.kill()
        child.wait()


def test_the_attached_watchs_round_runs_as_shipped_and_says_the_gpu_slowing_itself(tmp_path):
    """The attached watch's `collective-waits` (plan/node_files.argv: `python -I -S -c`, run_files.py with the files
    it imports beside it) run as a process, as a node runs it: every file it needs travels in the command (a missing
    one would end the round with an ImportError), and its line carries the rank's CPU, GPU tenants and the
    throttle bits of that GPU. The kept pmon rows put this run's spinning rank on GPU 2, which the real metrics
    line of 4 x H100 (tests/fixtures/tools/metrics/) has in sw_thermal_slowdown, dated now."""
    import json

    from clusterctl.node import node_metrics
    from clusterctl.plan import node_files
    from clusterctl.watch.collective_watch import parse_round

    line = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "tools" / "metrics" /
                       "sampler_h100x4_load.jsonl").read_text().splitlines()[-1])
    run, reader = _run_dir(tmp_path)
    node = tmp_path / "out" / "logs" / "r-waits-cpu" / "h"
    node.parent.mkdir(parents=True)
    run.rename(node)
    child = subprocess.Popen([sys.executable, "-c", SPIN], env={**os.environ, **MARKER, "RANK": "0"})
    try:
        (node / node_metrics.FILE).write_text(json.dumps({**line, "t": time.time()}) + "\n")
        (node / cw.PMON_FILE).write_text(json.dumps({"at": time.time(), "rows": [[2, child.pid, 0.9]]}))
        time.sleep(0.5)
        argv = node_files.argv(sys.executable, "collective-waits", str(node), *(f"{k}={v}" for k, v in MARKER.items()))
        done = subprocess.run(argv, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
        [figures] = parse_round(done.stdout.decode())
        assert figures["gpu_own"] == 0.9 and figures["gpu_slowing"] == 0x20 and figures["cpu_s"] >= 0, figures
    finally:
        os.close(reader)
        child.kill()
        child.wait()
