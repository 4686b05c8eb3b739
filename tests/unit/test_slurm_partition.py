"""sinfo/squeue/salloc outputs (captured from slurm-wlm 22.05.8, tests/fixtures/slurm/README.md)
and the checks made before a job is submitted. Pure."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, strategies as st

from clusterctl.models import CheckStatus, SchedulerSpec
from clusterctl.slurm import partition as part

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def statuses(results) -> dict:
    return {r.check: r.status for r in results}


def test_idle_partitions_are_read_with_their_default_limit_and_nodes():
    debug, short = part.parse_sinfo(fixture("sinfo_idle.txt"))
    assert (debug.name, debug.default, debug.available, debug.time_limit) == ("debug", True, "up", 3600)
    assert (short.name, short.default, short.time_limit) == ("short", False, 60)
    assert (debug.total, debug.usable, debug.idle) == (2, 2, 2)


def test_a_partially_used_node_is_mixed_not_idle():
    debug = part.parse_sinfo(fixture("sinfo_one_allocated.txt"))[0]
    assert (debug.total, debug.usable, debug.idle) == (2, 2, 1)


def test_a_draining_node_is_not_usable():
    debug = part.parse_sinfo(fixture("sinfo_drained.txt"))[0]
    assert (debug.total, debug.usable, debug.idle) == (2, 1, 0)


def test_a_partition_set_down_is_read_down():
    short = part.parse_sinfo(fixture("sinfo_part_down.txt"))[1]
    assert short.available == "down"


def test_sinfo_says_nothing_of_an_unknown_partition():
    assert part.parse_sinfo(fixture("sinfo_nosuch.txt")) == ()


def test_squeue_lines_become_jobs_with_their_reason():
    jobs = part.parse_squeue(fixture("squeue_pending.txt"))
    assert [(j.job_id, j.state, j.nodes, j.reason) for j in jobs] == [
        ("3", "pending", 2, "Resources"), ("1", "running", 1, "None"), ("2", "running", 2, "None")]
    assert jobs[2].nodelist == "node[1-2]"


def test_salloc_job_ids_granted_or_pending():
    assert part.parse_job_id(fixture("salloc.txt")) == "1"
    assert part.parse_job_id(fixture("salloc_pend.txt")) == "3"
    assert part.parse_job_id(fixture("salloc_nosuch.txt")) is None


def test_node_addresses_once_per_node():
    assert part.parse_node_addresses(fixture("sinfo_nodes.txt")) == {"node1": "198.18.0.11", "node2": "198.18.0.12"}


def test_node_state_flags_are_read():
    assert part.node_state("idle*") == "not_responding"
    assert part.node_state("mixed+cloud") == "mixed"
    assert part.node_state("IDLE~") == "idle"
    assert part.node_state("drained") == "drained"


IDLE = part.parse_sinfo(fixture("sinfo_idle.txt"))


def test_two_idle_nodes_in_the_default_partition_pass():
    results = part.presubmit_checks(SchedulerSpec(time="00:10:00"), 2, IDLE, ())
    assert statuses(results) == {"slurm.partition": CheckStatus.PASS, "slurm.nodes": CheckStatus.PASS,
                                 "slurm.time": CheckStatus.PASS}
    assert "debug (default)" in results[0].detail


def test_a_missing_partition_is_refused_naming_the_real_ones():
    (result,) = part.presubmit_checks(SchedulerSpec(partition="gpu"), 2, IDLE, ())
    assert result.status is CheckStatus.FAIL
    assert "partition gpu does not exist" in result.detail and "debug, short" in result.detail


def test_more_nodes_than_the_partition_has_are_refused():
    results = part.presubmit_checks(SchedulerSpec(partition="debug"), 5, IDLE, ())
    nodes = next(r for r in results if r.check == "slurm.nodes")
    assert nodes.status is CheckStatus.FAIL and "has 2" in nodes.detail and "2 or fewer" in nodes.fix


def test_drained_nodes_do_not_count_and_are_named():
    results = part.presubmit_checks(SchedulerSpec(), 2, part.parse_sinfo(fixture("sinfo_drained.txt")), ())
    nodes = next(r for r in results if r.check == "slurm.nodes")
    assert nodes.status is CheckStatus.FAIL and "1 of them down or drained" in nodes.detail


def test_busy_nodes_warn_that_the_job_waits():
    queue = part.parse_squeue(fixture("squeue_pending.txt"))
    results = part.presubmit_checks(SchedulerSpec(), 2, part.parse_sinfo(fixture("sinfo_one_allocated.txt")), queue)
    nodes = next(r for r in results if r.check == "slurm.nodes")
    assert nodes.status is CheckStatus.WARN and "1 idle of 2" in nodes.detail and "1 job(s) pending" in nodes.detail


def test_a_time_over_the_partition_limit_is_refused():
    results = part.presubmit_checks(SchedulerSpec(partition="short", time="00:10:00"), 1, IDLE, ())
    time = next(r for r in results if r.check == "slurm.time")
    assert time.status is CheckStatus.FAIL and "too short" in time.detail and "00:01:00 or less" in time.fix


def test_a_down_partition_is_refused():
    results = part.presubmit_checks(SchedulerSpec(partition="short"), 1, part.parse_sinfo(fixture("sinfo_part_down.txt")), ())
    assert results[0].status is CheckStatus.FAIL and "is down" in results[0].detail


def test_no_default_partition_and_none_asked_for_is_refused():
    (result,) = part.presubmit_checks(SchedulerSpec(), 1, IDLE[1:], ())
    assert result.status is CheckStatus.FAIL and "no default" in result.detail


LINES = st.lists(st.one_of(
    st.text(max_size=30),
    st.builds("|".join, st.lists(st.text(alphabet="abc*~01:-|% \t", max_size=8), min_size=4, max_size=10)),
), max_size=8).map("\n".join)


@given(LINES)
def test_the_parsers_never_crash_on_arbitrary_text(text):
    partitions = part.parse_sinfo(text)
    part.parse_squeue(text)
    part.parse_job_id(text)
    part.parse_node_addresses(text)
    for nodes in (1, 3):
        part.presubmit_checks(SchedulerSpec(time="1:00"), nodes, partitions, ())
