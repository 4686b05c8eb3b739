"""The watch on a loop as users write it (issue 49), on the node script's real output of a plain DDP loop
(tests/fixtures/pyspy/capture_plain_loop.py: 3 gloo ranks, no torch.distributed call in the job): the
waits are in C++ under loss.backward(), seen by the main thread's kernel state; a rank held from
outside is singled out; a rank stopped for good is the hang's culprit, named with host, rank and state."""
from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings, strategies as st

from clusterctl.node import node_stragglers, straggler_verdict as verdict
from clusterctl.watch import stragglers
from clusterctl.watch.rollcall import HANG, hang_finding, judge, roll_call
from clusterctl.watch.sampler import merged_samples, parse_node_output
from clusterctl.watch.stacks import Frame, RankStack, ThreadStack

PYSPY = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy"
SITE = "/opt/venv/lib/python3.12/site-packages/"
BACKWARD = ((Frame("_engine_run_backward", "torch/autograd/graph.py", 829, SITE + "torch/autograd/graph.py"),
             Frame("backward", "torch/_tensor.py", 625, SITE + "torch/_tensor.py"),
             Frame("main", "train.py", 44, "/workspace/train.py")))
ALL_REDUCE = (Frame("all_reduce", "torch/distributed/distributed_c10d.py", 2870,
                    SITE + "torch/distributed/distributed_c10d.py"), Frame("main", "train.py", 57, "/workspace/train.py"))
SLEEP = (Frame("compute", "train.py", 12, "/workspace/train.py"), Frame("main", "train.py", 40, "/workspace/train.py"))


def samples(name: str):
    node = parse_node_output((PYSPY / name).read_text(), "local")
    assert node.samples and not node.problem
    return node.samples


def rank(number: int, frames=BACKWARD, state: str = "S", host: str = "node1", error: str = "", wchan: str = "") -> RankStack:
    threads = (ThreadStack("MainThread", None, tuple(frames)),) if frames else ()
    return RankStack(host, number, number, 100 + number, threads, error, 1.0, (), state, wchan)


def test_the_node_script_says_each_ranks_kernel_state_and_wchan():
    first = samples("node_ddp_plain_frozen_3ranks.txt")[0]
    assert [(r.rank, r.state, r.wchan) for r in first] == [(0, "S", "futex_do_wait"), (1, "T", "do_signal_stop"),
                                                         (2, "S", "futex_do_wait")]
    assert first[1].held.startswith("stopped (state T") and not first[1].frames
    assert "state T" in first[1].error


def test_a_plain_ddp_loop_waits_asleep_under_backward_where_no_torch_distributed_frame_is():
    taken = samples("node_ddp_plain_slowed_3ranks.txt")
    asleep = [r for sample in taken for r in sample if r.state == "S"]
    assert asleep and not any(r.in_collective for r in asleep)
    assert all(stragglers.waits(r) for r in asleep if r.innermost and r.innermost.in_library)


def test_the_rank_held_from_outside_is_named_and_the_healthy_loop_names_nobody():
    found = stragglers.find(samples("node_ddp_plain_slowed_3ranks.txt"), None, 0.0)
    assert found is not None and (found.host, found.rank) == ("local", 2), found
    assert stragglers.find(samples("node_ddp_plain_healthy_3ranks.txt"), None, 0.0) is None


def test_a_rank_stopped_for_good_is_the_hangs_culprit_with_host_rank_and_state():
    taken = samples("node_ddp_plain_frozen_3ranks.txt")
    found = judge(list(taken), 1.0, range(3), host_of_rank={0: "local", 1: "local", 2: "local"})
    assert found.kind == HANG, found.detail
    assert (found.roll_call.suspect.host, found.roll_call.suspect.rank) == ("local", 1)
    failure = hang_finding(found, 20)
    assert (failure["host"], failure["rank"]) == ("local", 1)
    evidence = failure["diagnosis"][0]["evidence"]
    assert evidence.startswith("rank 1 on local is stopped (state T: SIGSTOP or a job-control stop, in do_signal_stop) "
                               "while every rank read (2) waits in _engine_run_backward"), evidence
    assert "kill -CONT" in failure["diagnosis"][0]["fix"]


def test_a_rank_py_spy_could_not_read_while_every_other_waits_is_the_culprit():
    call = roll_call([rank(0, ALL_REDUCE), rank(1, (), "R", error="py-spy did not answer within 10 s (killed)"),
                      rank(2, ALL_REDUCE)], range(3))
    assert call.suspect.rank == 1
    assert call.evidence().startswith("rank 1 on node1 could not be read: py-spy did not answer within 10 s (killed) "
                                      "(state R) while every rank read (2) waits in all_reduce")


def test_a_rank_no_node_reported_while_every_rank_read_waits_is_named_with_its_host():
    call = roll_call([rank(0), rank(1)], range(3), {0: "node1", 1: "node1", 2: "node2"})
    assert call.suspect is None and call.missing_suspect == ("node2", 2)
    failure = hang_finding(judge([[rank(0), rank(1)]], 1.0, range(3), host_of_rank={2: "node2"}), 30)
    assert (failure["host"], failure["rank"]) == ("node2", 2)
    assert "rank 2 (node2) was not found on its node" in failure["diagnosis"][0]["evidence"]


def test_d_state_and_zombies_are_named_with_their_state():
    call = roll_call([rank(0, ALL_REDUCE), rank(1, (), "D", wchan="rpc_wait_bit_killable"), rank(2, (), "Z")], range(3))
    assert call.suspect.rank == 1  # held ranks first, by rank
    text = call.evidence()
    assert "rank 1 on node1 is in uninterruptible sleep (state D, in rpc_wait_bit_killable)" in text
    assert "rank 2 on node1 is a zombie (state Z" in text


def test_asleep_in_the_jobs_own_code_is_work_and_awake_in_a_library_is_work():
    assert not stragglers.waits(rank(0, SLEEP, "S"))  # time.sleep standing in for GPU work
    assert not stragglers.waits(rank(0, BACKWARD, "R"))  # computing the backward
    assert stragglers.waits(rank(0, BACKWARD, "S")) and stragglers.waits(rank(0, ALL_REDUCE, "R"))
    assert not stragglers.waits(rank(0, BACKWARD, "T"))  # held from outside: the one the others wait for
    # stopped inside a collective (FSDP2 over gloo talks most of each step): still the one the others wait for
    assert not stragglers.waits(rank(0, ALL_REDUCE, "T")) and not stragglers.waits(rank(0, ALL_REDUCE, "t"))
    frames = [(f.function, f.path) for f in ALL_REDUCE]
    assert verdict.frames_wait(frames, "R") and not verdict.frames_wait(frames, "T")


def test_the_keeper_reads_the_main_threads_state_and_says_nothing_of_a_process_gone():
    assert node_stragglers.main_state(os.getpid()) in ("R", "S")
    assert node_stragglers.main_state(2 ** 22 + 7) == ""
    text = json.dumps([{"thread_name": "MainThread", "frames": [
        {"name": f.function, "filename": f.path, "line": f.line} for f in BACKWARD]}])
    assert node_stragglers.waits(text, "S") is True and node_stragglers.waits(text, "R") is False
    assert node_stragglers.waits(text[:len(text) // 2], "S") is None  # truncated: unreadable, not a guess


STATES = st.sampled_from(["", "R", "S", "D", "T", "t", "Z", "X", "I", "?"])
FRAMES = st.sampled_from([(), BACKWARD, ALL_REDUCE, SLEEP])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(FRAMES, STATES, st.text(max_size=20), st.text(max_size=10)), min_size=0, max_size=8),
       st.integers(0, 10))
def test_every_rank_of_the_world_is_accounted_for_whatever_the_states(ranks, world):
    stacks = [rank(i, frames, state, error=error, wchan=wchan) for i, (frames, state, error, wchan) in enumerate(ranks)]
    call = roll_call(stacks, range(world))
    grouped = {r.rank for g in call.groups for r in g.ranks}
    unread = {r.rank for r in call.failed}
    assert grouped | unread == set(range(len(stacks))) and not grouped & unread
    assert set(call.missing) == set(range(world)) - set(range(len(stacks)))
    call.evidence(), call.to_json()
    hang_finding(judge([stacks], 1.0, range(world)), 10) if stacks else None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["f", "_engine_run_backward", "synchronize"]),
                          st.sampled_from(["", "train.py", SITE + "torch/autograd/graph.py", "torch/cuda/__init__.py",
                                           "/usr/lib/python3.12/threading.py", SITE + "torch/distributed/x.py"])),
                max_size=5), STATES)
def test_frames_wait_takes_any_frames_and_state(frames, state):
    assert verdict.frames_wait(frames, state) in (True, False)


def test_top_shows_the_straggler_named_while_it_is_late():
    from clusterctl.commands.top import late

    record = {"stragglers": [{"host": "node1", "rank": 0, "lag_s": None, "lag_share": 0.3, "ratio": 1.4, "until": 5.0},
                             {"host": "node2", "rank": 3, "lag_s": 0.41, "lag_share": 0.4, "ratio": 2.1, "until": None}]}
    assert late(record) == " · straggler node2 r3: +0.41 s per step (2.1x the median)"
    assert late({"stragglers": [{"host": "n", "rank": 1, "lag_share": 0.25, "until": None}]}) == \
        " · straggler n r1: +25% of each step"
    assert late({}) == "" and late({"stragglers": ["junk", {"until": None}]}) == ""


def test_a_rank_stopped_in_both_samples_makes_a_busy_peer_no_progress():
    """2 x H200, the public DDP tutorial over NCCL, rank 1 SIGSTOPped (docs/gpu-validation.md), read by the real node
    script on each host (tests/fixtures/pyspy/SOURCES.md): rank 0 spins in its own code's blocking copy
    (`source.to(gpu)`, state R, a whole CPU) behind the stopped peer, which the script does not attach to (no
    frames, its state is the answer). Rank 0 was read as busy and the silent run went on to --timeout; a stopped
    rank holds every collective, found by its state whether or not it was read: a hang, named on it."""
    nodes = {host: parse_node_output((PYSPY / f"node_ddp_tutorial_nccl_frozen_r1_{host}_h200.txt").read_text(), host)
             for host in ("g0", "g1")}
    samples = merged_samples(nodes)
    busy, stopped = samples[-1]
    assert (busy.state, str(busy.innermost), stopped.state, stopped.frames) == \
        ("R", "Trainer._run_epoch (multinode.py:73)", "T", ())
    assert busy.cpu_s - samples[0][0].cpu_s > 2.5  # 3 s apart: a whole CPU
    found = judge(samples, 3.0, range(2))
    assert found.kind == HANG, found.detail
    failure = hang_finding(found, 25)
    assert (failure["host"], failure["rank"]) == ("g1", 1), failure
    assert "rank 1 on g1 is stopped (state T" in failure["diagnosis"][0]["evidence"]
    # the same samples with rank 1 running (asleep in the kernel): rank 0's CPU is work, a long silent step
    running = [[r if r.rank == 0 else replace(r, state="S", wchan="") for r in sample] for sample in samples]
    assert judge(running, 3.0, range(2)).kind != HANG
