"""A rank slowed on its GPU alone (issue 49): a GPU that slows its own clocks (heat, a power brake, its hardware
slowdown) with no other process on it. Its rank spins its CPU as its peers do, so since the shares of a fast job
must also be told apart by the CPU (session 24) only the GPU's own word names it: the protective throttle reasons
the metrics sampler writes into the run dir's metrics.jsonl, read by each flight-recorder round
(collective_waits.gpus_slowing) and carried with the rank's figures to the verdict, attached and detached.

The metrics line is real (tests/fixtures/tools/SOURCES.md, `metrics/sampler_h100x4_load.jsonl`: 4 x H100 under
matmuls, GPU 2 in sw_thermal_slowdown, the others at their power cap, which is a setting, not a slowdown). The
rounds are real too (tests/fixtures/flight_recorder/rounds/: the DDP tutorial left alone 600 s on 2 x H200, both
ranks on alike CPU): no lent GPU could be made to throttle, so the throttle bits are added to those rounds here."""
from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, strategies as st

from clusterctl.node import node_metrics, straggler_verdict, waits_verdict as verdict
from clusterctl.node.collective_waits import METRICS_FRESH_S, gpus_slowing, pmon_rows, rank_gpu, slowing_of
from clusterctl.node.safe_files import Dir
from clusterctl.watch.collective_watch import parse_round

FIXTURES = Path(__file__).parents[1] / "fixtures"
LOADED = (FIXTURES / "tools" / "metrics" / "sampler_h100x4_load.jsonl").read_text()
AT = json.loads(LOADED.splitlines()[-1])["t"]
SW_THERMAL = 0x20


def test_the_samplers_latest_line_gives_each_gpu_slowing_itself_down_and_not_a_power_cap():
    assert slowing_of(LOADED, AT + 5) == {2: SW_THERMAL}
    assert slowing_of(LOADED, AT + METRICS_FRESH_S) == {}  # stale: the sampler stopped, the GPU may have cooled
    assert slowing_of(LOADED.replace("sw_thermal_slowdown", "sw_power_cap"), AT + 5) == {}
    cut = LOADED[len(LOADED) // 2:] + LOADED + '{"t": 17'  # a tail read mid-line, a line being written
    assert slowing_of(cut, AT + 5) == {2: SW_THERMAL}
    assert node_metrics.PROTECTIVE_MASK == 0xe8


def test_the_run_dirs_metrics_file_is_read_by_its_tail(tmp_path):
    older = LOADED.replace("sw_thermal_slowdown", "sw_power_cap")
    (tmp_path / node_metrics.FILE).write_text(older * 200 + LOADED.splitlines()[-1] + "\n")
    with Dir.open(str(tmp_path)) as d:
        assert gpus_slowing(d, now=AT + 1) == {2: SW_THERMAL}
    (tmp_path / node_metrics.FILE).unlink()
    with Dir.open(str(tmp_path)) as d:
        assert gpus_slowing(d, now=AT + 1) == {}  # metrics off (job.metrics_every 0), or no sample yet


@given(st.text(max_size=600), st.floats(allow_nan=False, allow_infinity=False))
def test_any_tail_reads_as_gpu_indexes_and_protective_bits_never_an_error(text, now):
    for gpu, bits in slowing_of(text, now).items():
        assert isinstance(gpu, int) and bits and not bits & ~node_metrics.PROTECTIVE_MASK


def test_a_ranks_gpu_is_the_one_pmon_shows_it_on_most():
    rows = pmon_rows((FIXTURES / "tools" / "nvidia_smi" / "pmon_h200x2_neighbour.txt").read_text())
    assert (rank_gpu(2167, rows), rank_gpu(2168, rows), rank_gpu(4242, rows)) == (0, 1, None)


def _rounds(slowing=0, peer=0):
    """The DDP tutorial's real rounds left alone (600 s), from the round before the 29th to the 34th: at the 29th
    and the 34th the shares single out g1 rank 1 (its CPU alike its peer's); `slowing` its GPU's throttle bits,
    `peer` its peer's."""
    lines = (FIXTURES / "flight_recorder" / "rounds" / "ddp_tutorial_h200x2_left_alone_600s.jsonl").read_text()
    rounds = [{(key.split()[0], int(key.split()[1][1:])): tuple(m) for key, m in json.loads(line)["measured"].items()}
              for line in lines.splitlines()]
    picked = [rounds[28], rounds[29], rounds[34]]
    bits = {("g1", 1): slowing, ("g0", 0): peer}
    return [{key: m + ((bits[key],) if bits[key] else ()) for key, m in r.items()} for r in picked]


def _judged(rounds):
    judged = verdict.WaitsRounds()
    return [judged.add(measured) for measured in rounds]


def test_shares_on_alike_cpu_name_the_rank_whose_gpu_slows_itself_and_nobody_without_it():
    assert verdict.waits_named(_judged(_rounds())) is None  # alike CPU, nothing on the GPU: the window's noise
    named = verdict.waits_named(_judged(_rounds(SW_THERMAL)))
    assert (named.host, named.rank, named.slowing, named.cpu) == ("g1", 1, SW_THERMAL, None)
    # every GPU hot alike (a hall's cooling): it slows every rank and singles out none
    assert verdict.waits_named(_judged(_rounds(SW_THERMAL, peer=SW_THERMAL))) is None
    assert verdict.waits_evidence(named).endswith(
        "(flight recorder); its GPU slows its own clocks (clocks_throttle_reasons 0x20: heat, a power brake or the "
        "hardware's slowdown) (nvidia-smi)")


def test_the_nodes_reading_of_it_is_parsed_carried_and_a_bad_one_dropped():
    base = ('{"rank": 1, "wait_s": 0.1, "window_s": 5.0, "collectives": 2000, "cpu_s": 61.5, "at": 1796.5, '
            '"gpu_own": 0.9, "gpu_foreign": 0.0, "gpu_neighbour": 0')
    lines = parse_round(f'{base}, "gpu_slowing": 32}}\n{base}, "gpu_slowing": true}}\n{base}, "gpu_slowing": -8}}\n')
    assert verdict.measured_figures(lines[0]) == (0.1, 5.0, 2000, 61.5, 1796.5, 0.9, 0.0, 0, 32)
    assert [verdict.measured_figures(line)[8:] for line in lines[1:]] == [(), ()]
    assert verdict.read_upto([1, 0.1, 5.0, 2000, 61.5, 1796.5, 0.9, 0.0, 0, 32]) == 10
    assert verdict.read_upto([1, 0.1, 5.0, 2000, 61.5, 1796.5, 0.9, 0.0, 0, 1 << 20]) == 9


def test_detached_the_supervisor_reads_the_keepers_throttle_reading_too():
    watch = straggler_verdict.Watch()
    for k, measured in enumerate(_rounds(SW_THERMAL)):
        at = 1000.0 + k * verdict.WAITS_ROUND_S
        for (host, rank), m in measured.items():
            watch.heard(host, {"samples": [], "waits": {"at": at, "ranks": [[rank, *m]]}})
        watch.judge(at)
    [named] = watch.found()
    assert (named["host"], named["rank"]) == ("g1", 1) and "clocks_throttle_reasons 0x20" in named["evidence"]
