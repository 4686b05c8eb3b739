"""The run's first failure is the process that failed first by its own fault (issue 39), named
from torchrun's own reports captured on the rehearsal cluster (tests/fixtures/torchrun_failures/):
never a survivor whose barrier broke because a peer went away, with the global rank computed
from the plan (node's first rank + local rank)."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings, strategies as st
from clusterctl_helpers import examples

from clusterctl.inventory.load import parse_inventory
from clusterctl.watch.failures import Ended, first_failure, first_ranks_of, rank_lines
from clusterctl.watch.torchrun_report import first_failed_process

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "torchrun_failures"
INVENTORY = parse_inventory("""
name: culprit
hosts: [{name: node1, address: 198.18.0.11}, {name: node2, address: 198.18.0.12}, {name: node3, address: 198.18.0.13}]
job: {command: [train.py], nproc_per_node: 2}
""", "inv.yaml")
TOPOLOGY = [{"host": "node1", "ranks": [0, 1]}, {"host": "node2", "ranks": [2, 3]}, {"host": "node3", "ranks": [4, 5]}]


def _tails(case: str) -> dict[str, str]:
    return {p.name.split(".")[0]: p.read_text() for p in sorted((CAPTURED / case).glob("*.agent.log"))}


def test_torchrun_report_gives_the_failed_local_rank_its_exit_code_and_the_time_to_the_microsecond():
    tails = _tails("own_error_rank3_barrier")
    own = first_failed_process(tails["node2"])
    assert (own.local_rank, own.rank, own.exit_code, own.signal_name) == (1, 3, 3, None)
    survivor = first_failed_process(tails["node1"])
    assert (survivor.local_rank, survivor.exit_code) == (1, 1)
    # the survivor's agent saw its rank fail 58 ms before node2's agent noticed rank 3's exit: time
    # alone names the survivor, so a failure of one's own comes before any time
    assert survivor.at < own.at


def test_a_rank_exiting_with_its_own_error_is_named_not_the_survivor_whose_barrier_broke():
    tails = _tails("own_error_rank3_barrier")
    # the controller noticed node1 end first (as the polls did in the captured run)
    ended = [Ended("node1", 100.0, False, 1, tails["node1"]), Ended("node3", 100.4, False, 1, tails["node3"]),
             Ended("node2", 100.9, False, 1, tails["node2"])]
    first = first_failure(INVENTORY, ended, poll_s=1.0, lost_after_s=7, first_ranks=first_ranks_of(TOPOLOGY))
    assert (first["host"], first["rank"], first["rank_exit_code"]) == ("node2", 3, 3), first
    assert first["exit_code"] == 1  # the node's torchrun's, as before
    assert "own error of rank 3" in first["diagnosis"][0]["evidence"]
    assert first["diagnosis"][0]["host"] == "node2" and first["diagnosis"][0]["rank"] == 3


def test_the_global_rank_comes_from_the_plan_not_from_a_local_rank():
    tails = _tails("own_error_rank3_barrier")
    shifted = {"node1": 0, "node2": 10, "node3": 20}  # node2's ranks start at 10 in this plan
    first = first_failure(INVENTORY, [Ended("node2", 1.0, False, 1, tails["node2"])], 1.0, 7, first_ranks=shifted)
    assert first["rank"] == 11


def test_of_two_own_failures_the_earlier_by_torchruns_clock_is_named():
    def report(local, code, clock):
        return (f"E1127 {clock} 37 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: {code}) "
                f"local_rank: {local} (pid: 49) of binary: /usr/bin/python3\n[rank{local}]: own error\n")

    later = Ended("node1", 10.0, False, 1, report(1, 3, "04:45:17.900000"))
    earlier = Ended("node3", 10.8, False, 1, report(1, 7, "04:45:16.400000"))
    first = first_failure(INVENTORY, [later, earlier], 1.0, 7, first_ranks=first_ranks_of(TOPOLOGY))
    assert (first["host"], first["rank"], first["rank_exit_code"]) == ("node3", 5, 7)


def test_a_worker_stopped_by_sigterm_or_one_that_saw_a_peer_go_is_never_named_over_an_own_failure():
    stopped = ("E1127 04:45:10.000000 1 api.py:1] failed (exitcode: -15) local_rank: 0 (pid: 2) of binary: x\n")
    peer = ("E1127 04:45:10.100000 1 api.py:1] failed (exitcode: 1) local_rank: 0 (pid: 2) of binary: x\n"
            "[rank4]: RuntimeError: Connection closed by peer [198.19.0.12]:4313\n")
    killed = ("E1127 04:45:12.000000 1 api.py:1] failed (exitcode: -9) local_rank: 1 (pid: 3) of binary: x\n")
    first = first_failure(INVENTORY, [Ended("node1", 1.0, False, 1, stopped), Ended("node3", 1.1, False, 1, peer),
                                      Ended("node2", 5.0, False, 1, killed)], 1.0, 7,
                          first_ranks=first_ranks_of(TOPOLOGY))
    assert (first["host"], first["rank"], first["signal"]) == ("node2", 3, "SIGKILL")


def test_when_every_failure_only_saw_a_peer_go_someone_sensible_is_still_named():
    peer = "[rank0]: RuntimeError: Connection closed by peer [198.19.0.12]:4313\n"
    first = first_failure(INVENTORY, [Ended("node1", 1.0, False, 1, peer), Ended("node3", 1.2, False, 1, peer)],
                          1.0, 7, first_ranks=first_ranks_of(TOPOLOGY))
    assert first["host"] in ("node1", "node3") and first["diagnosis"]


def test_a_lost_node_among_the_earliest_is_named_lost():
    first = first_failure(INVENTORY, [Ended("node3", 1.0, True, None, ""), Ended("node1", 1.2, False, 1, "x")],
                          1.0, 7)
    assert first["host"] == "node3" and first["diagnosis"][0]["cause"] == "node_unreachable"


def test_rank_lines_reads_torchs_prefix_and_the_agent_logs():
    text = "[node2 rank3]: own error\n[rank2]: Connection closed by peer\n[node2 rank2]: more\nplain\n"
    assert rank_lines(text, 3) == "[node2 rank3]: own error"
    assert rank_lines(text, 9) == text


@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=400))
def test_any_text_gives_a_report_or_none_and_never_raises(text):
    process = first_failed_process(text)
    assert process is None or process.local_rank >= 0


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(0, 63), st.integers(-64, 255), st.integers(0, 23), st.integers(0, 59))
def test_any_well_formed_agent_line_is_read_back(local, code, hour, minute):
    line = (f"E0102 {hour:02d}:{minute:02d}:07.250000 12 torch/distributed/elastic/multiprocessing/api.py:9] "
            f"failed (exitcode: {code}) local_rank: {local} (pid: 77) of binary: /usr/bin/python3")
    process = first_failed_process(line)
    assert (process.local_rank, process.exit_code) == (local, code)


def test_a_sigkill_with_no_kernel_record_is_not_called_the_oom_killer_with_confidence():
    from clusterctl.watch.kernel_log import NO_RECORD, with_kernel_log

    guessed = {"host": "node2", "rank": 3, "signal": "SIGKILL", "diagnosis": [
        {"cause": "oom_killed", "confidence": 0.89, "evidence": "exitcode  : -9 (pid: 1733)  (SIGKILL)"}]}
    told = with_kernel_log(guessed, [])
    assert told["kernel_log"] == [NO_RECORD]
    assert told["diagnosis"][0]["confidence"] <= 0.4 and "not confirmed" in told["diagnosis"][0]["evidence"]


def test_a_sigkill_with_the_kernels_oom_line_is_the_oom_killer_quoting_that_line():
    from clusterctl.watch.kernel_log import with_kernel_log

    line = ("[ 5123.456789] Out of memory: Killed process 48213 (python3) total-vm:98765432kB, anon-rss:81234567kB, "
            "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:160000kB oom_score_adj:0")
    told = with_kernel_log({"host": "node2", "rank": 3, "signal": "SIGKILL", "diagnosis": []}, [line])
    assert told["diagnosis"][0]["cause"] == "oom_killed" and told["diagnosis"][0]["rank"] == 3
    assert "Killed process 48213" in told["diagnosis"][0]["evidence"] and told["kernel_log"] == [line]
