"""`clusterctl logs`, `clusterctl stop` and the runs of `clusterctl status` (issue 27, long runs), their pure
parts: the arguments, which node holds a rank (run.json's topology), the lines read back from a node, the
runs listing, the lock that keeps one run of a cluster at a time. What runs on this machine is in
tests/local/test_logs_stop.py."""
from __future__ import annotations

import io
import json
import os
import time

import pytest

from clusterctl.cli import build_parser
from clusterctl.errors import StateError
from clusterctl.plan import wrapper as agent
from clusterctl.ground import records
from clusterctl.watch.logs import LogLine, NodeLines, NodeSlice, node_of_rank, select
from clusterctl.render import Renderer
from clusterctl.state import State

# the topology of a run.json as `clusterctl run` writes it (backends/run_flow.py `summary_of`)
TOPOLOGY = [
    {"host": "node1", "node_rank": 0, "ranks": [0, 1], "gpus": None, "nic": None, "local_addr": "10.0.0.1"},
    {"host": "node2", "node_rank": 1, "ranks": [2, 3], "gpus": None, "nic": None, "local_addr": "10.0.0.2"},
]


def _record(run_id: str, **fields) -> dict:
    base = {"run_id": run_id, "cluster": "c1", "world_size": 4, "nproc_per_node": 2, "nnodes": 2,
            "master": {"host": "node1", "address": "10.0.0.1", "port": 29500}, "topology": TOPOLOGY,
            "notes": [], "outputs": "/workspace/output", "commands": {}, "started": 1700000000.0,
            "state": "running", "exit_code": None, "inventory": "/nowhere/inventory.yaml"}
    return {**base, **fields}


def _ended(run_id: str, exit_code: int, **fields) -> dict:
    return _record(run_id, **{"state": "ended", "exit_code": exit_code, "ended": 1700000100.0, "duration_s": 100.0,
                               "nodes": {"node1": {"exit_code": exit_code, "lost": False, "run_dir": "/x"}},
                               "first_failure": None, "interrupted": False, **fields})


def _write(state: State, record: dict) -> None:
    state.write_json(state.run_dir(record["run_id"]) / "run.json", record)


# --------------------------------------------------------------------------- arguments


def test_logs_and_stop_take_a_run_and_their_options():
    parser = build_parser()
    args = parser.parse_args(["logs", "20250101-120000-abcdef", "--node", "node2", "--rank", "3", "--tail", "5", "-f"])
    assert (args.run, args.node, args.rank, args.tail, args.follow) == ("20250101-120000-abcdef", "node2", 3, 5, True)
    args = parser.parse_args(["logs"])
    assert (args.run, args.node, args.rank, args.tail, args.follow) == (None, None, None, None, False)
    assert parser.parse_args(["stop", "R1"]).run == "R1" and parser.parse_args(["stop"]).run is None


@pytest.mark.parametrize("bad", [["--tail", "x"], ["--tail", "-1"], ["--rank", "²"], ["--rank", "1.5"]])
def test_logs_refuses_what_is_not_a_whole_number(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["logs", *bad])
    assert exc.value.code == 2 and "not a whole number" in capsys.readouterr().err


# --------------------------------------------------------------------------- which node holds a rank


def test_a_global_rank_maps_to_its_node_and_local_rank():
    assert node_of_rank(TOPOLOGY, 0) == ("node1", 0)
    assert node_of_rank(TOPOLOGY, 3) == ("node2", 1)
    assert node_of_rank(TOPOLOGY, 4) is None


def test_select_reads_every_node_a_node_or_one_rank():
    assert select(TOPOLOGY) == [NodeSlice("node1", 0, 2, (0, 1), True), NodeSlice("node2", 2, 2, (0, 1), True)]
    assert select(TOPOLOGY, node="node2") == [NodeSlice("node2", 2, 2, (0, 1), True)]
    assert select(TOPOLOGY, rank=3) == [NodeSlice("node2", 2, 2, (1,), False, only_rank=3)]
    assert select(TOPOLOGY, node="node2", rank=2) == [NodeSlice("node2", 2, 2, (0,), False, only_rank=2)]


@pytest.mark.parametrize("node, rank, says", [
    ("node9", None, "no node 'node9'; its nodes: node1, node2"),
    (None, 4, "no rank 4; its ranks are 0-3"),
    ("node1", 3, "rank 3 ran on node2, not on node1 (ranks 0-1)"),
])
def test_select_says_what_the_run_does_not_have(node, rank, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        select(TOPOLOGY, node=node, rank=rank)


# --------------------------------------------------------------------------- lines back from a node


def test_a_nodes_stream_becomes_lines_of_its_global_ranks_and_torchruns_own():
    part = select(TOPOLOGY, node="node2")[0]
    att = b"20250101-x_abc/attempt_0"
    stream = (b"clusterctl-follow " + att + b"\n==> " + att + b"/1/stdout.log <==\nstep 1\nloss 0.5\n"
              b"\n==> " + att + b"/0/stderr.log <==\nwarn: secret-token-1 \x1b]0;title\x07\n"
              b"\n==> agent.log <==\n[node2 rank3]: step 1\nW torchrun says\n"
              b"\n==> " + att + b"/0/stdout.log <==\n 10%|#\r 50%|#####\r")
    lines = NodeLines(part, mask=lambda t: t.replace("secret-token-1", "***"))
    got = lines.feed(stream[:37]) + lines.feed(stream[37:]) + lines.finish()
    assert got == [
        LogLine("node2", 3, "stdout", "step 1"), LogLine("node2", 3, "stdout", "loss 0.5"),
        LogLine("node2", 2, "stderr", "warn: *** \x1b]0;title\x07"),
        LogLine("node2", None, "stdout", "W torchrun says"),  # torchrun's copy of rank 3's line is dropped
        LogLine("node2", 2, "stdout", " 50%|#####"),  # a redrawn line: its latest state
    ]
    assert [line.prefix for line in got[2:4]] == ["[node2 r2]", "[node2]"]
    assert got[0].to_json() == {"host": "node2", "rank": 3, "stream": "stdout", "text": "step 1"}


def test_without_per_rank_files_the_ranks_lines_come_from_agent_log_and_rank_selects():
    part = select(TOPOLOGY, rank=2)[0]
    lines = NodeLines(part)
    got = lines.feed(b"clusterctl-follow \n==> agent.log <==\n[node2 rank2]: mine\n[node2 rank3]: not mine\n"
                     b"torchrun\n") + lines.finish()
    assert got == [LogLine("node2", 2, "stdout", "mine")]


# --------------------------------------------------------------------------- the node agent's poll


@pytest.mark.parametrize("stdout, code, stopped", [
    ("running\n", None, False), ("exit 0\n", 0, False), ("exit 143 stopped\n", 143, True), ("exit x\n", 1, False),
])
def test_the_poll_says_when_clusterctl_stop_ended_the_nodes_torchrun(stdout, code, stopped):
    assert agent.parse_poll(stdout) == code and agent.poll_says_stopped(stdout) is stopped


# --------------------------------------------------------------------------- runs and the lock


def test_runs_are_listed_newest_first_with_what_became_of_them(tmp_path):
    state = State(tmp_path / "state")
    _write(state, _ended("20250101-100000-aaaaaa", 0))
    _write(state, _ended("20250101-110000-bbbbbb", 1, first_failure={
        "host": "node2", "rank": 3, "exit_code": 1, "log_tail": ["x"],
        "diagnosis": [{"cause": "oom", "host": "node2", "rank": 3, "evidence": "CUDA out of memory", "fix": "f"}]}))
    _write(state, _record("20250101-120000-cccccc"))  # its controller is gone (no lock held)
    _write(state, {**_ended("20250101-130000-dddddd", 1), "state": "stopped", "stopped": True})
    _write(state, _ended("20250101-140000-eeeeee", 130, interrupted=True))
    _write(state, _record("20250101-150000-ffffff"))
    with state.lock(records.run_lock("c1"), "a `clusterctl run`", run_id="20250101-150000-ffffff"):
        runs = records.list_runs(state)
    assert [(r.run_id[-6:], r.state) for r in runs] == [
        ("ffffff", "running"), ("eeeeee", "interrupted"), ("dddddd", "stopped"), ("cccccc", "unknown"),
        ("bbbbbb", "failed"), ("aaaaaa", "succeeded")]
    failed = runs[4].to_json()
    assert failed == {"run_id": "20250101-110000-bbbbbb", "state": "failed", "started": 1700000000.0,
                      "ended": 1700000100.0, "exit_code": 1, "world_size": 4, "nodes": ["node1", "node2"],
                      "cluster": "c1", "first_failure": {"host": "node2", "rank": 3, "cause": "oom",
                                                         "evidence": "CUDA out of memory"}, "stalled_s": None, "stragglers": [],
                      "attempts": []}
    assert [r.run_id[-6:] for r in records.list_runs(state, limit=2)] == ["ffffff", "eeeeee"]
    # the lock released: the record that says running has no controller any more
    assert records.list_runs(state)[0].state == "unknown"


def test_a_second_run_is_refused_naming_the_run_in_progress_and_how_to_stop_it(tmp_path):
    state = State(tmp_path / "state")
    with state.lock("run-c1", "a `clusterctl run`", run_id="20250101-120000-abcdef"):
        assert state.lock_holder("run-c1")["run_id"] == "20250101-120000-abcdef"
        other = State(tmp_path / "state")
        with pytest.raises(StateError) as exc:
            with other.lock("run-c1", "a `clusterctl run`"):
                pass
    error = exc.value
    assert error.what.startswith("a `clusterctl run` is already in progress on this cluster (run 20250101-120000-abcdef, "
                                 f"pid {os.getpid()} since ")
    assert error.fix == "wait for it to end, or stop it: `clusterctl stop 20250101-120000-abcdef`"
    assert state.lock_holder("run-c1") is None


def test_a_lock_file_of_an_older_clusterctl_is_still_named(tmp_path):
    import fcntl

    state = State(tmp_path / "state")
    path = state._lock_path("run-c1")
    path.write_text("pid 4242 since 10:00:00")
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StateError, match=r"\(pid 4242 since 10:00:00\)"):
            with state.lock("run-c1", "a `clusterctl run`"):
                pass
    finally:
        os.close(fd)


def test_the_busy_fix_names_the_run_seen_on_the_nodes():
    from clusterctl.backends.run_flow import busy_fix

    busy = "run 20250101-120000-abcdef (2 process(es) of this cluster already run on node1, pid 7: torchrun)"
    assert busy_fix(busy).startswith("wait for it to end, or stop it: `clusterctl stop 20250101-120000-abcdef`")
    assert "clusterctl down" in busy_fix("2 process(es) of this cluster already run on node1, pid 7: x")
    assert "`clusterctl stop on`" not in busy_fix("2 process(es) of this cluster already run on node1, pid 7: x")


# --------------------------------------------------------------------------- rendering


def test_log_lines_go_to_stdout_terminal_safe_and_never_as_markup(capsys):
    renderer = Renderer()
    renderer.log_line("[node2 r3]", "[bold red]x\x1b[2J\x9b")
    out = capsys.readouterr().out
    assert out == "[node2 r3] [bold red]x\\x1b[2J\\x9b\n"
    Renderer(json_mode=True).log_line("[node2 r3]", "nothing")
    assert capsys.readouterr().out == ""


def test_the_runs_table_shows_state_and_first_failure():
    stream = io.StringIO()
    renderer = Renderer(stream=stream)
    renderer.console.width = 200
    state_runs = [records.RunEntry("20250101-110000-bbbbbb", "failed", 1700000000.0, 1700000100.0, 1,
                                   {"host": "node2", "rank": 3, "cause": "oom", "evidence": "e"}, 4, ["node1"], "c1"),
                  records.RunEntry("20250101-100000-aaaaaa", "stopped\x1b[2J", None, None, None, None, None, [], None)]
    renderer.runs_table(state_runs)
    text = stream.getvalue()
    assert "20250101-110000-bbbbbb" in text and "node2 rank 3 oom" in text and "\x1b" not in text
