"""Stragglers' verdict from torch's flight recorder (NCCL; issue 49): each rank's share of its own latest time that
its collectives ran on the GPU, read by node/collective_waits.py's rounds, with each rank's CPU and its GPU's
other tenants beside it. Pure: figures in, values out. The one copy, used by the controller's attached watch
(watch/collective_watch.py) and, detached, by the keepers (node_stragglers.py) and the supervisor
(straggler_verdict.Watch): the standard library only, Python 3.8+, shipped beside node_agent.py.
"""
import statistics
from collections import namedtuple

RUNS_ON_NODES = True

# collective_waits.py: each rank's share of its own latest time that its collectives ran on the GPU, i.e. waited
# for the last peer. The rank the others wait for waits least: named where the others' median waits WAIT_GAP more
# of their time and at least twice as much (a communication-bound job waits a lot everywhere, alike), and the
# next-lowest rank is not as low (two ranks alike low: not one rank's doing). 2 x H200, the DDP tutorial: the rank
# held 60% 10%, its peer 66%.
WAIT_GAP, WAIT_RATIO = 0.15, 0.5
# (WAIT_WIDE) Not twice as much is not yet nobody. With more ranks each one's collectives take longer whoever is late
# (a ring's every rank carries 2(n-1)/n of the data), so the rank behind waits more of its own time too: 4 x H200,
# the DDP tutorial with one rank held 23% (+30% a step): that rank 27-28%, the others 45-50%, round after round.
# Left alone the lowest of four stood as far below (17-23% against 37-43%) in many rounds: the shares alone cannot
# tell them apart there, as where they saturate. The CPU can (held: 0.76 of its peers'; left alone 0.98-1.02), so
# there the rank the shares single out is named as where they saturate: only where it got at most CPU_DROP of its
# peers' CPU.
WAITS_ROUNDS = 2  # rounds in a row naming the same rank: one window can hold a checkpoint save on one rank
WAITS_ROUND_S, WAITS_FIRST_AFTER_S = 15.0, 20.0  # a dump per rank per round; NCCL makes its FIFO after the imports
WAITS_IDLE_MAX_S = 120.0


def waits_pause_s(idle):
    """The pause before the next flight-recorder round after `idle` rounds in a row found no FIFO: WAITS_ROUND_S
    while rounds find one, then doubling up to WAITS_IDLE_MAX_S (issue 52: a gloo job's node side paid a round
    every 15 s for nothing). The rounds never stop: a job whose ranks make their process group (and FIFO) after a
    long preparation (a dataset tokenized for half an hour before `init_process_group`) is found within
    WAITS_IDLE_MAX_S of it; a job that never makes one costs its node a round every 2 minutes."""
    return min(WAITS_ROUND_S * 2 ** min(max(0, int(idle)), 8), WAITS_IDLE_MAX_S)  # 2**8: past the cap already


# Where the others' share reaches SATURATED_SHARE it stops measuring a wait the job pays: on 2 x H200 a healthy run of
# pytorch/examples' FSDP2 example (a small model: the CPU sets the pace) had one rank at 100% and the other at 2% for
# a minute at a time, then the other way round. Its collectives overlap (prefetched all-gathers beside
# reduce-scatters) and the rank whose CPU runs ahead has a collective spinning on the GPU for its peer nearly always,
# at no cost to the job; a rank held 23% of the time looked the same. The job's pace does not tell them apart either:
# left alone its collectives per second dipped to 70% of their median for two rounds in a row (230 s run), and a
# rank held from the start leaves no pace of its own to compare with. The CPU does: a small model's ranks spin a core
# each (CUDA's host waits spin), and a rank held from outside gets less of one. On 2 x H200, the FSDP2 example left
# alone, both ranks 1.00-1.01 cores every 15 s for 230 s; rank 1 held 23%, 0.78 against its peer's 1.01. So where the
# shares saturate, the rank the others wait for is named only where, between two rounds (CPU_SPAN_S apart at
# least), it got at most CPU_DROP of its peers' median CPU, they busy (CPU_BUSY of a core at least: where the peers
# do not run, the CPU is not what sets the pace). A saturated job slowed by one rank's GPU: judge_gpu, below. A GPU
# slowing its own clocks does not name a rank here (it does where the shares do not saturate): a job whose shares
# saturate is paced by its CPU, its GPUs idle between kernels, so slower clocks need not cost it a step.
SATURATED_SHARE = 0.9
CPU_DROP, CPU_BUSY, CPU_SPAN_S = 0.85, 0.5, 5.0
WaitsVerdict = namedtuple("WaitsVerdict", "host rank lag_share ratio own others window_s cpu gpu neighbour slowing",
                          defaults=(None, None, None, None))

# A rank slowed on its GPU, not its CPU, spins its core as its peers do, so where the shares saturate neither they
# nor the CPU single it out. Its GPU does: another tenant's kernels there (a second job, a stray process) take time
# the rank's own kernels would have had. Named where, in a round, the rank got at most GPU_DROP of its peers' median
# share of their GPUs' time, they busy (GPU_BUSY at least: where the peers' GPUs idle, the GPU is not what sets the
# pace), and processes outside the job ran on its GPU GPU_FOREIGN of the time at least (the cause, and its pid).
# Whichever rule names a rank, another tenant on its GPU is said with it (`neighbour`): on 2 x H200 the shares named
# each rank slowed so (a GPU-bound FSDP2 job) before this rule could, and the tenant is the cause and the fix.
GPU_DROP, GPU_BUSY, GPU_FOREIGN = 0.85, 0.5, 0.1

# Where the shares do not saturate they name the rank behind, but a short window of a fast job holds its noise: on
# 2 x H200 the public DDP tutorial left alone (1.4 ms steps, so a dump holds its last 3 s) had one rank wait 7-10% and
# its peer 33-40% two rounds in a row three times in 800 s (ranks 0 and 1 in turn) while its pace stayed at 21-22
# epochs a second: the same figures (ratio 1.3-1.5) as its rank 1 held 23% of the time, whose pace fell to 15. The
# CPU tells them apart: left alone, both ranks ran 0.97-0.98 cores every round (0.99-1.00 of each other); rank 1
# held 23%, 0.89 then 0.80 of its peer's. So where the CPU readings say something (the peers busy on it), the rank
# the shares name is named only where it got at most CPU_KEPT of its peers' CPU (held, descheduled, asleep in I/O),
# or more than 1 / CPU_KEPT (busy with threads of its own: a shard decompressed, augmentation in the main process),
# or another process shares its GPU (GPU_FOREIGN), or its GPU slows its own clocks while most of its peers' do not (a
# protective throttle reason in the node's metrics: heat, a power brake, the hardware's slowdown;
# collective_waits.gpus_slowing): a rank slowed on its GPU alone spins its CPU as its peers do; a hall whose every
# GPU runs hot slows every rank alike and says nothing of one. Without readings (an older node, the first round)
# the shares alone decide. Looser than CPU_DROP: here the shares already single the rank out, and the CPU only has
# to say it did not run as its peers did.
CPU_KEPT = 0.93


def cpu_rates(earlier, measured):
    """{(host, rank): cores} each rank ran on the CPU since `earlier`'s reading (a rank's (cpu_s, at) of the
    round before, its node's clock), and the readings to keep for the next round. A rank without a reading, read
    under CPU_SPAN_S ago or restarted since (its CPU time went down) has no rate."""
    rates, readings = {}, {}
    for key, m in measured.items():
        if len(m) < 5 or m[3] is None or m[4] is None:
            continue
        readings[key] = (m[3], m[4])
        before = earlier.get(key)
        if before and m[4] - before[1] >= CPU_SPAN_S and m[3] >= before[0]:
            rates[key] = (m[3] - before[0]) / (m[4] - before[1])
    return rates, readings


def cpu_share(rates, key):
    """The CPU the rank `key` got as a share of its peers' median, None where that says nothing (no rate for it
    or for any peer, or the peers not busy on the CPU)."""
    others = [rate for other, rate in rates.items() if other != key]
    if key not in rates or not others or statistics.median(others) < CPU_BUSY:
        return None
    return rates[key] / statistics.median(others)


def wait_shares(measured):
    """{(host, rank): the share of its window its collectives waited} of a round's figures (a window of 0: none)."""
    return {key: min(1.0, m[0] / m[1]) for key, m in measured.items() if m[1] > 0}


def judge_gpu(measured):
    """The rank whose GPU another process took from it (GPU_DROP, GPU_BUSY, GPU_FOREIGN), as a WaitsVerdict with
    `gpu` (its share, its peers' median, the other processes', the busiest one's pid), or None."""
    gpu = {key: m[5:8] for key, m in measured.items() if len(m) >= 8}
    best = None
    for key, (own, foreign, _) in gpu.items():
        peers = [other[0] for other_key, other in gpu.items() if other_key != key]
        busy = statistics.median(peers) if peers else 0.0
        if foreign >= GPU_FOREIGN and busy >= GPU_BUSY and own <= GPU_DROP * busy and (best is None or own / busy
                                                                                        < best[1]):
            best = (key, own / busy, busy)
    if best is None:
        return None
    (host, rank), ran, busy = best
    m, shares = measured[(host, rank)], wait_shares(measured)
    others = [share for key, share in shares.items() if key != (host, rank)]
    return WaitsVerdict(host, rank, 1.0 - ran, 1.0 / max(ran, 0.05), shares.get((host, rank), 0.0),
                        statistics.median(others) if others else 0.0, m[1], None, (m[5], busy, m[6], int(m[7])))


def judge_waits(measured, rates=None):
    """{(host, rank): (wait_s, window_s[, collectives[, cpu_s, at[, gpu_own, gpu_foreign, neighbour[,
    slowing]]]])} of one round -> WaitsVerdict, or None when no rank stands out. `rates`: cpu_rates'. The shares
    first, then, where they name nobody, the GPUs (judge_gpu). What else slows the named rank's GPU is said with it."""
    found = _judge_shares(measured, rates) or judge_gpu(measured)
    if found is None:
        return None
    m = measured[(found.host, found.rank)]
    return found._replace(neighbour=_tenant(m) if found.gpu is None else None, slowing=_slowing(m))


def _slowing(m):
    """The protective throttle bits active on the GPU of the rank whose figures are `m`, else None."""
    return int(m[8]) if len(m) >= 9 and m[8] else None


def _slowing_alone(measured, key):
    """The rank `key`'s GPU slows its own clocks and fewer than half of its peers' GPUs do."""
    peers = [_slowing(m) is not None for other, m in measured.items() if other != key]
    return _slowing(measured[key]) is not None and sum(peers) < len(peers) / 2


def _tenant(m):
    """(share, pid) of the processes outside the job on the GPU of the rank whose figures are `m`, where they took
    GPU_FOREIGN of it at least; else None (none there, or no reading)."""
    return (m[6], int(m[7])) if len(m) >= 8 and m[6] >= GPU_FOREIGN else None


def _judge_shares(measured, rates):
    shares = wait_shares(measured)
    if len(shares) < 2:
        return None
    ordered = sorted(shares.items(), key=lambda item: (item[1], item[0][1]))
    (host, rank), own = ordered[0]
    others = statistics.median(share for _, share in ordered[1:])
    if others - own < WAIT_GAP or ordered[1][1] - own < WAIT_GAP / 2:
        return None
    ran, m = cpu_share(rates or {}, (host, rank)), measured[(host, rank)]
    if others >= SATURATED_SHARE or own > WAIT_RATIO * others:  # (WAIT_WIDE)
        if ran is not None and ran <= CPU_DROP:
            return WaitsVerdict(host, rank, 1.0 - ran, 1.0 / max(ran, 0.05), own, others, m[1], ran)
        return None  # the shares say who is behind, not that it costs the job anything
    kept_pace = ran is not None and CPU_KEPT < ran < 1.0 / CPU_KEPT
    if kept_pace and _tenant(m) is None and not _slowing_alone(measured, (host, rank)):
        return None  # it ran on the CPU as its peers did and nothing else slows its GPU: the window's noise
    ratio = (1.0 - own) / max(1.0 - others, 0.05)
    return WaitsVerdict(host, rank, others - own, ratio, own, others, m[1], None if kept_pace else ran)


def waits_named(rounds):
    """The rank the latest WAITS_ROUNDS rounds' verdicts all named (the latest one's figures), else None."""
    latest = list(rounds)[-WAITS_ROUNDS:]
    if len(latest) < WAITS_ROUNDS or None in latest or len({(r.host, r.rank) for r in latest}) != 1:
        return None
    return latest[-1]


def waits_let_go(rounds, host, rank):
    """The latest WAITS_ROUNDS rounds' verdicts named someone else or nobody: the rank keeps pace again."""
    latest = list(rounds)[-WAITS_ROUNDS:]
    return len(latest) >= WAITS_ROUNDS and all(r is None or (r.host, r.rank) != (host, rank) for r in latest)


class WaitsRounds:
    """One run's judged flight-recorder rounds, the attached watch's and the supervisor's alike: the latest
    WAITS_ROUNDS verdicts and each rank's latest CPU reading (cpu_rates)."""

    def __init__(self):
        self.verdicts, self.cpu = [], {}

    def add(self, measured):
        """One round's {(host, rank): (wait_s, window_s, collectives[, cpu_s, at])} judged and kept: its verdict,
        or None."""
        rates, self.cpu = cpu_rates(self.cpu, measured)
        found = judge_waits(measured, rates)
        self.verdicts = (self.verdicts + [found])[-WAITS_ROUNDS:]
        return found

    def named(self):
        return waits_named(self.verdicts)

    def let_go(self, host, rank):
        return waits_let_go(self.verdicts, host, rank)


def seconds_value(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e10


def waits_evidence(found):
    if found.gpu is not None:
        own, busy, foreign, pid = found.gpu
        return (f"its GPU ran it {own:.0%} of the time, its peers' {busy:.0%}: processes outside the job took "
                f"{foreign:.0%} of that GPU (the busiest: pid {pid}) (nvidia-smi pmon)")
    slowed = f", and it ran on the CPU {found.cpu:.0%} as much as they did" if found.cpu is not None else ""
    tenant = (f"; processes outside the job took {found.neighbour[0]:.0%} of its GPU (the busiest: pid "
              f"{found.neighbour[1]}) (nvidia-smi pmon)") if found.neighbour is not None else ""
    clocks = (f"; its GPU slows its own clocks (clocks_throttle_reasons {found.slowing:#x}: heat, a power brake or the "
              f"hardware's slowdown) (nvidia-smi)") if found.slowing else ""
    return (f"its collectives waited {found.own:.0%} of its last {found.window_s:.0f} s on the GPU, the other ranks' "
            f"{found.others:.0%}{slowed} (flight recorder){tenant}{clocks}")


def measured_figures(line):
    """A node round's line for a measured rank (collective_waits.node_round's, or parsed back from it) as the
    figures the verdict reads: (wait_s, window_s, collectives[, cpu_s, at]), the one place their order is set
    (the attached watch's rounds, the keeper's beats, which Watch.heard reads back)."""
    figures = (line["wait_s"], line["window_s"], line.get("collectives", 0))
    if "cpu_s" not in line:
        return figures
    figures += (line["cpu_s"], line["at"])
    if "gpu_own" not in line:
        return figures
    return figures + (line["gpu_own"], line["gpu_foreign"], line["gpu_neighbour"]) + (
        (line["gpu_slowing"],) if line.get("gpu_slowing") else ())


def share_value(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


def read_upto(line):
    """How much of a keeper's [rank, wait_s, window_s, collectives(, cpu_s, at(, gpu_own, gpu_foreign,
    neighbour(, slowing)))] is sound: the end of its figures (4, 6, 9 or 10), None where the basic ones are not."""
    if len(line) not in (3, 4, 6, 9, 10) or not isinstance(line[0], int) or not all(
            seconds_value(v) for v in line[1:4]):
        return None
    if len(line) < 6 or not (seconds_value(line[4]) and seconds_value(line[5])):
        return 4
    if len(line) < 9 or not (share_value(line[6]) and share_value(line[7]) and bits_value(line[8], 32)):
        return 6
    return 10 if len(line) == 10 and bits_value(line[9], 16) else 9


def bits_value(value, width):
    """An int of at most `width` bits (a pid, a throttle mask), not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << width
