"""The Python API end to end on the rehearsal cluster (issue 33): load, up, a detached run whose logs
are read and whose end is waited for, a run stopped, an ad-hoc command, and a Fabric task through
`group()` on the hosts exactly as clusterctl reaches them."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, FIXTURE_JOBS, variant

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

JOBS_DIR = "api-jobs"


def _two_nodes(sb, path: Path, script: str, args: list) -> Path:
    def change(doc):
        doc["hosts"] = [h for h in doc["hosts"] if h["name"] in ("node1", "node2")]
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/{script}"], nproc_per_node=1, args=args)
        doc["job"].pop("world_size_divides", None)

    return variant(sb, path, change)


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    from clusterctl import Cluster

    jobs = sandbox.shared_outputs / JOBS_DIR
    jobs.mkdir(parents=True, exist_ok=True)
    for script in ("faults.py", "stall.py"):
        shutil.copy(FIXTURE_JOBS / script, jobs / script)
    where = tmp_path_factory.mktemp("api")
    path = _two_nodes(sandbox, where / "ok.yaml", "faults.py", ["--mode", "ok", "--out", f"{CONTAINER_OUTPUTS}/{JOBS_DIR}"])
    cluster = Cluster.load(path, state_dir=where / "state")
    result = cluster.up()
    assert result.ok and set(result.hosts) == {"node1", "node2"}, result.document
    yield cluster
    cluster.down()
    shutil.rmtree(jobs, ignore_errors=True)


def test_a_detached_run_returns_with_its_id_its_logs_are_read_and_wait_gives_the_cli_exit_code(cluster):
    run = cluster.run(prompt="a cat", detach=True)
    assert run.id and run.document["detached"] is True and run.document["world_size"] == 2
    assert run.wait(timeout=180) == 0
    assert run.state == "succeeded" and run.first_failure is None
    lines = [(line.host, line.rank, line.text) for line in run.logs()]
    assert ("node1", 0, "[faults rank 0] all_reduce: 2") in lines, lines
    assert ("node2", 1, "[faults rank 1] all_reduce: 2") in lines, lines
    record = cluster.session("status")  # the record keeps where the run ran
    with record as session:
        kept = session.state.read_json(session.state.run_dir(run.id) / "run.json")
    assert kept["backend"] == "nodes" and [h["name"] for h in kept["hosts"]] == ["node1", "node2"]
    assert kept["inventory_source"] == {"kind": "file", "location": str(cluster.source.location)}


def test_a_run_that_hangs_is_stopped_through_the_api(cluster, sandbox, tmp_path):
    from clusterctl import Cluster

    hanging = Cluster.load(_two_nodes(sandbox, tmp_path / "hang.yaml", "stall.py",
                                      ["--mode", "hang", "--rank", "1", "--seconds", "600"]),
                           state_dir=Path(cluster.env["CLUSTERCTL_STATE"]))
    run = hanging.run(prompt_file=_prompt(tmp_path), detach=True, stall_timeout=0)
    try:
        assert run.state == "running"
        stopped = run.stop()
        assert stopped.ok and set(stopped.hosts) == {"node1", "node2"}, stopped.document
        assert run.wait(timeout=60) == 1 and run.state == "stopped"
    finally:
        if run.state == "running":
            run.stop()


def test_relaunch_stops_the_run_and_launches_its_plan_again_as_the_next_attempt_of_the_same_run(
        cluster, sandbox, tmp_path):
    from dataclasses import replace

    from clusterctl import Cluster
    from clusterctl.backends import RunRequest, backend_for

    hanging = Cluster.load(_two_nodes(sandbox, tmp_path / "hang.yaml", "stall.py",
                                      ["--mode", "hang", "--rank", "1", "--seconds", "600"]),
                           state_dir=Path(cluster.env["CLUSTERCTL_STATE"]))
    request = RunRequest("a cat", detach=True, stall_timeout_s=0)
    run = hanging.run(prompt="a cat", detach=True, stall_timeout=0)
    try:
        plan = replace(hanging.plan("a cat"), run_id=run.id)
        assert plan.attempt == 1 and "--rdzv-id=" in plan.nodes[0].command
        with hanging.session("run") as session:
            outcome = backend_for(session, hanging.inventory).relaunch(plan, request)
        assert outcome.ok and outcome.document["run_id"] == run.id, outcome.document
        assert run.state == "running"
        with hanging.session("status") as session:
            record = session.state.read_json(session.state.run_dir(run.id) / "run.json")
        assert record["attempt"] == 2 and record["state"] == "running"
        logs = sandbox.shared_outputs / "logs"
        assert (logs / run.id / "node1").is_dir() and (logs / run.id / "node1.attempt-1" / "stopped").exists()
    finally:
        run.stop()
    assert run.state == "stopped"


def test_exec_gives_each_hosts_output_and_a_fabric_task_runs_through_group(cluster, sandbox):
    result = cluster.exec("hostname")
    hostnames = {n.name: n.hostname for n in sandbox.nodes if n.name in ("node1", "node2")}
    assert result.ok and {name: h.stdout.strip() for name, h in result.hosts.items()} == hostnames
    assert all(h.exit_code == 0 for h in result.hosts.values())

    group = cluster.group()
    try:
        results = group.run("hostname", hide=True, in_stream=False)
        assert sorted(r.stdout.strip() for r in results.values()) == sorted(hostnames.values())
        for connection in group:  # known_hosts judged by clusterctl, never Fabric's AutoAddPolicy
            policy = type(connection.client._policy).__name__
            assert policy != "AutoAddPolicy", policy
    finally:
        group.close()


def _prompt(where: Path) -> Path:
    path = where / "prompt.txt"
    path.write_text("a cat\n")
    return path
