"""py-spy's output and clusterctl's node script read into stacks: on real captures (tests/fixtures/pyspy,
SOURCES.md there says how each was made), and on anything else a node may print (never an exception)."""
from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings, strategies as st
from clusterctl_helpers import examples

from clusterctl.watch.sampler import MARK, parse_node_output, sample_command
from clusterctl.watch.sockets import parse_tcp_table
from clusterctl.watch.stacks import Frame, parse_pyspy, parse_pyspy_json, parse_pyspy_text, shorten_path
from clusterctl.models import Host, Inventory, ContainerSpec

PYSPY = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy"


def read(name: str) -> str:
    return (PYSPY / name).read_text()


def test_a_rank_waiting_in_all_reduce_is_read_innermost_frame_first_from_py_spy_json():
    threads, error = parse_pyspy_json(read("gloo_rank0_all_reduce.json"))
    assert error == "" and len(threads) == 1
    main = threads[0]
    assert (main.name, main.active) == ("MainThread", False)
    assert [str(f) for f in main.frames] == [
        "all_reduce (torch/distributed/distributed_c10d.py:3252)",
        "_exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)",
        "main (stall.py:14)", "<module> (stall.py:16)"]
    assert main.frames[0].in_library and main.frames[0].in_torch_distributed
    assert not main.frames[2].in_library and main.frames[2].path == "/tmp/pyspy/stall.py"


def test_the_text_form_gives_the_same_frames_as_the_json_form():
    for name in ("gloo_rank0_all_reduce", "gloo_rank1_load_shard"):
        text, _ = parse_pyspy_text(read(f"{name}.txt"))
        data, _ = parse_pyspy_json(read(f"{name}.json"))
        assert [(f.function, f.file, f.line) for f in text[0].frames] == \
               [(f.function, f.file, f.line) for f in data[0].frames]
        assert text[0].name == "MainThread" and text[0].active is False


def test_threads_keep_their_names_and_whether_they_were_on_a_cpu():
    threads, _ = parse_pyspy(read("compute_threads_a.json"))
    assert {t.name: t.active for t in threads} == {"heartbeat": False, "MainThread": True}
    text, _ = parse_pyspy(read("compute_threads.txt"))
    assert {t.name: t.active for t in text} == {"heartbeat": False, "MainThread": True}
    assert str(text[0].frames[0]) == "step (compute.py:7)"


def test_the_torchrun_agent_reads_as_one_thread_in_the_elastic_agent():
    threads, _ = parse_pyspy(read("torchrun_agent.txt"))
    assert threads[0].frames[0].function == "SimpleElasticAgent._invoke_run"
    assert threads[0].frames[-1] == Frame("<module>", "torchrun", 6)


def test_py_spy_errors_become_one_line_without_its_own_backtrace():
    assert parse_pyspy(read("error_no_such_process.txt")) == (
        (), "Failed to get process executable name. Check that the process is running. "
            "(No such file or directory (os error 2))")
    threads, error = parse_pyspy(read("error_permission_denied.txt"))
    assert threads == () and "Permission denied" in error and "backtrace" not in error.lower()


def test_paths_are_shortened_as_py_spy_does():
    assert shorten_path("/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py") == "torch/nn/modules/module.py"
    assert shorten_path("/usr/lib/python3.10/threading.py") == "threading.py"
    assert shorten_path("/workspace/train.py") == "train.py"


def test_the_node_script_output_gives_each_rank_in_each_sample_with_cpu_time_and_sockets():
    node = parse_node_output(read("node_hang_2ranks.txt"), "node2")
    assert node.problem == "" and node.tool.startswith("shipped py-spy 0.4") and node.uid == 0
    assert len(node.samples) == 2 and node.ranks == (0, 1)
    first, second = node.samples
    assert [(r.host, r.rank, r.local_rank) for r in first] == [("node2", 0, 0), ("node2", 1, 1)]
    assert str(first[1].innermost) == "load_shard (stall.py:17)" and first[1].own_code == first[1].innermost
    assert str(first[0].innermost).startswith("all_reduce (torch/distributed/distributed_c10d.py:")
    assert all(r.cpu_s is not None and r.cpu_s > 0 for r in first + second)
    assert first[0].frames == second[0].frames and first[1].frames == second[1].frames
    states = {s.state for r in first for s in r.sockets}
    assert "ESTABLISHED" in states and "LISTEN" in states


def test_a_computing_job_shows_busy_main_threads_in_the_node_output():
    first, second = parse_node_output(read("node_compute_2ranks.txt"), "n").samples
    assert all(b.cpu_s - a.cpu_s > 0.5 for a, b in zip(first, second))  # 1 s apart


def test_the_store_connection_is_read_from_tcp6_as_an_ipv4_address():
    node = parse_node_output(read("node_deadlock_2ranks.txt"), "n")
    store = [s for s in node.samples[0][0].sockets if s.remote[1] == 29668]
    assert [(s.remote, s.state) for s in store] == [(("127.0.0.1", 29668), "ESTABLISHED")]


def test_a_node_where_nothing_runs_says_so():
    text = f"{MARK}uid 0\n{MARK}clk_tck 100\n{MARK}tool shipped py-spy 0.4.3\n{MARK}problem no rank of run r1 runs here\n"
    node = parse_node_output(text, "n")
    assert node.samples == () and node.problem == "no rank of run r1 runs here"
    assert "printed nothing understood" in parse_node_output("sh: 1: mktemp: not found\n", "n").problem


def test_every_truncation_of_a_real_node_output_parses():
    text = read("node_hang_2ranks.txt")
    for end in range(0, len(text), 97):
        node = parse_node_output(text[:end], "n")
        assert all(r.rank in (0, 1) for sample in node.samples for r in sample)


marker_lines = st.sampled_from([f"{MARK}rank 1 12 0 0 55 0", f"{MARK}sockets 1 12", f"{MARK}rank 2 12 0 - 99 1",
                                f"{MARK}uid 1000", f"{MARK}clk_tck x", f"{MARK}problem p", f"{MARK}rank 1 1 1 1 1",
                                "Thread 12 (idle): \"MainThread\"", "    f (a.py:3)", "[", "{\"frames\": 1}]",
                                "  1: 0100007F:9305 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1"])


@settings(max_examples=examples(400), deadline=None)
@given(st.lists(st.one_of(marker_lines, st.text(max_size=80)), max_size=40))
def test_any_node_output_parses_without_an_exception(lines):
    node = parse_node_output("\n".join(lines), "n")
    assert isinstance(node.problem, str)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                               st.sampled_from(["frames", "name", "filename", "line", "thread_name", "active",
                                                "short_filename", "x"]), inner, max_size=5), max_leaves=30)


@settings(max_examples=examples(400), deadline=None)
@given(json_values)
def test_any_json_py_spy_may_print_parses_without_an_exception(value):
    threads, error = parse_pyspy(json.dumps(value))
    assert isinstance(error, str) and all(isinstance(f.line, int) for t in threads for f in t.frames)


@settings(max_examples=examples(300), deadline=None)
@given(st.text(max_size=400))
def test_any_text_parses_as_py_spy_output_or_tcp_table_without_an_exception(text):
    parse_pyspy(text)
    parse_tcp_table(text)


def test_the_stack_script_runs_as_root_on_the_host_and_in_the_container_only_when_asked():
    inventory = Inventory("c", (Host("n1", "10.0.0.1"),), container=ContainerSpec(image="img", name="job"))
    on_host = sample_command(inventory, "n1", "r1", 2, 3.0)
    assert on_host.privileged and on_host.argv[:2] == ("sh", "-c") and on_host.argv[-11:-6] == ("c", "n1", "r1", "2", "3")
    assert on_host.argv[-5] == "" and sample_command(inventory, "n1", "r1", nonblocking=True).argv[-5] == "--nonblocking"
    inside = sample_command(inventory, "n1", "r1", 1, 0.0, inside=True)
    assert inside.argv[:4] == ("docker", "exec", "-i", "job") and not inside.privileged
    assert on_host.timeout > inside.timeout  # the interval between samples is waited for
