"""A saturated job slowed on one rank's GPU (issue 49): who runs on each rank's GPU, read by each flight-recorder
round (node/collective_waits.py pmon_rows, gpu_tenants) and judged where the shares and the CPU cannot
(waits_verdict.judge_gpu), attached and detached.

The pmon outputs are real (tests/fixtures/tools/SOURCES.md): 2 x H200, pytorch/examples' FSDP2 example made
GPU-bound, rank 0 pid 2167 on GPU 0 and rank 1 pid 2168 on GPU 1, and from 26 s another process's bf16 matmuls on
GPU 1 (docs/gpu-validation/watch49/gpu_neighbour.py, pid 2357). The rounds' shares are the saturated ones of
session 21's FSDP2 runs (the rank behind 2%, its peer 100%), where neither the shares nor the CPU name anyone."""
from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, strategies as st

from clusterctl.node import straggler_verdict
from clusterctl.node import waits_verdict as verdict
from clusterctl.node.collective_waits import gpu_tenants, pmon_rows
from clusterctl.watch.collective_watch import parse_round

PMON = Path(__file__).parents[1] / "fixtures" / "tools" / "nvidia_smi"
RANKS = {2167, 2168}
STEP = verdict.WAITS_ROUND_S


def _pmon(name):
    return (PMON / f"pmon_h200x2_{name}.txt").read_text()


def test_pmon_rows_read_the_real_outputs_by_their_header():
    assert pmon_rows(_pmon("idle")) == []
    assert pmon_rows(_pmon("ranks")) == [(0, 2167, 0.99), (1, 2168, 0.99)]
    assert pmon_rows(_pmon("neighbour")) == [(0, 2167, 0.99), (1, 2168, 0.66), (1, 2357, 0.33)]
    assert pmon_rows(_pmon("neighbour_alone")) == [(0, 2167, 0.99), (1, 2168, 0.0), (1, 2357, 0.98)]


def test_an_older_driver_without_the_jpg_and_ofa_columns_reads_the_same():
    older = ("# gpu        pid  type    sm   mem   enc   dec   command\n"
             "# Idx          #   C/G     %     %     %     %   name\n"
             "    0       2167     C    99     5     -     -   python3\n")
    assert pmon_rows(older) == [(0, 2167, 0.99)]


@given(st.text(max_size=400))
def test_pmon_rows_never_raise_and_keep_shares_in_range(text):
    for gpu, pid, sm in pmon_rows("# gpu pid type sm command\n" + text):
        assert gpu >= 0 and pid >= 0 and 0.0 <= sm <= 1.0


def test_each_ranks_own_share_and_the_processes_outside_the_job_on_its_gpu():
    assert gpu_tenants(RANKS, pmon_rows(_pmon("ranks"))) == {2167: (0.99, 0.0, 0), 2168: (0.99, 0.0, 0)}
    assert gpu_tenants(RANKS, pmon_rows(_pmon("neighbour"))) == {2167: (0.99, 0.0, 0), 2168: (0.66, 0.33, 2357)}
    assert gpu_tenants(RANKS, pmon_rows(_pmon("neighbour_alone")))[2168] == (0.0, 0.98, 2357)
    assert gpu_tenants(RANKS, pmon_rows("")) == {}  # nvidia-smi absent, hung or refused


def _round(k, tenants, window_s=5.0):
    """Round k: saturated shares (rank 1 behind), both ranks 1.01 cores (the CPU names nobody), and `tenants`'
    GPU reading {pid: (own, foreign, neighbour)} for rank 0 (pid 2167) and rank 1 (pid 2168)."""
    at = 1000.0 + k * STEP
    return {("g0", rank): ((0.02 if rank == 1 else 1.0) * window_s, window_s, 2000, round(1.01 * k * STEP, 2), at,
                           *tenants[pid]) for rank, pid in ((0, 2167), (1, 2168))}


def _judged(rounds):
    judged = verdict.WaitsRounds()
    return [judged.add(measured) for measured in rounds]


def test_a_rank_whose_gpu_another_process_takes_is_named_with_that_process():
    shared = gpu_tenants(RANKS, pmon_rows(_pmon("neighbour")))
    verdicts = _judged([_round(k, shared) for k in range(3)])
    named = verdict.waits_named(verdicts)
    assert (named.host, named.rank) == ("g0", 1) and named.gpu == (0.66, 0.99, 0.33, 2357)
    assert verdict.waits_evidence(named) == ("its GPU ran it 66% of the time, its peers' 99%: processes outside the "
                                             "job took 33% of that GPU (the busiest: pid 2357) (nvidia-smi pmon)")
    assert round(named.ratio, 2) == 1.5


def test_the_same_job_alone_on_its_gpus_names_nobody():
    alone = gpu_tenants(RANKS, pmon_rows(_pmon("ranks")))
    assert _judged([_round(k, alone) for k in range(6)]) == [None] * 6


def test_a_neighbour_that_does_not_slow_the_rank_or_peers_that_idle_name_nobody():
    light = {2167: (0.99, 0.0, 0), 2168: (0.95, 0.04, 2357)}  # a monitoring process's blips
    idle_peers = {2167: (0.30, 0.0, 0), 2168: (0.10, 0.60, 2357)}  # the GPUs are not what sets the pace
    unslowed = {2167: (0.99, 0.0, 0), 2168: (0.90, 0.30, 2357)}  # 0.90 > GPU_DROP x 0.99
    for tenants in (light, idle_peers, unslowed):
        assert _judged([_round(k, tenants) for k in range(4)]) == [None] * 4


def test_the_nodes_gpu_reading_is_parsed_and_a_bad_one_dropped():
    lines = parse_round(
        '{"rank": 1, "wait_s": 0.1, "window_s": 5.0, "collectives": 2000, "cpu_s": 61.5, "at": 1796.5, '
        '"gpu_own": 0.66, "gpu_foreign": 0.33, "gpu_neighbour": 2357}\n'
        '{"rank": 2, "wait_s": 0.1, "window_s": 5.0, "collectives": 2000, "cpu_s": 61.5, "at": 1796.5, '
        '"gpu_own": 1.7, "gpu_foreign": 0.33, "gpu_neighbour": 2357}\n'
        '{"rank": 3, "wait_s": 0.1, "window_s": 5.0, "gpu_own": 0.5, "gpu_foreign": 0.3, "gpu_neighbour": 9}\n')
    assert verdict.measured_figures(lines[0]) == (0.1, 5.0, 2000, 61.5, 1796.5, 0.66, 0.33, 2357)
    assert "gpu_own" not in lines[1] and "gpu_own" not in lines[2]  # out of range; no CPU reading to carry it


def test_detached_the_supervisor_reads_the_keepers_gpu_reading_too():
    watch = straggler_verdict.Watch()
    shared = gpu_tenants(RANKS, pmon_rows(_pmon("neighbour")))
    for k in range(3):
        at = 1000.0 + k * STEP
        for rank, pid in ((0, 2167), (1, 2168)):
            wait = (0.02 if rank == 1 else 1.0) * 5.0
            watch.heard(f"g{rank}", {"samples": [], "waits": {"at": at, "ranks": [
                [rank, wait, 5.0, 2000, round(1.01 * k * STEP, 2), at, *shared[pid]]]}})
        watch.judge(at)
    [named] = watch.found()
    assert (named["host"], named["rank"]) == ("g1", 1) and "(the busiest: pid 2357)" in named["evidence"]


def test_a_rank_the_shares_name_has_the_other_tenant_on_its_gpu_said_with_it():
    """2 x H200, the GPU-bound FSDP2 job: the shares named the rank whose GPU was shared (its collectives waited
    8%, its peer's 67%) before the GPU rule could; the tenant is the cause, so the evidence says it."""
    shared = gpu_tenants(RANKS, pmon_rows(_pmon("neighbour")))
    rounds = [{("g0", rank): ((0.08 if rank == 1 else 0.67) * 21.0, 21.0, 900, round(1.01 * k * STEP, 2),
                              1000.0 + k * STEP, *shared[pid]) for rank, pid in ((0, 2167), (1, 2168))}
              for k in range(2)]
    named = verdict.waits_named(_judged(rounds))
    assert named.gpu is None and named.neighbour == (0.33, 2357)
    assert verdict.waits_evidence(named) == (
        "its collectives waited 8% of its last 21 s on the GPU, the other ranks' 67% (flight recorder); processes "
        "outside the job took 33% of its GPU (the busiest: pid 2357) (nvidia-smi pmon)")


def test_a_pmon_reading_is_kept_30_s_in_the_run_dir_and_a_forged_one_is_read_afresh(tmp_path):
    """One read is ~0.1 s of a node's CPU: two rounds (15 s apart) share one (collective_waits.PMON_KEPT_S)."""
    from clusterctl.node.collective_waits import PMON_FILE, PMON_KEPT_S, kept_pmon_rows
    from clusterctl.node.safe_files import Dir

    reads = []

    def read():
        reads.append(1)
        return _pmon("neighbour")

    with Dir.open(tmp_path) as d:
        first = kept_pmon_rows(d, now=1000.0, read=read)
        assert first == pmon_rows(_pmon("neighbour")) and len(reads) == 1
        assert kept_pmon_rows(d, now=1000.0 + PMON_KEPT_S - 1, read=read) == first and len(reads) == 1
        assert kept_pmon_rows(d, now=1000.0 + PMON_KEPT_S, read=read) == first and len(reads) == 2
        (tmp_path / PMON_FILE).write_text(json.dumps({"at": 1000.0 + PMON_KEPT_S, "rows": [[1, 2168, "all of it"]]}))
        assert kept_pmon_rows(d, now=1001.0 + PMON_KEPT_S, read=read) == first and len(reads) == 3
        (tmp_path / PMON_FILE).write_text("not json")
        assert kept_pmon_rows(d, now=1002.0 + PMON_KEPT_S, read=lambda: "") == []  # nvidia-smi gone meanwhile: no rows
