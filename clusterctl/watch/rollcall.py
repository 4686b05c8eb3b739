"""The roll call: every rank's stack, grouped, the rank that is elsewhere named. Pure.

Ranks are grouped by their innermost frame (main thread). In a hung collective, most ranks wait in
the same place, inside torch.distributed; the ranks elsewhere are the suspects: one still loading a
shard, or stuck in a lock, while the others wait for it. With NCCL a collective returns at once and a
rank waits for it where it next waits for the GPU (torch.cuda.synchronize): that counts as waiting too.
The majority is the largest group waiting in torch.distributed (with 2 ranks, 1 against 1, it is the
one in the collective), else the largest waiting for the GPU, else the largest asleep inside a library
(a plain DDP loop waits in C++ under loss.backward(): node/straggler_verdict.py); without such a group,
the largest.

A rank that cannot be read is evidence, not absence: a process stopped (T), in uninterruptible sleep
(D), a zombie (Z), or one py-spy could not read (its error, its timeout), and a rank of the world no
node reported. The roll call accounts for every rank: the suspect is a held rank first (it cannot take
part, whatever the others do), then a rank elsewhere, then, when every readable rank waits, a rank
that could not be read or was not found. Only where no rank is elsewhere and every rank was read
(all wait in the same collective) is the peer they wait for outside the job or the network does not
carry its traffic, and the ranks' connections say which.

`judge` compares the samples: if no rank's stack changed between them, the job hangs; if any did,
it is computing (or at least moving) and is left alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

from clusterctl.documents import parts
from clusterctl.documents.convert import plain
from clusterctl.node.straggler_verdict import STOPPED
from clusterctl.watch.sockets import Suspect, suspicious_connections
from clusterctl.watch.stacks import Frame, RankStack

HANG, MOVING, UNKNOWN = "hang", "moving", "unknown"
PTRACE_HINT = (" (py-spy needs root on the node: passwordless sudo for the SSH user, or kernel.yama.ptrace_scope=0 "
               "for ranks of the same user)")


@dataclass(frozen=True)
class Group:
    frame: Optional[Frame]  # the innermost frame these ranks share (None: no Python frame)
    site: Optional[Frame]  # where the job's own code is in it (the innermost frame outside libraries)
    ranks: tuple[RankStack, ...]

    @property
    def in_collective(self) -> bool:
        return bool(self.ranks) and self.ranks[0].in_collective

    @property
    def in_cuda_wait(self) -> bool:
        return bool(self.ranks) and self.ranks[0].in_cuda_wait

    @property
    def asleep_in_library(self) -> bool:
        return bool(self.ranks) and all(r.asleep_in_library for r in self.ranks)

    @property
    def waiting(self) -> bool:
        return self.in_collective or self.in_cuda_wait or self.asleep_in_library

    def where(self) -> str:
        """`all_reduce (train.py:57)`: the function, and the line of the job's code that led there."""
        if self.frame is None:
            return "no Python frame"
        if self.site is None or self.site == self.frame:
            return str(self.frame)
        if self.in_collective:
            return f"{self.frame.function} ({self.site.file}:{self.site.line})"
        return f"{self.frame} from {self.site}"

    def who(self) -> str:
        return describe_ranks(self.ranks)


@dataclass(frozen=True)
class RollCall:
    groups: tuple[Group, ...]  # the majority first, then the others, largest first
    majority: Optional[Group]
    outliers: tuple[Group, ...]
    failed: tuple[RankStack, ...] = ()  # ranks not read: py-spy could not, or their process is held (T, D, Z)
    missing: tuple[int, ...] = ()  # ranks of the topology that no node reported
    host_of_rank: dict = field(default_factory=dict, compare=False)  # where the topology put each rank

    def unread(self) -> str:
        """`rank 2 on node3 is stopped (state T: ...); rank 5 (node4) was not found`: every rank not read."""
        said = [f"rank {r.rank} on {r.host} {_why_unread(r)}" for r in self.failed[:3]]
        said += [f"rank {rank}{f' ({self.host_of_rank[rank]})' if rank in self.host_of_rank else ''} was not found "
                 f"on its node" for rank in self.missing[:3]]
        more = len(self.failed) + len(self.missing) - len(said)
        return "; ".join(said) + (f" (and {more} more not read)" if more > 0 else "")

    def evidence(self) -> str:
        unread = self.unread()
        if self.majority is None:
            return f"no rank's stack could be read{': ' + unread if unread else ''}"
        count = len(self.majority.ranks)
        waiting = f"{count} rank{'s' if count != 1 else ''} wait{'s' if count == 1 else ''} in {self.majority.where()}"
        if not self.outliers:
            if unread:
                return f"{unread} while every rank read ({count}) waits in {self.majority.where()}"
            return f"every rank ({count}) waits in {self.majority.where()}"
        elsewhere = "; ".join(f"{g.who()} in {g.where()}" for g in self.outliers[:3])
        more = f" (and {len(self.outliers) - 3} more groups)" if len(self.outliers) > 3 else ""
        return f"{unread + '; ' if unread and self.held else ''}{elsewhere}{more} while {waiting}" + \
            (f"; {unread}" if unread and not self.held else "")

    @property
    def held(self) -> tuple[RankStack, ...]:
        return tuple(r for r in self.failed if r.held)

    @property
    def suspect(self) -> Optional[RankStack]:
        """The rank the others wait for: a held one, else one elsewhere, else (every rank read waits) one
        not read. A rank no node reported is `missing_suspect`."""
        if self.held:
            return self.held[0]
        if self.outliers:
            return self.outliers[0].ranks[0]
        if self.majority is not None and self.majority.waiting and self.failed:
            return self.failed[0]
        return None

    @property
    def missing_suspect(self) -> Optional[tuple[Optional[str], int]]:
        """(host, rank) of a rank of the world no node reported, when every rank read waits and no other is suspect."""
        if self.suspect is None and self.missing and self.majority is not None and self.majority.waiting:
            return self.host_of_rank.get(self.missing[0]), self.missing[0]
        return None

    def to_json(self) -> dict:
        groups = [parts.RollCallGroup(frame=str(g.frame) if g.frame else None, where=g.where(),
                                      ranks=[parts.RankAt(r.host, r.rank) for r in g.ranks], majority=g is self.majority)
                  for g in self.groups]
        return plain(parts.RollCall(groups=groups, failed=[parts.UnreadRank(r.host, r.rank, _why_unread(r))
                                                          for r in self.failed],
                                    missing=list(self.missing), evidence=self.evidence()))


def _why_unread(rank: RankStack) -> str:
    """`is stopped (state T: ...)`, `could not be read: <py-spy's error>`."""
    if rank.held:
        return f"is {rank.held}"
    return f"could not be read: {rank.error or 'no Python frame'}" + (f" (state {rank.state})" if rank.state else "")


def roll_call(ranks: Iterable[RankStack], expected: Iterable[int] = (), host_of_rank: Optional[dict] = None) -> RollCall:
    ranks = list(ranks)
    readable = [r for r in ranks if r.frames and not r.held]
    failed = tuple(sorted((r for r in ranks if not r.frames or r.held), key=lambda r: (not r.held, r.rank)))
    by_frame: dict[Optional[Frame], list[RankStack]] = {}
    for rank in sorted(readable, key=lambda r: r.rank):
        by_frame.setdefault(_key(rank.innermost), []).append(rank)
    groups = [Group(members[0].innermost, members[0].own_code, tuple(members)) for members in by_frame.values()]
    groups.sort(key=lambda g: (-len(g.ranks), g.ranks[0].rank))
    waiting = [g for g in groups if g.in_collective] or [g for g in groups if g.in_cuda_wait] or \
        [g for g in groups if g.asleep_in_library]
    majority = waiting[0] if waiting else (groups[0] if groups else None)
    outliers = tuple(g for g in groups if g is not majority)
    seen = {r.rank for r in ranks}
    missing = tuple(sorted(set(expected) - seen))
    return RollCall(tuple([majority] if majority else []) + outliers, majority, outliers, failed, missing,
                    dict(host_of_rank or {}))


def group_by_stack(ranks: Iterable[RankStack]) -> list[tuple[tuple[Frame, ...], tuple[RankStack, ...]]]:
    """Ranks whose main-thread stacks are identical, frame for frame: (stack, ranks), largest group first."""
    groups: dict[tuple, list[RankStack]] = {}
    for rank in sorted(ranks, key=lambda r: r.rank):
        groups.setdefault(tuple(_key(f) for f in rank.frames), []).append(rank)
    return sorted(((stack, tuple(members)) for stack, members in groups.items()), key=lambda g: (-len(g[1]), g[1][0].rank))


def _key(frame: Optional[Frame]) -> Optional[Frame]:
    """Frames compare by function, file and line (the path differs between nodes' installs)."""
    return Frame(frame.function, frame.file, frame.line) if frame else None


def describe_ranks(ranks: Iterable[RankStack]) -> str:
    """`rank 3 on node2`, `ranks 2, 3 on node2 and rank 5 on node3`."""
    by_host: dict[str, list[int]] = {}
    for rank in ranks:
        by_host.setdefault(rank.host, []).append(rank.rank)
    parts = [f"rank{'s' if len(rs) > 1 else ''} {_span(sorted(rs))} on {host}" for host, rs in by_host.items()]
    return " and ".join(parts[:3]) + (f" and {len(parts) - 3} more nodes" if len(parts) > 3 else "")


def _span(ranks: list[int]) -> str:
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(str(r) for r in ranks)


# --------------------------------------------------------------------------- two samples: hang or not


@dataclass(frozen=True)
class Verdict:
    kind: str  # hang | moving | unknown
    roll_call: Optional[RollCall]
    detail: str  # for the operator: why
    suspects: tuple[Suspect, ...] = ()  # connections that look wrong, when no rank is elsewhere


def judge(samples: list[list[RankStack]], interval_s: float, expected: Iterable[int] = (),
          master: Optional[tuple[str, int]] = None, host_of_address: Optional[dict[str, str]] = None,
          host_of_rank: Optional[dict] = None) -> Verdict:
    """Samples of the same ranks `interval_s` apart -> hang, moving, or unknown.

    A rank moved when its stack changed, or when its main thread was busy on a CPU outside
    torch.distributed: a hot loop can sit on one line in every sample (a generator expression, one
    big C call) and still be work. A rank waiting in a collective may spin on a CPU (a CUDA sync)
    without progress, so there only its stack counts. So does a rank spinning in torch.cuda's
    synchronize while some rank is elsewhere (an NCCL all_reduce returns at once: its ranks wait in the
    next sync, for the one that never came); where every rank spins there, it may be long GPU work."""
    if not samples or not any(r.frames for r in samples[-1]):
        errors = sorted({r.error for sample in samples for r in sample if r.error})
        hint = PTRACE_HINT if any("ermission denied" in e or "not permitted" in e for e in errors) else ""
        return Verdict(UNKNOWN, None, "no rank's stack could be read" + (f": {'; '.join(errors[:3])}" if errors else "")
                       + hint)
    call = roll_call(samples[-1], expected, host_of_rank)
    if len(samples) > 1:
        first = {(r.host, r.rank): r for r in samples[0] if r.frames}
        both = [(first[(r.host, r.rank)], r) for r in samples[-1] if r.frames and (r.host, r.rank) in first]
        if not both:
            return Verdict(UNKNOWN, call, "no rank was read in both samples")
        moved = [r for old, r in both if _frames(old) != _frames(r)]
        elsewhere = any(not g.in_collective and not g.in_cuda_wait for g in call.groups)
        # A rank stopped in every sample holds every collective, so no rank's CPU is progress: with NCCL a rank
        # spins in its own code's blocking copy (`source.to(gpu)`) behind the stopped peer (2 x H200, the DDP
        # tutorial, rank 1 SIGSTOPped: read as busy, the run went on silent until --timeout). A stopped rank
        # has no frames (the sampler does not attach to it: its state is the answer), so it is found by its
        # state among every rank sampled, not among the ranks read
        stopped = bool(_stopped_in_every_sample(samples))
        busy = [(r, share) for old, r in both if not stopped and not r.in_collective and not (r.in_cuda_wait and elsewhere)
                for share in [_cpu_share(old, r, interval_s * (len(samples) - 1))] if share >= BUSY]
        if moved or busy:
            said = [f"{describe_ranks(moved)} moved between samples"] if moved else []
            said += [f"{describe_ranks([r for r, _ in busy])} busy on a CPU "
                     f"({min(1.0, max(share for _, share in busy)):.0%}) in {busy[0][0].innermost}"] if busy else []
            return Verdict(MOVING, call, "; ".join(said))
    suspects: tuple[Suspect, ...] = ()
    if not call.outliers and master is not None:
        suspects = tuple(suspicious_connections(
            [[(r.host, r.rank, r.sockets) for r in sample] for sample in samples], master, host_of_address or {}))
    return Verdict(HANG, call, call.evidence(), suspects)


def _stopped_in_every_sample(samples: list[list[RankStack]]) -> set[tuple[str, int]]:
    """(host, rank) of each rank whose process was stopped (T, t) or dead (Z, X) in every sample, read or not."""
    held = [{(r.host, r.rank) for r in sample if r.state in HOLDS_EVERY_COLLECTIVE} for sample in samples]
    return set.intersection(*held) if held else set()


HOLDS_EVERY_COLLECTIVE = STOPPED + ("Z", "X")  # not D: a rank reading a checkpoint off NFS sleeps there and moves on
BUSY = 0.1  # of one CPU between the first and the last sample: a wait uses ~0, work shared by many ranks on few CPUs more


def _cpu_share(old: RankStack, new: RankStack, seconds: float) -> float:
    if old.cpu_s is None or new.cpu_s is None or seconds <= 0:
        return 0.0
    return max(0.0, new.cpu_s - old.cpu_s) / seconds


def _frames(rank: RankStack) -> tuple:
    return tuple((f.function, f.file, f.line) for f in rank.frames)


def hang_finding(verdict: Verdict, silent_s: float, stacks_path: str = "") -> dict:
    """The run's first failure for a hang: {host, rank, diagnosis: [rank_hang finding]}."""
    call = verdict.roll_call
    saved = f"; every rank's stack: {stacks_path}" if stacks_path else ""
    if call is not None and call.suspect is not None and (call.suspect.held or not call.outliers):
        suspect = call.suspect  # held from outside, or the one rank not read while every rank read waits
        evidence = f"{call.evidence()} (no output for {silent_s:.0f}s, stacks unchanged between samples)"
        fix = (f"rank {suspect.rank} on {suspect.host} {_why_unread(suspect)}: "
               + ("resume or kill it (`kill -CONT`/a debugger detached), find who stopped it"
                  if suspect.state in ("T", "t") else
                  "look at the node's kernel log and mounts (`dmesg`, a dead NFS or a hung driver call)"
                  if suspect.state == "D" else
                  "its process is gone: look at its log tail and the node" if suspect.state in ("Z", "X") else
                  "read it by hand (`clusterctl stacks`, py-spy as root on the node)") + saved)
        return _failure(suspect.host, suspect.rank, evidence, fix)
    if call is not None and call.missing_suspect is not None:
        host, rank = call.missing_suspect
        evidence = f"{call.evidence()} (no output for {silent_s:.0f}s, stacks unchanged between samples)"
        fix = (f"rank {rank}{' on ' + host if host else ''} was not found among the node's processes while every other "
               f"rank waits: look at its log tail (did it exit?) and at the node{saved}")
        return _failure(host, rank, evidence, fix)
    if call is not None and call.suspect is not None:
        suspect = call.suspect
        evidence = f"{call.evidence()} (no output for {silent_s:.0f}s, stacks unchanged between samples)"
        fix = (f"find why rank {suspect.rank} on {suspect.host} stays in {call.outliers[0].where()} while the others "
               f"wait in {call.majority.frame.function if call.majority and call.majority.frame else 'a collective'} "
               f"(a slow load, a lock, a rank-dependent branch that skips the collective); if it is slow work, raise "
               f"job.stall_timeout{saved}")
        return _failure(suspect.host, suspect.rank, evidence, fix)
    evidence = f"{call.evidence() if call else 'every rank waits'} (no output for {silent_s:.0f}s): no rank is " \
               f"elsewhere, so the peer they wait for is outside the job or the network drops its traffic"
    if verdict.suspects:
        evidence += "; connections that look wrong: " + "; ".join(
            f"rank {s.rank} on {s.host}: {s.what}" for s in verdict.suspects[:3])
        first = verdict.suspects[0]
        fix = (f"check the network between {first.host} and {first.peer or 'the master'} (firewall rules for the "
               f"ranks' ports, the NIC NCCL/Gloo use; `clusterctl nccl-test --pairs`){saved}")
        return _failure(first.host, None, evidence, fix)
    evidence += "; every rank holds its connection to the master and no send queue is stuck"
    fix = (f"look for a process outside this run that the ranks wait for (another job on the same port or group, "
           f"a rank of an earlier run), then the network (`clusterctl nccl-test --pairs`){saved}")
    return _failure(None, None, evidence, fix)


def _failure(host: Optional[str], rank: Optional[int], evidence: str, fix: str) -> dict:
    finding = {"cause": "rank_hang", "host": host, "rank": rank, "evidence": evidence, "fix": fix, "confidence": 0.9}
    return {"host": host, "rank": rank, "diagnosis": [finding]}
