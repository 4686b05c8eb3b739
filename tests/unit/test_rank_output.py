"""A node's silence, as the detached stall watch measures it (node/rank_output.py): the flight recorder's dump
lines, which the straggler watch's rounds make every rank print, are not the job's output (issue 49).

The dump line is torch's own, captured on 2 x H200 (tests/fixtures/flight_recorder/SOURCES.md)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import given, settings, strategies as st

from clusterctl.node import collective_waits, node_agent, rank_output
from clusterctl.node.safe_files import Dir

HELD = Path(__file__).resolve().parents[1] / "fixtures" / "flight_recorder" / "nccl_h200_ddp_tutorial_rank1_held"
DUMP = (HELD / "rank0_stderr_dump_line.txt").read_text().strip() + "\n"
T0 = 1_700_000_000.0  # the job's last own output


def _run(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A node's run dir as torchrun lays it out: agent.log, and two ranks' logs under its attempt dir."""
    run = tmp_path / "run"
    logs = [run / "agent.log"]
    for rank in ("0", "1"):
        rank_dir = run / "r1_torchrun" / "attempt_0" / rank
        rank_dir.mkdir(parents=True)
        logs += [rank_dir / "stdout.log", rank_dir / "stderr.log"]
    for log in logs:
        log.write_text("step 10 loss 0.5\n")
        os.utime(log, (T0, T0))
    return run, logs


def _append(path: Path, text: str, at: float) -> None:
    with path.open("a") as f:
        f.write(text)
    os.utime(path, (at, at))


def _last(run: Path):
    with Dir.open(str(run)) as d:
        return rank_output.last_output(d)


def _mark(run: Path) -> None:
    with Dir.open(str(run)) as d:
        rank_output.mark(d)


def test_the_dump_lines_of_round_after_round_leave_a_silent_job_silent(tmp_path):
    run, logs = _run(tmp_path)
    stderr0, agent = logs[2], logs[0]
    for round_ in range(1, 4):  # three rounds, each: mark, then the dumps print their lines
        _mark(run)
        _append(stderr0, DUMP, T0 + 15 * round_)
        _append(agent, "[default0]:" + DUMP, T0 + 15 * round_)  # torchrun's tee, prefixed
        assert _last(run) == T0
    with Dir.open(str(run)) as d:
        report = node_agent._report(d)
    assert report["ranks"] == 2 and report["silent_s"] > 1e6  # as silent as since T0


def test_output_of_the_job_beside_a_dump_line_counts(tmp_path):
    run, logs = _run(tmp_path)
    _mark(run)
    _append(logs[2], DUMP + "step 11 loss 0.4\n", T0 + 15)
    assert _last(run) == T0 + 15
    _mark(run)  # the next round keeps what the job last wrote, not what the mark saw first
    _append(logs[2], DUMP, T0 + 30)
    assert _last(run) == T0 + 15


def test_without_a_mark_or_after_a_rewrite_every_change_counts(tmp_path):
    run, logs = _run(tmp_path)
    _append(logs[2], DUMP, T0 + 15)  # no round marked the logs: the line is not known to be a dump's
    assert _last(run) == T0 + 15
    _mark(run)
    logs[2].write_text("x")  # truncated and rewritten: output
    os.utime(logs[2], (T0 + 20, T0 + 20))
    assert _last(run) == T0 + 20
    _mark(run)
    _append(logs[4], DUMP * 40, T0 + 30)  # more than a round's lines: output
    assert _last(run) == T0 + 30


def test_a_forged_or_torn_marks_file_never_makes_the_node_busier_than_its_files(tmp_path):
    run, logs = _run(tmp_path)
    for forged in ("{", "[]", json.dumps({"agent.log": [17, T0, T0 + 1e9]}),
                   json.dumps({"agent.log": ["17", T0, T0]}), "x" * (rank_output.MAX_MARKS_BYTES + 1)):
        (run / rank_output.MARKS).write_text(forged)
        assert _last(run) == T0
    (run / rank_output.MARKS).unlink()
    (run / rank_output.MARKS).symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text(json.dumps({"agent.log": [17, T0, T0 - 100]}))
    assert _last(run) == T0  # a link is not read


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([DUMP, "[default1]:" + DUMP, "\n", "loss 0.3\n", "Traceback (most recent call last):\n",
                                 "ProcessGroupNCCL preparing\n"]), min_size=1, max_size=6))
def test_any_bytes_but_dump_lines_are_output(tmp_path_factory, pieces):
    run, logs = _run(tmp_path_factory.mktemp("r"))
    _mark(run)
    _append(logs[3], "".join(pieces), T0 + 15)
    only_dumps = any(p.strip() for p in pieces) and all(not p.strip() or "preparing to dump debug info." in p
                                                        for p in pieces)
    assert _last(run) == (T0 if only_dumps else T0 + 15)


def test_a_round_marks_the_logs_before_it_pokes_so_its_dump_line_is_not_output(tmp_path):
    run, logs = _run(tmp_path)
    os.mkfifo(run / "fr_pipe_1.pipe")
    reader = os.open(run / "fr_pipe_1.pipe", os.O_RDONLY | os.O_NONBLOCK)  # the rank's watchdog, as torch opens it
    try:
        with Dir.open(str(run)) as d:
            [line] = collective_waits.node_round(d)
        assert line["poked"] and os.read(reader, 16) == b"1"
    finally:
        os.close(reader)
    _append(logs[4], DUMP, T0 + 15)  # the rank answers the poke
    assert _last(run) == T0
