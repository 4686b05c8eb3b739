"""Flight recorder: on by default in the ranks' environment (unless the user says otherwise), dumps read
safely (real dumps written by torch's own writer: tests/fixtures/flight_recorder/SOURCES.md), the rank
that did not join named, by torch's analyser where importable and by clusterctl's reader alike; and
a hang's stacks and dumps shown by `diagnose` on a collected run directory."""
from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from clusterctl_helpers import examples

from clusterctl.diagnose import flight_recorder as fr
from clusterctl.diagnose.hang import with_hang_evidence
from clusterctl.diagnose.rundir import diagnose_run_dir
from clusterctl.plan.topology import NodePlan
from clusterctl.plan.torchrun import torchrun_env
from clusterctl.models import ContainerSpec, EnvVar, Finding, Host, Inventory, JobSpec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DUMPS = FIXTURES / "flight_recorder" / "gloo_3ranks_rank1_absent"


def dumps_in(tmp_path: Path, layout: dict) -> Path:
    """A collected run directory: {host: [ranks]} -> <host>/outputs/logs/run1/<host>/nccl_trace_rank_<r>."""
    for host, ranks in layout.items():
        where = tmp_path / host / "outputs" / "logs" / "run1" / host
        where.mkdir(parents=True)
        for r in ranks:
            shutil.copy(DUMPS / f"nccl_trace_rank_{r}", where / f"nccl_trace_rank_{r}")
    return tmp_path


# --------------------------------------------------------------------------- the ranks' environment


def node(host: Host, torch: str | None = None) -> NodePlan:
    return NodePlan(host, 0, 2, 0, None, None, "10.0.0.1", True, (), torch=torch)


def test_the_flight_recorder_is_on_and_dumps_into_the_nodes_run_dir():
    inventory = Inventory("c", (Host("n1", "10.0.0.1"),))
    env = dict(torchrun_env(node(inventory.hosts[0]), inventory, "/out/logs/r1/n1/"))
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000" and env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == "/out/logs/r1/n1/nccl_trace_rank_"
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in dict(torchrun_env(node(inventory.hosts[0]), inventory))


@pytest.mark.parametrize("version, names", [
    ("2.13.0+cpu", ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE")),
    ("2.9.0a0+git1234", ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE")),
    ("2.8.1", ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")),
    ("1.13.1", ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")),
    (None, ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")),
    ("not a version", ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")),
])
def test_the_flight_recorders_settings_take_the_names_the_nodes_torch_reads_without_a_deprecation_warning(version, names):
    inventory = Inventory("c", (Host("n1", "10.0.0.1"),))
    env = dict(torchrun_env(node(inventory.hosts[0], version), inventory, "/out/logs/r1/n1"))
    buffer, dump_file = names
    assert env[buffer] == "2000" and env[dump_file] == "/out/logs/r1/n1/nccl_trace_rank_"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    others = {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
              "TORCH_FR_DUMP_TEMP_FILE"} - set(names)
    assert not others & set(env)


@pytest.mark.parametrize("torch", [None, "2.13.0"])
@pytest.mark.parametrize("where", ["job", "host", "container"])
@pytest.mark.parametrize("name", ["TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE"])
def test_a_buffer_size_the_user_sets_under_either_name_and_anywhere_is_left_alone(where, name, torch):
    var = (EnvVar(name, "0"),)
    host = Host("n1", "10.0.0.1", env=var if where == "host" else ())
    inventory = Inventory("c", (host,), job=JobSpec(env=var if where == "job" else ()),
                          container=ContainerSpec(image="i", env=var if where == "container" else ()))
    env = dict(torchrun_env(node(host, torch), inventory, "/out/logs/r1/n1"))
    assert not {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE"} & set(env) - {name}
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


def test_a_dump_path_the_user_sets_under_torchs_new_name_wins():
    inventory = Inventory("c", (Host("n1", "10.0.0.1"),), job=JobSpec(env=(EnvVar("TORCH_FR_DUMP_TEMP_FILE", "/x/t_"),)))
    assert "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in dict(torchrun_env(node(inventory.hosts[0]), inventory, "/out"))
    env = dict(torchrun_env(node(inventory.hosts[0], "2.13.0"), inventory, "/out"))
    assert not {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE"} & set(env)  # the job's env sets it


# --------------------------------------------------------------------------- reading dumps


def test_real_dumps_load_as_plain_data_with_their_groups_and_frames():
    dump = fr.load_dump((DUMPS / "nccl_trace_rank_0").read_bytes(), 0, "node1")
    assert [(e.seq, e.op) for e in dump.entries] == [(1, "gloo:all_reduce"), (2, "gloo:broadcast"), (3, "gloo:all_reduce")]
    assert dump.groups == {"0": (0, 1, 2)}  # gloo names its group "" in pg_config: the entries' group
    assert dump.entries[2].where.startswith("main (fr_dump.py:")


def test_a_rank_without_a_dump_is_reported(tmp_path):
    [stuck] = fr.stuck_collectives(fr.find_dumps(dumps_in(tmp_path, {"node1": [0], "node2": [2]})))
    assert stuck.missing == () and stuck.no_dump == (1,)


def test_a_dump_that_names_a_class_is_refused_and_nothing_runs(tmp_path):
    canary = tmp_path / "ran"
    evil = pickle.dumps(_Evil(str(canary)))
    assert fr.load_dump(evil, 0) is None and not canary.exists()


class _Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_truncated_or_foreign_files_are_not_dumps():
    data = (DUMPS / "nccl_trace_rank_0").read_bytes()
    assert all(fr.load_dump(data[:end], 0) is None for end in range(0, len(data) - 1, 37))
    assert fr.load_dump(pickle.dumps({"entries": "no"}), 0) is None
    assert fr.load_dump(b"x" * (fr.MAX_DUMP_BYTES + 1), 0) is None


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_load_without_an_exception(data):
    fr.load_dump(data, 0)


plain = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(
                         st.sampled_from(["entries", "pg_config", "collective_seq_id", "process_group", "ranks",
                                          "frames", "state", "is_p2p", "profiling_name", "filename", "line", "name"]),
                         inner, max_size=6), max_leaves=40)


@settings(max_examples=examples(300), deadline=None)
@given(plain)
def test_any_plain_pickle_is_read_and_matched_without_an_exception(value):
    dump = fr.load_dump(pickle.dumps(value), 0)
    if dump is not None:
        fr.stuck_collectives([dump])


# --------------------------------------------------------------------------- diagnose of a collected run


def stacks_doc(verdict: str, evidence: str, failure=None) -> str:
    return json.dumps({"run_id": "run1", "taken_at": "2026-01-01T00:00:00", "verdict": verdict, "evidence": evidence,
                       "first_failure": failure, "nodes": {}})


def collected_run(tmp_path: Path, *, stacks: str = "", dumps: dict = None) -> Path:
    logs = tmp_path / "node2" / "logs"
    logs.mkdir(parents=True)
    (logs / "node2-agent.log").write_text(
        "W1125 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, shutting down workers\n")
    if stacks:
        where = tmp_path / "node2" / "outputs" / "logs" / "run1" / "node2"
        where.mkdir(parents=True, exist_ok=True)
        (where / "stacks-20260101-000000.json").write_text(stacks)
    if dumps:
        for host, ranks in dumps.items():
            where = tmp_path / host / "outputs" / "logs" / "run1" / host
            where.mkdir(parents=True, exist_ok=True)
            for r in ranks:
                shutil.copy(DUMPS / f"nccl_trace_rank_{r}", where / f"nccl_trace_rank_{r}")
    return tmp_path


HANG_FAILURE = {"host": "node2", "rank": 3, "diagnosis": [{
    "cause": "rank_hang", "host": "node2", "rank": 3, "fix": "find why rank 3 on node2 stays in load_shard",
    "evidence": "rank 3 on node2 in load_shard (train.py:41) while 5 ranks wait in all_reduce (train.py:57)"}]}


def test_diagnose_of_a_run_clusterctl_stopped_for_a_hang_names_the_rank_first(tmp_path):
    root = collected_run(tmp_path, stacks=stacks_doc("hang", "x", HANG_FAILURE))
    findings = diagnose_run_dir(root, {"exit_code": 1, "nodes": {}})
    assert (findings[0].cause, findings[0].host, findings[0].rank) == ("rank_hang", "node2", 3)
    assert "load_shard (train.py:41)" in findings[0].evidence and "stacks-20260101-000000.json" in findings[0].evidence
    assert all(f.cause != "unknown" for f in findings)


def test_a_stacks_snapshot_is_no_failure_by_itself(tmp_path):
    root = collected_run(tmp_path, stacks=stacks_doc("snapshot", "every rank (2) waits in all_reduce (t.py:3)"))
    assert all(f.cause != "rank_hang" for f in diagnose_run_dir(root, {"exit_code": 1, "nodes": {}}))


def test_diagnose_reads_the_flight_recorder_dumps_of_a_collected_run(tmp_path):
    root = collected_run(tmp_path, dumps={"node1": [0, 1], "node2": [2]})
    findings = diagnose_run_dir(root, {"exit_code": 1, "nodes": {}})
    assert [(f.cause, f.host, f.rank) for f in findings][:1] == [("rank_hang", "node1", 1)]


def test_a_stronger_cause_in_the_logs_stays_above_the_flight_recorder(tmp_path):
    oom = Finding("oom_killed", "Killed process 77 (python)", "less memory", "node1", 1, 1.0, 0.95)
    root = collected_run(tmp_path, dumps={"node1": [0, 1], "node2": [2]})
    assert [f.cause for f in with_hang_evidence(root, [oom])] == ["oom_killed", "rank_hang"]


# --------------------------------------------------------------------------- real NCCL dumps (2 x H200)
# tests/fixtures/flight_recorder/nccl_h200_2ranks_rank1_late: the whole directory `clusterctl collect-logs`
# brought back from `clusterctl run` of docs/gpu-validation/round2/hang_job.py on 2 H200s (SOURCES.md):
# rank 1 slept in rank_hang, rank 0's all_reduce #2 timed out after 30 s, NCCL's watchdog dumped both ranks.
NCCL_RUN = FIXTURES / "flight_recorder" / "nccl_h200_2ranks_rank1_late"


def test_real_nccl_dumps_written_on_a_watchdog_timeout_are_read():
    dumps = {d.rank: d for d in fr.find_dumps(NCCL_RUN)}
    assert sorted(dumps) == [0, 1] and {d.host for d in dumps.values()} == {"gpus01"}
    assert [(e.seq, e.op, e.state, e.where) for e in dumps[0].entries] == [
        (1, "nccl:all_reduce", "completed", "main (hang_job.py:39)"),
        (2, "nccl:all_reduce", "scheduled", "main (hang_job.py:46)")]
    assert [(e.seq, e.state) for e in dumps[1].entries] == [(1, "completed")]
    assert dumps[0].groups == dumps[1].groups == {"0": (0, 1)}
    [stuck] = fr.stuck_collectives(list(dumps.values()))
    assert (stuck.group, stuck.seq, stuck.op, stuck.joined, stuck.missing) == ("0", 2, "nccl:all_reduce", (0,), (1,))


def test_diagnose_puts_the_watchdogs_timeout_on_the_rank_the_dumps_name():
    """The log alone names rank 0 (its watchdog timed out in SeqNum=2); the dumps say rank 1 never entered #2."""
    findings = diagnose_run_dir(NCCL_RUN)
    top = findings[0]
    assert (top.cause, top.host, top.rank) == ("nccl_timeout_slow_rank", "gpus01", 1)
    assert "rank 1 on gpus01 did not; its last: nccl:all_reduce #1" in top.evidence
    assert "entered nccl:all_reduce #2 of group '0' (main (hang_job.py:46))" in top.evidence
    assert "rank 0's watchdog: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2" in top.evidence
    assert not any(f.cause in ("nccl_timeout_slow_rank", "rank_hang") and f.rank == 0 for f in findings)
    assert sum(f.cause == "rank_hang" for f in findings) == 0  # said once, in the timeout's finding


def test_a_timeout_of_another_collective_is_not_moved_onto_the_dumps_rank(tmp_path):
    timeout = Finding("nccl_timeout_slow_rank", "[Rank 0] Watchdog caught collective operation timeout: "
                      "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, ...)", "raise it", "gpus01", 0, 1.0, 0.99)
    findings = with_hang_evidence(NCCL_RUN, [timeout])
    assert [(f.cause, f.rank) for f in findings] == [("nccl_timeout_slow_rank", 0), ("rank_hang", 1)]
