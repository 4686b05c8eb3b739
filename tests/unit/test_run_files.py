"""The controller's operations on a node's run dir (node/run_files.py, node/follow_files.py), run here
in-process on real directories: a hostile job's links to a root-only file outside the run, its FIFOs and
its directories made first are refused or replaced, never followed; the victim is neither read nor
changed. The node-side program as the controller sends it (plan/node_files.py) is checked by argv."""
from __future__ import annotations

import io
import os
import stat
import sys

import pytest

from clusterctl.node import follow_files, run_files
from clusterctl.node.safe_files import Refused
from clusterctl.plan import node_files, wrapper

SECRET = b"root-only SECRET key\n"


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.key"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "outputs" / "logs" / "r1" / "h1"
    (run / "r1_x" / "attempt_0" / "0").mkdir(parents=True)
    return run


def _call(monkeypatch, operation, run, *args, stdin=b""):
    """(stdout, stderr, exit code) of `run_files.py OPERATION BASE REL ARGS`, as the node runs it."""
    out, err = io.BytesIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out))
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    base, rel = node_files.split_run_path(str(run))
    try:
        code = run_files.main([operation, base, rel, *args])
    except SystemExit as ended:
        code = ended.code
    sys.stdout.flush()
    got = out.getvalue(), err.getvalue(), code
    monkeypatch.undo()
    return got


def _untouched(victim):
    st = victim.stat()
    return victim.read_bytes() == SECRET and stat.S_IMODE(st.st_mode) == 0o600


def test_the_poll_renews_no_linked_lease_and_reads_no_linked_exit(monkeypatch, run_dir, victim):
    (run_dir / "lease").symlink_to(victim)
    before = victim.stat().st_mtime_ns
    out, err, code = _call(monkeypatch, "poll", run_dir)
    assert (out, code) == (b"running\n", 0) and "symbolic link" in err
    (run_dir / "agent.exit").symlink_to(victim)
    out, err, code = _call(monkeypatch, "poll", run_dir)
    assert code == run_files.REFUSED_EXIT and SECRET not in out and "agent.exit" in err
    assert _untouched(victim) and victim.stat().st_mtime_ns == before
    (run_dir / "agent.exit").unlink()
    (run_dir / "agent.exit").write_text("0\n")
    (run_dir / "stopped").write_text("x")
    assert _call(monkeypatch, "poll", run_dir)[0] == b"exit 0 stopped\n"


@pytest.mark.parametrize("written, said", [
    ("0\n", b"exit 0\n"), ("137 and more text a job wrote\n", b"exit 137\n"), ("", b"exit ?\n"),
    ("x" * 40 + "\n", b"exit " + b"x" * 12 + b"\n"),
])
def test_the_poll_says_the_exit_file_s_first_word_alone_as_the_live_stream_does(monkeypatch, run_dir, written, said):
    """One reading of agent.exit for the poll, `stop`'s await, `top` and the stream (safe_files.first_word): what
    else a job wrote there stays on the node, and an empty file is a failed run, not one still running."""
    (run_dir / "agent.exit").write_text(written)
    out = _call(monkeypatch, "poll", run_dir)[0]
    assert out == said
    assert wrapper.parse_poll(out.decode()) == (0 if said == b"exit 0\n" else 137 if b"137" in said else 1)


def test_the_poll_of_a_linked_run_dir_goes_nowhere(monkeypatch, tmp_path, victim):
    run = tmp_path / "outputs" / "logs" / "r1" / "h1"
    run.parent.mkdir(parents=True)
    run.symlink_to(victim.parent)  # the job made its whole run dir a link to /root
    out, err, code = _call(monkeypatch, "poll", run)
    assert code == run_files.REFUSED_EXIT and not (victim.parent / "lease").exists()


def test_stop_replaces_a_linked_mark_instead_of_writing_through_it(monkeypatch, run_dir, victim):
    (run_dir / "stopped").symlink_to(victim)
    assert _call(monkeypatch, "mark-stopped", run_dir, "clusterctl stop from here")[0] == b"marked\n"
    assert _untouched(victim) and (run_dir / "stopped").read_text() == "clusterctl stop from here\n"
    assert _call(monkeypatch, "mark-stopped", run_dir.parent / "nope", "x")[0] == b"no run dir\n"


@pytest.mark.parametrize("operation,args,name", [
    ("tail", ("agent.log", "30"), "agent.log"),
    ("state", ("supervisor.json",), "supervisor.json"),
    ("logs", ("+1", "0", "1", "0"), "r1_x/attempt_0/0/stdout.log"),
    ("probe", (), "metrics.jsonl"),
    ("dumps", ("16", "1000"), "nccl_trace_rank_0"),
])
def test_no_read_prints_a_root_only_file_through_a_link(monkeypatch, run_dir, victim, operation, args, name):
    (run_dir / name).symlink_to(victim)
    if operation == "probe":
        (run_dir / "r1_x" / "attempt_0" / "0" / "stdout.log").symlink_to(victim)
    out, err, code = _call(monkeypatch, operation, run_dir, *args)
    assert b"SECRET" not in out and "SECRET" not in err and _untouched(victim)


def test_a_fifo_swapped_in_is_never_opened(monkeypatch, run_dir):
    os.mkfifo(run_dir / "agent.log")  # a blocking open of a FIFO would hang the read
    out, err, code = _call(monkeypatch, "tail", run_dir, "agent.log", "5")
    assert code == run_files.REFUSED_EXIT and "not a regular file (other)" in err


def test_the_logs_stream_is_tails_and_its_last_lines(monkeypatch, run_dir):
    (run_dir / "r1_x" / "attempt_0" / "0" / "stdout.log").write_bytes(b"a\nb\nc")
    (run_dir / "agent.log").write_bytes(b"torchrun\n")
    out, _, _ = _call(monkeypatch, "logs", run_dir, "+1", "0", "1", "0")
    assert out == (b"clusterctl-follow r1_x/attempt_0\n==> r1_x/attempt_0/0/stdout.log <==\na\nb\nc"
                   b"\n==> agent.log <==\ntorchrun\n")
    out, _, _ = _call(monkeypatch, "logs", run_dir, "2", "0", "0", "0")
    assert out == b"clusterctl-follow r1_x/attempt_0\n==> r1_x/attempt_0/0/stdout.log <==\nb\nc"


@pytest.mark.parametrize("data,count,expected", [(b"", 3, b""), (b"a\nb\n", 1, b"b\n"), (b"a\nb", 1, b"b"),
                                                 (b"a\nb\n", 0, b""), (b"a\n", 5, b"a\n")])
def test_last_lines_counts_as_tail_does(data, count, expected):
    assert follow_files.last_lines(data, count) == expected


def test_the_set_aside_never_moves_the_run_dir_into_a_directory_someone_made_first(monkeypatch, run_dir):
    planted = run_dir.parent / "h1.attempt-1"
    (planted / "theirs").mkdir(parents=True)
    out, err, code = _call(monkeypatch, "set-aside", run_dir, "1")
    assert code == run_files.REFUSED_EXIT and str(planted) in err
    assert run_dir.is_dir() and not (planted / "h1").exists()


def test_the_set_aside_replaces_only_its_own_earlier_one(monkeypatch, run_dir):
    earlier = run_dir.parent / "h1.attempt-1"
    earlier.mkdir(mode=0o700)
    (earlier / "agent.log").write_text("old")
    assert _call(monkeypatch, "set-aside", run_dir, "1")[2] == 0
    assert (earlier / "r1_x").is_dir() and not run_dir.exists()


def test_a_run_dir_another_user_made_first_gets_no_env(monkeypatch, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making a directory of another user takes root")
    run = tmp_path / "outputs" / "logs" / "r1" / "h1"
    run.mkdir(parents=True, mode=0o700)
    os.chown(run, 65534, 65534)
    out, err, code = _call(monkeypatch, "write-env", run, "0", stdin=b"HF_TOKEN=x\n")
    assert code == run_files.REFUSED_EXIT and f"refused {run}: is owned by uid 65534" in err
    assert "remove it" in err and not (run / "env").exists()


def test_shipped_files_go_nowhere_another_user_owns(monkeypatch, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making a directory of another user takes root")
    outputs = tmp_path / "outputs"
    files = outputs / "logs" / "r1" / ".files"
    files.mkdir(parents=True)
    outputs.chmod(0o1777)
    os.chown(files, 65534, 65534)  # another local user made .files first on a shared outputs
    out, err, code = _call(monkeypatch, "put", files, "node_metrics.py", stdin=b"print(1)\n")
    assert code == run_files.REFUSED_EXIT and f"refused {files}: is owned by uid 65534" in err
    assert not (files / "node_metrics.py").exists()
    files.rmdir()
    assert _call(monkeypatch, "put", files, "node_metrics.py", stdin=b"print(1)\n")[2] == 0
    assert stat.S_IMODE(files.stat().st_mode) == 0o755 and (files / "node_metrics.py").read_bytes() == b"print(1)\n"


def test_a_shared_directory_others_may_write_without_the_sticky_bit_is_refused(monkeypatch, tmp_path):
    outputs = tmp_path / "outputs"
    (outputs / "logs").mkdir(parents=True)
    (outputs / "logs").chmod(0o777)
    out, err, code = _call(monkeypatch, "write-env", outputs / "logs" / "r1" / "h1", "0", stdin=b"A=1\n")
    assert code == run_files.REFUSED_EXIT and "chmod +t" in err


def test_the_program_the_controller_sends_is_the_layer_and_the_operation(tmp_path):
    argv = node_files.argv("python3", "poll", "/o/logs/r1/h1")
    assert argv[:4] == ("python3", "-I", "-S", "-c") and argv[5:] == ("poll", "/o", "logs/r1/h1")
    assert "_load('safe_files'" in argv[4] and "_load('follow_files'" not in argv[4]  # a poll compiles no more than it needs
    assert "_load('follow_files'" in node_files.argv("python3", "follow", "/o/logs/r1/h1", "2")[4]
    compile(argv[4], "-c", "exec")


def test_refused_names_the_path_and_the_fix():
    refused = Refused("/o/logs/r1/.files", "is owned by uid 1001", "remove it and run again")
    assert str(refused) == "/o/logs/r1/.files: is owned by uid 1001; remove it and run again"


def test_a_tree_a_thousand_levels_deep_is_reported_not_walked(monkeypatch, tmp_path):
    """collect's archiver: the depth bound of the layer, a line in the report instead of a RecursionError."""
    from clusterctl.collect import fetch
    from clusterctl.node import node_archive

    run = tmp_path / "outputs" / "logs" / "r1" / "h1"
    run.mkdir(parents=True)
    (run / "agent.log").write_text("torchrun\n")
    made = [run]
    for _ in range(1000):
        made.append(made[-1] / "d")
        made[-1].mkdir()
    out, err = io.BytesIO(), io.StringIO()
    try:
        monkeypatch.setattr(sys, "stdin", io.StringIO("{}"))
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out))
        monkeypatch.setattr(sys, "stderr", err)
        node_archive.main(["node_archive", str(tmp_path / "outputs"), "", "none", "logs/r1/h1"])
        sys.stdout.flush()
        report = fetch.parse_report(err.getvalue())
        monkeypatch.undo()
    finally:
        for level in reversed(made[1:]):  # bottom up: pytest's own recursive cleanup of old tmp dirs overflows
            level.rmdir()                 # Python's stack on a tree this deep (a RecursionError at a later session's end)
    assert report.done and [s.path for s in report.sent] == ["logs/r1/h1/agent.log"]
    assert len(report.skipped) == 1 and "nested deeper than 64 levels" in report.skipped[0][1]


def test_refused_member_names_are_kept_bounded():
    from clusterctl.collect.unpack import NAME_SHOWN, REFUSED_KEPT, Refusals, shown

    refused = Refusals()
    for i in range(10_000):
        refused.add(f"refused {shown('x' * 100_000 + str(i))!r}: absolute path or '..'")
    assert len(refused) == REFUSED_KEPT + 1 and refused[-1] == f"... and {10_000 - REFUSED_KEPT} more refused member(s)"
    assert max(len(line) for line in refused) < NAME_SHOWN + 100


def test_the_live_stream_wakes_when_a_name_appears_in_the_run_dir_it_holds_open_not_at_a_path(tmp_path):
    """issue 52: the stream ends when agent.exit is renamed into place, not at its next look; the watch is on the
    directory it opened (a run dir moved away and a link put at its path change nothing it sees)."""
    from clusterctl.node.safe_files import Dir

    (tmp_path / "run").mkdir()
    with Dir.open(str(tmp_path), ("run",)) as d:
        watch = follow_files.names_appearing(d)
        if watch is None:
            pytest.skip("no inotify here: the stream looks every PERIOD_S")
        try:
            assert not follow_files.quiet(watch, False, period_s=0.01)  # nothing appeared
            os.rename(tmp_path / "run", tmp_path / "moved")
            (tmp_path / "other").mkdir()
            os.symlink(tmp_path / "other", tmp_path / "run")
            (tmp_path / "other" / "agent.exit").write_text("0\n")  # at the path: not the dir it holds
            assert not follow_files.quiet(watch, False, period_s=0.01)
            (tmp_path / "moved" / "agent.exit.tmp").write_text("0\n")
            os.rename(tmp_path / "moved" / "agent.exit.tmp", tmp_path / "moved" / "agent.exit")
            assert follow_files.quiet(watch, False, period_s=60)  # at once: the name is there already
        finally:
            os.close(watch)


def test_the_streams_last_line_carries_one_word_of_agent_exit_whatever_else_is_written_there(tmp_path, capsys):
    from clusterctl.node.safe_files import Dir

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "agent.exit").write_text("3\nclusterctl-lease renewed\nclusterctl-exited exit 0\n")
    (tmp_path / "run" / "stopped").write_text("by ops\n")
    with Dir.open(str(tmp_path), ("run",)) as d:
        follow_files._say_exit(d)
    assert capsys.readouterr().err == f"{follow_files.EXITED}exit 3 stopped\n"


def test_every_operation_that_imports_follow_files_on_the_node_has_it_shipped():
    """An operation calling `_streaming()` (follow_files, imported lazily) must be one plan/node_files.py ships
    follow_files.py with, or it fails on the node with an ImportError (await-exit's watch nearly did)."""
    import inspect

    for name, function in run_files.OPERATIONS.items():
        calls = "_streaming()" in inspect.getsource(function) or function.__module__.endswith("follow_files")
        assert not calls or name in node_files.STREAMING, name


def test_stops_await_exit_reads_agent_exit_once_the_wrapper_renames_it_into_place(monkeypatch, run_dir):
    import threading

    (run_dir / "agent.pid").write_text("123\n")

    def wrapper_ends():
        (run_dir / "agent.exit.tmp").write_text("143\n")
        os.rename(run_dir / "agent.exit.tmp", run_dir / "agent.exit")

    timer = threading.Timer(0.2, wrapper_ends)
    timer.start()
    out, _err, code = _call(monkeypatch, "await-exit", run_dir)
    timer.join()
    assert (out, code) == (b"exit 143\n", 0)
