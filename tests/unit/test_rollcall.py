"""The roll call: ranks grouped by their innermost frame, the rank elsewhere named; hang or computing
from two samples; and, when every rank waits in the same place, the connections that look wrong."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings, strategies as st
from clusterctl_helpers import examples

from clusterctl.watch.rollcall import HANG, MOVING, UNKNOWN, describe_ranks, group_by_stack, hang_finding, judge, roll_call
from clusterctl.watch.sampler import parse_node_output
from clusterctl.watch.sockets import Socket, parse_tcp_table, suspicious_connections
from clusterctl.watch.stacks import Frame, RankStack, ThreadStack

PYSPY = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy"
SITE = "/opt/venv/lib/python3.11/site-packages/"
ALL_REDUCE = (Frame("all_reduce", "torch/distributed/distributed_c10d.py", 2870, SITE + "torch/distributed/distributed_c10d.py"),
              Frame("wrapper", "torch/distributed/c10d_logger.py", 83, SITE + "torch/distributed/c10d_logger.py"),
              Frame("step", "train.py", 57, "/workspace/train.py"), Frame("main", "train.py", 90, "/workspace/train.py"))
LOAD_SHARD = (Frame("load_shard", "train.py", 41, "/workspace/train.py"), Frame("main", "train.py", 88, "/workspace/train.py"))


def rank(host: str, number: int, frames, cpu: float = 1.0, sockets=()) -> RankStack:
    return RankStack(host, number, number % 2, 1000 + number, (ThreadStack("MainThread", False, tuple(frames)),),
                     cpu_s=cpu, sockets=tuple(sockets))


def cluster(outlier: int = 3, outlier_frames=LOAD_SHARD) -> list[RankStack]:
    hosts = {0: "node1", 1: "node1", 2: "node2", 3: "node2", 4: "node3", 5: "node3"}
    return [rank(hosts[r], r, outlier_frames if r == outlier else ALL_REDUCE) for r in range(6)]


def test_the_rank_elsewhere_is_named_with_its_node_and_function_while_the_others_wait_in_the_collective():
    call = roll_call(cluster(), expected=range(6))
    assert call.evidence() == "rank 3 on node2 in load_shard (train.py:41) while 5 ranks wait in all_reduce (train.py:57)"
    assert (call.suspect.host, call.suspect.rank) == ("node2", 3) and call.missing == ()


def test_with_two_ranks_one_against_one_the_majority_is_the_rank_in_the_collective():
    call = roll_call([rank("a", 0, LOAD_SHARD), rank("a", 1, ALL_REDUCE)])
    assert call.evidence() == "rank 0 on a in load_shard (train.py:41) while 1 rank waits in all_reduce (train.py:57)"


def test_an_outlier_inside_a_library_is_shown_with_the_line_of_the_job_that_called_it():
    reading = (Frame("read", "torch/serialization.py", 1400, SITE + "torch/serialization.py"), *LOAD_SHARD)
    call = roll_call(cluster(outlier=4, outlier_frames=reading))
    assert call.evidence().startswith("rank 4 on node3 in read (torch/serialization.py:1400) from load_shard (train.py:41)")


def test_several_groups_elsewhere_are_all_named_and_ranks_missing_from_every_node_are_reported():
    ranks = cluster()
    ranks[5] = rank("node3", 5, LOAD_SHARD)
    ranks[4] = rank("node3", 4, (Frame("barrier", "train.py", 12),))
    call = roll_call(ranks[:5] + ranks[5:], expected=range(8))
    assert call.evidence() == ("rank 3 on node2 and rank 5 on node3 in load_shard (train.py:41); rank 4 on node3 in "
                               "barrier (train.py:12) while 3 ranks wait in all_reduce (train.py:57); rank 6 was not found "
                               "on its node; rank 7 was not found on its node")
    assert call.missing == (6, 7)


def test_ranks_py_spy_could_not_read_are_kept_apart():
    ranks = cluster() + [RankStack("node4", 6, 0, 77, error="Permission denied")]
    call = roll_call(ranks)
    assert [(r.host, r.rank, r.error) for r in call.failed] == [("node4", 6, "Permission denied")]
    assert call.suspect.rank == 3


def test_rank_lists_are_short():
    ranks = [rank("n1", r, ALL_REDUCE) for r in range(4)] + [rank("n2", 9, ALL_REDUCE)]
    assert describe_ranks(ranks) == "ranks 0-3 on n1 and rank 9 on n2"


def test_identical_stacks_group_frame_for_frame():
    groups = group_by_stack(cluster())
    assert [[r.rank for r in members] for _, members in groups] == [[0, 1, 2, 4, 5], [3]]


# --------------------------------------------------------------------------- two samples


def test_stacks_that_do_not_move_between_samples_are_a_hang_that_names_the_outlier():
    verdict = judge([cluster(), cluster()], 3.0, range(6), ("10.0.0.1", 29500))
    assert verdict.kind == HANG and verdict.suspects == ()
    failure = hang_finding(verdict, 900, "/state/stacks.json")
    assert (failure["host"], failure["rank"]) == ("node2", 3)
    finding = failure["diagnosis"][0]
    assert finding["cause"] == "rank_hang" and finding["evidence"].startswith("rank 3 on node2 in load_shard (train.py:41)")
    assert "/state/stacks.json" in finding["fix"] and "job.stall_timeout" in finding["fix"]


def test_a_stack_that_changed_between_samples_is_computing():
    later = cluster()
    later[3] = rank("node2", 3, (Frame("load_shard", "train.py", 42),) + LOAD_SHARD[1:])
    verdict = judge([cluster(), later], 3.0)
    assert verdict.kind == MOVING and "rank 3 on node2 moved" in verdict.detail


def test_a_hot_loop_on_one_line_is_computing_by_its_cpu_time_but_a_spinning_collective_is_not():
    hot = (Frame("<genexpr>", "train.py", 24), Frame("crunch", "train.py", 24))
    before = [rank("a", 0, hot, cpu=10.0), rank("a", 1, hot, cpu=10.0)]
    after = [rank("a", 0, hot, cpu=12.9), rank("a", 1, hot, cpu=12.8)]
    assert judge([before, after], 3.0).kind == MOVING
    spinning = [[rank("a", 0, ALL_REDUCE, cpu=c), rank("a", 1, LOAD_SHARD, cpu=1.0)] for c in (10.0, 12.9)]
    assert judge(spinning, 3.0).kind == HANG


def test_no_readable_stack_is_unknown_with_py_spys_reason():
    verdict = judge([[RankStack("a", 0, 0, 5, error="Permission denied (os error 13)")]], 3.0)
    assert verdict.kind == UNKNOWN and "Permission denied" in verdict.detail


def test_the_real_captures_judge_as_hang_computing_and_all_waiting():
    def samples(name):
        return [list(s) for s in parse_node_output((PYSPY / name).read_text(), "local").samples]

    hang = judge(samples("node_hang_2ranks.txt"), 1.0, range(2))
    assert hang.kind == HANG and hang.detail == (
        "rank 1 on local in load_shard (stall.py:17) while 1 rank waits in all_reduce (stall.py:49)")
    computing = judge(samples("node_compute_2ranks.txt"), 1.0, range(2))
    assert computing.kind == MOVING and "busy on a CPU" in computing.detail
    stuck = judge(samples("node_deadlock_2ranks.txt"), 1.0, range(2), ("127.0.0.1", 29668))
    assert stuck.kind == HANG and stuck.roll_call.outliers == () and stuck.suspects == ()
    finding = hang_finding(stuck, 60)["diagnosis"][0]
    assert finding["evidence"].startswith("every rank (2) waits in recv (stall.py:48)")
    assert "no rank is elsewhere" in finding["evidence"] and finding["host"] is None


# --------------------------------------------------------------------------- connections


def tcp_line(local: str, remote: str, state: int, tx: int = 0, retrans: int = 0, inode: int = 1) -> str:
    def hexed(endpoint: str) -> str:
        address, port = endpoint.rsplit(":", 1)
        return "".join(f"{int(p):02X}" for p in reversed(address.split("."))) + f":{int(port):04X}"

    return (f"   0: {hexed(local)} {hexed(remote)} {state:02X} {tx:08X}:00000000 01:00000014 {retrans:08X}     0        0 "
            f"{inode} 1 0000000000000000 20 4 30 10 -1")


def test_kernel_lines_give_addresses_states_queues_and_retransmits():
    [socket] = parse_tcp_table(tcp_line("10.0.0.2:40000", "10.0.0.1:29500", 1, tx=4096, retrans=3, inode=77))
    assert socket == Socket(("10.0.0.2", 40000), ("10.0.0.1", 29500), "ESTABLISHED", 4096, 0, 3, 77)


def test_when_every_rank_waits_the_connection_that_does_not_drain_names_the_peer():
    master = ("10.0.0.1", 29500)
    store = lambda inode: parse_tcp_table(tcp_line("10.0.0.3:41000", "10.0.0.1:29500", 1, inode=inode))  # noqa: E731
    stuck = parse_tcp_table(tcp_line("10.0.0.3:42000", "10.0.0.2:43000", 1, tx=65536, inode=9))
    sample = [("node1", 0, store(1)), ("node3", 4, store(2) + stuck)]
    suspects = suspicious_connections([sample, sample], master, {"10.0.0.2": "node2"})
    assert [(s.host, s.rank, s.peer) for s in suspects] == [("node3", 4, "node2")]
    assert "65536 bytes sent and not acknowledged in every sample" in suspects[0].what
    drained = [("node1", 0, store(1)), ("node3", 4, store(2) + parse_tcp_table(
        tcp_line("10.0.0.3:42000", "10.0.0.2:43000", 1, tx=0, inode=9)))]
    assert suspicious_connections([sample, drained], master, {}) == []


def test_a_rank_connecting_without_answer_or_without_the_store_is_suspect():
    master = ("10.0.0.1", 29500)
    syn = parse_tcp_table(tcp_line("10.0.0.3:42000", "10.0.0.2:43000", 2, inode=5))
    suspects = suspicious_connections([[("node3", 4, syn)]], master, {"10.0.0.2": "node2"})
    assert [s.what.split(":")[-1].strip() for s in suspects] == ["connecting, no answer",
                                                                  "29500"]  # and no store connection
    assert "no connection to the master's store 10.0.0.1:29500" in suspects[1].what


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 7),
                          st.lists(st.sampled_from([ALL_REDUCE, LOAD_SHARD, (Frame("f", "x.py", 1),), ()]), max_size=1)),
                max_size=12))
def test_every_readable_rank_is_in_exactly_one_group(items):
    ranks = [RankStack(host, number, None, 1, (ThreadStack("MainThread", None, frames[0]),) if frames else ())
             for host, number, frames in items]
    call = roll_call(ranks)
    grouped = [r for g in call.groups for r in g.ranks]
    assert sorted(map(id, grouped)) == sorted(id(r) for r in ranks if r.frames)
    assert isinstance(call.evidence(), str)
