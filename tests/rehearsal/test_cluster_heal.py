"""Runs that heal themselves on the rehearsal cluster (issue 35): 3 nodes, the job on 2 (job.nodes: 2)
with node3 the spare, one gloo rank a node (tests/fixtures/jobs/checkpointed.py, a checkpoint each step).
A node cut off the network, the master cut off and a Python exception on every rank (the job's: not retried),
no spare with and without min_nodes, restarts: 0 as today, and Ctrl-C / `clusterctl stop` between two attempts.
A rank killed on one node (a node fault, the spare takes its place, collect-logs brings both attempts):
test_cluster_notify.py's healing run."""
from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from clusterctl.backends.healing import summary_lines
from clusterctl_helpers import CONTAINER_OUTPUTS, Cli, cluster_with_jobs, processes_with, steady_health, variant, wait_until

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

JOBS_DIR = "heal-jobs"
STEPS = 16
CUT_LOST_AFTER = 6  # job.lost_after of the runs whose node is cut off: lost 6 s after its last answer (15 by default)


@pytest.fixture(scope="module")
def cli(sandbox, tmp_path_factory):
    for cli, _ in cluster_with_jobs(sandbox, tmp_path_factory, JOBS_DIR, "checkpointed.py"):
        yield cli


@pytest.fixture
def prompt(tmp_path) -> Path:
    path = tmp_path / "prompt.txt"
    path.write_text("a cat\n")
    return path


def _inventory(sb, path: Path, name: str, *args: str, nodes=2, restarts=2, **job) -> Path:
    """The sandbox inventory running checkpointed.py into <outputs>/heal-jobs/<name>/{ckpt,out}."""
    where = f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/{name}"

    def change(doc):
        doc["job"].pop("world_size_divides", None)
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/checkpointed.py"], nproc_per_node=1,
                          args=["--steps", str(STEPS), "--ckpt", f"{where}/ckpt", "--out", f"{where}/out", *args],
                          restarts=restarts, checkpoint={"dir": f"{where}/ckpt", "complete": "COMPLETE"}, **job)
        if nodes is not None:
            doc["job"]["nodes"] = nodes
        # every test here blames node2 or node3 again: the fleet record remembers (heal_excluded, node_lost)
        # but quarantines nobody and makes nobody suspect (a suspect host is chosen last where spares exist,
        # issue 48), so each test plans the same hosts (tests/rehearsal/test_cluster_health.py covers that)
        doc["health"] = steady_health()

    return variant(sb, path, change)


def _here(sb, name: str) -> Path:
    return sb.shared_outputs / JOBS_DIR / name


def _record(cli, run_id: str) -> dict:
    return json.loads((cli.state_dir / "runs" / run_id / "run.json").read_text())


def _run_ids(cli) -> set:
    """The runs whose record is written (a run's directory may appear a moment before its run.json)."""
    runs = cli.state_dir / "runs"
    return {p.name for p in runs.iterdir() if (p / "run.json").is_file()} if runs.is_dir() else set()


def _stepped(sb, name: str, step: int):
    """True once the job saved a complete checkpoint of `step`."""
    return (_here(sb, name) / "ckpt" / f"step-{step}" / "COMPLETE").exists()


def _left_over(run_id: str) -> list:
    return [(pid, cmd) for pid, cmd in processes_with(run_id) if "pytest" not in cmd]


def _done(sb, name: str) -> dict:
    return json.loads((_here(sb, name) / "out" / "done.json").read_text())


def _cut_mid_run(sb, cli, inventory: Path, prompt: Path, name: str, node: str):
    proc = cli.popen("run", "-i", str(inventory), str(prompt))
    try:
        wait_until(lambda: _stepped(sb, name, 3), 120, interval=0.3, what="a checkpoint of step 3")
        sb.cut_network(node)
        return Cli.finish(proc, timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sb.restore_network(node)


def test_a_node_cut_off_mid_run_is_left_out_and_the_run_resumes_on_the_spare_from_its_last_complete_checkpoint(
        sandbox, cli, prompt, tmp_path):
    name = "cut-node2"
    (_here(sandbox, name) / "ckpt" / "step-999").mkdir(parents=True)  # a partial checkpoint: no COMPLETE marker
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", name, lost_after=CUT_LOST_AFTER)
    code, doc, stderr = _cut_mid_run(sandbox, cli, inventory, prompt, name, "node2")
    assert code == 0 and doc["ok"] is True, json.dumps(doc)[-3000:]
    first, second = doc["attempts"]
    assert first["hosts"] == ["node1", "node2"] and first["exit_code"] != 0
    assert first["excluded"] == [{"host": "node2", "cause": "node_unreachable"}]
    assert first["first_failure"]["host"] == "node2"
    assert second["hosts"] == ["node1", "node3"] and second["exit_code"] == 0 and second["attempt"] == 2
    assert second["relaunch_s"] is not None and second["checkpoint"].rsplit("/", 1)[-1].startswith("step-")
    done = _done(sandbox, name)
    resumed = int(done["resumed_from"].rsplit("-", 1)[-1])
    assert done["attempt"] == 2 and resumed >= 3 and resumed != 999
    assert done["ran"] == list(range(resumed + 1, STEPS + 1)) and done["total"] == sum(range(1, STEPS + 1))
    said = summary_lines(doc["attempts"])  # what the summary says (the live log is quiet with --json)
    assert len(said) == 1 and said[0].startswith("node2 lost (node_unreachable): relaunched on node1, node3 in ")
    assert said[0].endswith(f", resuming from step-{resumed}")
    assert _record(cli, doc["run_id"])["attempts"] == doc["attempts"]
    code, health = cli.json("health", "-i", str(inventory), "node2")  # the fleet remembers who was left out
    assert any(e["kind"] == "heal_excluded" and e["run_id"] == doc["run_id"] for e in health["nodes"][0]["events"]), health
    code, status = cli.json("status")
    assert [r for r in status["runs"] if r["run_id"] == doc["run_id"]][0]["attempts"] == doc["attempts"]
    assert wait_until(lambda: not _left_over(doc["run_id"]), 40, interval=0.5, what="no process of the run")


def test_the_master_cut_off_mid_run_gives_way_to_the_first_survivor(sandbox, cli, prompt, tmp_path):
    name = "cut-master"
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", name, lost_after=CUT_LOST_AFTER)
    code, doc, stderr = _cut_mid_run(sandbox, cli, inventory, prompt, name, "node1")
    assert code == 0, stderr[-3000:]
    assert [a["hosts"] for a in doc["attempts"]] == [["node1", "node2"], ["node2", "node3"]]
    assert doc["master"]["host"] == "node2" and doc["attempts"][0]["excluded"][0]["host"] == "node1"
    assert _done(sandbox, name)["total"] == sum(range(1, STEPS + 1))
    assert wait_until(lambda: not _left_over(doc["run_id"]), 40, interval=0.5, what="no process of the run")


def test_a_python_exception_on_every_rank_is_the_jobs_fault_and_is_not_retried(sandbox, cli, prompt, tmp_path):
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", "raised", "--raise_at", "3")
    code, doc = cli.json("run", "-i", str(inventory), str(prompt))
    assert code == 1 and len(doc["attempts"]) == 1 and doc["attempts"][0]["excluded"] == []
    assert "the job's own fault: not retried" in doc["heal_refused"]
    assert "injected failure at step 3" in json.dumps(doc["first_failure"])


def test_without_a_spare_min_nodes_goes_on_with_fewer_nodes_and_without_it_the_run_ends_saying_why(
        sandbox, cli, prompt, tmp_path):
    inventory = _inventory(sandbox, tmp_path / "fewer.yaml", "fewer", "--kill_at", "4", "--kill_rank", "2",
                           nodes=None, min_nodes=2)
    code, doc = cli.json("run", "-i", str(inventory), str(prompt))
    assert code == 0, doc
    assert [a["hosts"] for a in doc["attempts"]] == [["node1", "node2", "node3"], ["node1", "node2"]]
    assert doc["world_size"] == 2 and _done(sandbox, "fewer")["world"] == 2
    inventory = _inventory(sandbox, tmp_path / "none.yaml", "none", "--kill_at", "4", "--kill_rank", "2", nodes=None)
    code, doc = cli.json("run", "-i", str(inventory), str(prompt))
    assert code == 1 and len(doc["attempts"]) == 1
    assert "node3 lost (killed_by_signal), no spare host is left" in doc["heal_refused"]


def test_restarts_0_fails_fast_exactly_as_before(sandbox, cli, prompt, tmp_path):
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", "fast", "--kill_at", "3", "--kill_rank", "1",
                           nodes=None, restarts=0)
    code, doc = cli.json("run", "-i", str(inventory), str(prompt))
    assert code == 1 and doc["first_failure"]["host"] == "node2" and "attempts" not in doc


@pytest.mark.parametrize("how", [pytest.param("ctrl-c", marks=pytest.mark.heavy), "stop"])  # one stop path by default
def test_ctrl_c_or_stop_between_two_attempts_leaves_nothing_running(sandbox, cli, prompt, tmp_path, how):
    name = f"between-{how}"
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", name, "--raise_at", "2", "--every_attempt", nodes=None,
                           restarts=3, heal={"unknown": "transient"})
    before = _run_ids(cli)
    proc = cli.popen("run", "-i", str(inventory), str(prompt))
    try:
        run_id = wait_until(lambda: next(iter(_run_ids(cli) - before), None), 60, what="the run's record")
        # the second relaunch: its backoff is long enough to be caught in (BACKOFF_S)
        wait_until(lambda: _record(cli, run_id).get("relaunching") and len(_record(cli, run_id)["attempts"]) == 2,
                   120, interval=0.1, what="a second relaunch")
        if how == "ctrl-c":
            proc.send_signal(signal.SIGINT)
        else:
            assert cli.json("stop", run_id)[0] in (0, 3)
        code, doc, stderr = Cli.finish(proc, timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code != 0 and doc["stopped"] is True and len(doc["attempts"]) == 2, stderr[-2000:]
    assert _record(cli, run_id)["state"] == "stopped"
    assert wait_until(lambda: not _left_over(run_id), 20, interval=0.5, what="no process of the run")
