"""Checkpoints that outlive their node with no shared filesystem (issue 50), on the rehearsal cluster:
3 nodes, the job on 2 (node3 the spare), one gloo rank a node, a detached run that heals itself. The job
(tests/fixtures/jobs/sharded.py) is a plain one: each rank torch.saves its own shard every step into
/tmp/clusterctl-ckpt-<name> INSIDE its node's container (each node's own disk: the containers share
only /workspace/output, where the job writes its progress and result), and knows nothing of replicas.
`job.checkpoint.replicas: 1` copies each node's new complete step to the next node; on a relaunch the
spare receives the lost node's shards from their replica, in a detached run (the keepers copy) and in an
attached one (each attempt's wrapper hosts the copier). The result must be exact (every rank's state
and the sum), resumed past step 0. A no-progress loop ends after two attempts."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, Cli, cluster_with_jobs, steady_health, variant, wait_until

from rehearsal.test_cluster_heal import _left_over
from rehearsal.test_cluster_heal_detached import _detach, _ended, prompt  # noqa: F401  (prompt: a fixture)

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

JOBS_DIR = "heal-replica-jobs"
STEPS = 16


@pytest.fixture(scope="module")
def cli(sandbox, tmp_path_factory):
    for cli, _ in cluster_with_jobs(sandbox, tmp_path_factory, JOBS_DIR, "sharded.py"):
        yield cli


def _inventory(sb, path: Path, name: str, *args: str, restarts=2, **job) -> Path:
    def change(doc):
        doc["job"].pop("world_size_divides", None)
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/sharded.py"], nproc_per_node=1, nodes=2,
                          args=["--steps", str(STEPS), "--ckpt", f"/tmp/clusterctl-ckpt-{name}",
                                "--out", f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/{name}/out", *args],
                          restarts=restarts, lost_after=6,
                          checkpoint={"dir": f"/tmp/clusterctl-ckpt-{name}", "complete": "COMPLETE", "replicas": 1},
                          **job)
        doc["health"] = steady_health()

    return variant(sb, path, change)


def _out(sb, name: str, what: str):
    path = sb.shared_outputs / JOBS_DIR / name / "out" / what
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _expected(world: int) -> tuple:
    ws = []
    for rank in range(world):
        w = 0.0
        for step in range(1, STEPS + 1):
            w = w / 2 + step + rank
        ws.append([w] * 4)
    return ws, sum(range(1, STEPS + 1))


def _logs(sb, run_id: str) -> str:
    """The supervisor's, the keepers' and the copiers' logs of the run (what an assertion below shows when it fails)."""
    found = []
    for path in sorted((sb.shared_outputs / "logs" / run_id).glob("node*/*.log")):
        if path.name in ("supervise.log", "keep.log", "replica.log", "agent.log"):
            found.append(f"--- {path.parent.name}/{path.name}\n{path.read_text()[-3000:]}")
    return "\n".join(found)


def _exact(sb, name: str, run: dict) -> dict:
    # a detached run's record ends "succeeded" (its supervisor's word), an attached one's "ended" with its exit code
    assert run["state"] in ("succeeded", "ended") and run["exit_code"] == 0, json.dumps(run)[-4000:]
    done = _out(sb, name, "done.json")
    assert done["resumed_from"], json.dumps(run.get("attempts"))[-3000:] + "\n" + _logs(sb, run["run_id"])
    ws, total = _expected(done["world"])
    resumed = int(done["resumed_from"].rsplit("-", 1)[-1])
    assert resumed > 0 and done["attempt"] == 2 and done["ran"] == list(range(resumed + 1, STEPS + 1))
    assert (done["w"], done["total"]) == (ws, total)
    return done


@pytest.mark.parametrize("mode", ["detached", pytest.param("attached", marks=pytest.mark.heavy)])
def test_the_node_of_the_last_rank_cut_off_its_shard_comes_back_from_its_replica(sandbox, cli, prompt, tmp_path, mode):
    """Detached: the keepers copy and the engine orders the restore. Attached (never handed over): each
    attempt's wrapper hosts the same copier (node/node_replica.py) and the controller orders the restore
    (heal/replicas.py): the same Replicator either way."""
    name = f"replica-last-rank-{mode}"
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", name)
    proc = cli.popen("run", "-i", str(inventory), str(prompt)) if mode == "attached" else None
    run_id = _detach(cli, inventory, prompt) if proc is None else None
    try:
        wait_until(lambda: (_out(sandbox, name, "progress.json") or {}).get("step", 0) >= 6, 180, interval=0.3,
                   what="step 6")
        cut = time.time()
        sandbox.cut_network("node2")
        if proc is None:
            run = wait_until(lambda: _ended(cli, inventory, run_id), 300, interval=3, what="the run's end")
        else:
            code, doc, stderr = Cli.finish(proc, timeout=300)
            run_id = doc["run_id"]
            run = json.loads((cli.state_dir / "runs" / run_id / "run.json").read_text())
            assert code == 0, stderr[-3000:] + _logs(sandbox, run_id)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        sandbox.restore_network("node2")
    done = _exact(sandbox, name, run)
    first, second = run["attempts"]
    assert first["excluded"] == [{"host": "node2", "cause": "node_unreachable"}] and first["progress"] is True
    assert second["hosts"] == ["node1", "node3"] and second["resumed_from"] == done["resumed_from"]
    if mode == "detached":
        assert second["timings"]["transfer_s"] is not None
    else:  # the spare had nothing: the lost node's shard came from its replica on node1 (its copier's log)
        log = (sandbox.shared_outputs / "logs" / run_id / "node3" / "replica.log").read_text()
        assert f"restored {done['resumed_from'].rsplit('/', 1)[-1]}" in log, log[-2000:]
    print(f"\nreplicas ({mode}), last rank's node cut: resumed from {done['resumed_from']}, attempt 2 started "
          f"{second['started'] - cut:.1f} s after the cut; timings {second.get('timings')}")
    assert wait_until(lambda: not _left_over(run_id), 60, interval=1, what="no process of the run")


@pytest.mark.heavy  # the restore from a replica is the [detached] test above's; here rank 0's node and its disk
def test_the_node_of_rank_0_lost_with_its_disk_its_shard_comes_back_from_its_replica(sandbox, cli, prompt, tmp_path):
    """Rank 0 removes its node's checkpoint dir and SIGKILLs itself: node1 is left out (the detached run's
    supervisor stays on it: docs/healing.md), node2 becomes rank 0 and loads shard-0 from its replica."""
    name = "replica-rank0"
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", name, "--kill_at", "7", "--kill_rank", "0")
    run_id = _detach(cli, inventory, prompt)
    run = wait_until(lambda: _ended(cli, inventory, run_id), 300, interval=3, what="the run's end")
    done = _exact(sandbox, name, run)
    first, second = run["attempts"]
    assert first["excluded"] == [{"host": "node1", "cause": "killed_by_signal"}]
    assert second["hosts"] == ["node2", "node3"] and second["resumed_from"] == done["resumed_from"]
    print(f"\nreplicas, rank 0's node lost with its disk: resumed from {done['resumed_from']}; "
          f"timings {second['timings']}")
    assert wait_until(lambda: not _left_over(run_id), 60, interval=1, what="no process of the run")


@pytest.mark.heavy  # the rule: tests/unit/test_node_healing.py and test_heal_progress.py in `make test`
def test_a_loop_without_progress_ends_after_two_attempts(sandbox, cli, prompt, tmp_path):
    name = "replica-loop"
    # the failure comes 8 s into step 1, once the run is the cluster's (a first attempt that fails before the
    # hand-over ends as without restarts: docs/healing.md), before any checkpoint: no attempt makes progress.
    # unknown: transient, as for a flaky job: rank 1's error (its peer gone) may be heard before rank 0's
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", name, "--fail_at", "1", "--fail_after", "8", restarts=5,
                           heal={"unknown": "transient"})
    run_id = _detach(cli, inventory, prompt)
    run = wait_until(lambda: _ended(cli, inventory, run_id), 240, interval=3, what="the run's end")
    assert run["state"] == "failed" and len(run["attempts"]) == 2, json.dumps(run)[-3000:]
    assert [a["progress"] for a in run["attempts"]] == [False, False]
    record = json.loads((cli.state_dir / "runs" / run_id / "run.json").read_text())
    assert "in a row made no progress" in record["heal_refused"]
    assert wait_until(lambda: not _left_over(run_id), 60, interval=1, what="no process of the run")


def test_a_linked_checkpoint_dir_and_a_step_that_never_completed_are_named_in_the_log_and_the_record(
        sandbox, cli, prompt, tmp_path):
    """node2's checkpoint dir is a symbolic link (refused: nothing of it copied), node1 holds a step
    directory that never completed (never copied, never resumed from): each is an event of the run's
    record and a line of its supervisor's log; the run itself goes on to its end."""
    from clusterctl_helpers import container_of, load_inventory

    name = "replica-faults"
    ckpt = f"/tmp/clusterctl-ckpt-{name}"
    container = load_inventory(sandbox)["container"]["name"]
    container_of(sandbox, "node1", container).exec_run(["mkdir", "-p", f"{ckpt}/step-0"])
    container_of(sandbox, "node2", container).exec_run(
        ["sh", "-c", f"mkdir -p {ckpt}-elsewhere && ln -sfn {ckpt}-elsewhere {ckpt}"])
    inventory = _inventory(sandbox, tmp_path / "inv.yaml", name, restarts=1)
    run_id = _detach(cli, inventory, prompt)
    run = wait_until(lambda: _ended(cli, inventory, run_id), 240, interval=3, what="the run's end")
    assert run["state"] == "succeeded", json.dumps(run)[-3000:]
    events = [e for attempt in run["attempts"] for e in attempt.get("replica_events") or []]
    assert any(e["kind"] == "refused" and e["host"] == "node2" and "symbolic link" in e["says"] for e in events), events
    assert any(e["kind"] == "incomplete" and e["host"] == "node1" and e["step"] == "step-0" for e in events), events
    log = (sandbox.shared_outputs / "logs" / run_id / "node1" / "supervise.log").read_text()
    assert "symbolic link" in log and "never completed" in log
    assert wait_until(lambda: not _left_over(run_id), 60, interval=1, what="no process of the run")
