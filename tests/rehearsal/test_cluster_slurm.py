"""`clusterctl run` and `export sbatch` on a real Slurm (issue #20): slurm-wlm 22.05's slurmctld
on this machine and a slurmd in every node namespace of the session sandbox (`sandbox up --slurm`).

Done when: 2 nodes x 2 ranks, the prompt byte for byte, world size 4, ranks on both nodes, the queue
empty after; a failing rank ends the job within 10 s and is named; Ctrl-C leaves no job and no
process; a missing partition or too many nodes is refused before anything is submitted; the
script of `export sbatch` runs under `sbatch --wait`."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from clusterctl_helpers import FIXTURE_JOBS, Cli, load_inventory, processes_with, run_records, stop, wait_until
from clusterctl_helpers import sandbox_skip_reason

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

NODE_OF_RANK = {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
PROMPT = ("A \"quoted\" cat's 'walk' $(touch /tmp/cc-slurm-canary) `id` $HOME ${PATH} $$ \\ {run_id} %s"
          "\nsecond line\twith a tab; rm -rf / && echo pwned | cat > x < y * ? [a] ~ # !"
          "\n猫が草の上を歩く — café, naïve.")


def slurm_skip_reason():
    reason = sandbox_skip_reason()
    if reason:
        return reason
    missing = [b for b in ("slurmctld", "slurmd", "munged", "sbatch") if shutil.which(b) is None]
    if missing:
        return f"Slurm is not installed (no {', '.join(missing)}): apt-get install -y slurm-wlm munge"
    return None


@pytest.fixture(scope="module")
def slurm_sandbox(request):
    """The session sandbox with Slurm added (and removed again after this module)."""
    reason = slurm_skip_reason()
    if reason:
        pytest.skip(reason)
    sandbox = request.getfixturevalue("sandbox")
    from clusterctl.sandbox import up

    handle = up(len(sandbox.nodes), docker=sandbox.docker, state_dir=sandbox.state_dir, slurm_cluster=True)
    saved = os.environ.get("SLURM_CONF")
    os.environ.update(handle.slurm_env)
    try:
        yield handle
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        up(len(sandbox.nodes), docker=sandbox.docker, state_dir=sandbox.state_dir)


@pytest.fixture(scope="module")
def cli(slurm_sandbox, tmp_path_factory):
    return Cli(tmp_path_factory.mktemp("slurm-state"))


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompt") / "prompt.txt"
    path.write_bytes(PROMPT.encode() + b"\n")
    return path


def slurm_inventory(sb, path: Path, nodes: int = 2, args: tuple = (), **scheduler) -> Path:
    doc = yaml.safe_load(sb.slurm_inventory_path.read_text())
    doc["scheduler"].update(nodes=nodes, **scheduler)
    doc["job"]["args"] = doc["job"]["args"] + list(args)
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    return path


def queue() -> str:
    """Every job Slurm lists: `id|full name|state` lines (squeue's default cuts names to 8 characters)."""
    return subprocess.run(["squeue", "--noheader", "--format=%i|%j|%t"], capture_output=True, text=True,
                          timeout=30).stdout.strip()


def allocations_asked(sb) -> int:
    """How many allocations slurmctld was asked for (its log), to show that none was."""
    log = sb.state_dir / "slurm" / "slurmctld.log"
    return log.read_text(errors="replace").count("_slurm_rpc_allocate_resources") if log.exists() else 0


def wait_for_stall(sb, before: set, host: str) -> str:
    """The id of the run started after `before` (run dirs), once its stalling rank said so on `host`."""
    logs = sb.shared_outputs / "logs"

    def stalling():
        for run_id in set(os.listdir(logs)) - before if logs.is_dir() else ():
            log = logs / run_id / host / "agent.log"
            if log.exists() and "stalling" in log.read_text(errors="replace"):
                return run_id
        return None

    return wait_until(stalling, 120, interval=0.5, what=f"the stalling rank on {host}")


def run_dirs(sb) -> set:
    logs = sb.shared_outputs / "logs"
    return set(os.listdir(logs)) if logs.is_dir() else set()


def left_over(run_id: str) -> list:
    return [(pid, cmd) for pid, cmd in processes_with(run_id) if "pytest" not in cmd]


def test_two_nodes_x_two_ranks_get_the_prompt_byte_for_byte_and_leave_the_queue_empty(slurm_sandbox, cli,
                                                                                      prompt_file, tmp_path):
    inventory = slurm_inventory(slurm_sandbox, tmp_path / "inv.yaml")
    proc = cli.popen("run", "-i", str(inventory), str(prompt_file), json_output=False)  # the live log, as seen
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        stop(proc)
    assert proc.returncode == 0, (out + err)[-3000:]
    run_id = re.search(r"run (\S+) succeeded", out + err).group(1)
    doc = json.loads((cli.state_dir / "runs" / run_id / "run.json").read_text())  # the run record, as over SSH
    assert (doc["world_size"], doc["nproc_per_node"], doc["nnodes"], doc["exit_code"]) == (4, 2, 2, 0)
    assert doc["master"]["host"] == "node1" and doc["master"]["address"] == slurm_sandbox.node("node1").address
    assert doc["slurm"]["nodes"] == ["node1", "node2"] and doc["slurm"]["cancelled"] is True
    records = run_records(slurm_sandbox, run_id)
    assert sorted(records) == [0, 1, 2, 3]
    for rank, record in records.items():
        assert record["prompt"] == PROMPT, f"rank {rank} got another prompt"
        assert record["world_size"] == 4 and record["error"] is None
        assert record["hostname"] == slurm_sandbox.node(NODE_OF_RANK[rank]).hostname
    assert not Path("/tmp/cc-slurm-canary").exists()
    # the live log: each rank's lines under the same [host rN] prefix as over SSH
    for rank, node in NODE_OF_RANK.items():
        assert f"[{node} r{rank}] [generate rank {rank}] done" in out + err, (out + err)[-3000:]
    assert queue() == ""


def test_a_failing_rank_cancels_the_job_within_10_s_and_is_named(slurm_sandbox, cli, prompt_file, tmp_path):
    inventory = slurm_inventory(slurm_sandbox, tmp_path / "fail.yaml", args=("--fail_rank", "3"))
    code, doc = cli.json("run", "-i", str(inventory), str(prompt_file))
    returned = time.time()
    assert code == 1 and doc["ok"] is False, doc
    first = doc["first_failure"]
    assert (first["host"], first["rank"]) == ("node2", 3), first
    assert "injected failure on rank 3" in first["diagnosis"][0]["evidence"]
    records = run_records(slurm_sandbox, doc["run_id"])
    print(f"\nfail-fast: the run returned {returned - records[3]['t_end']:.1f}s after rank 3 failed")
    assert returned - records[3]["t_end"] < 10, "the job did not end within 10 s of the failure"
    assert doc["slurm"]["cancelled"] is True and queue() == ""
    assert wait_until(lambda: not left_over(doc["run_id"]), 10, what="no process of the run") is True
    # collect-logs and diagnose, unchanged: the run's nodes are reached through a new allocation of them
    dest = tmp_path / "collected"
    code, collected = cli.json("collect-logs", "--run", doc["run_id"], "--dest", str(dest))
    assert code == 0 and collected["files"] > 0, collected
    assert (dest / "node2" / "logs" / "node2-r3.log").exists()
    assert collected["findings"][0]["host"] == "node2" and collected["findings"][0]["rank"] == 3, collected
    code, diagnosis = cli.json("diagnose", str(dest))
    assert diagnosis["findings"][0]["rank"] == 3 and "injected failure" in diagnosis["findings"][0]["evidence"]
    assert queue() == ""


def test_ctrl_c_cancels_the_job_and_leaves_no_process(slurm_sandbox, cli, prompt_file, tmp_path):
    inventory = slurm_inventory(slurm_sandbox, tmp_path / "stall.yaml", args=("--stall_rank", "0", "--stall_s", "300"))
    before = run_dirs(slurm_sandbox)
    proc = cli.popen("run", "-i", str(inventory), str(prompt_file))
    try:
        run_id = wait_for_stall(slurm_sandbox, before, "node1")
        assert queue() != ""
        proc.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        code, doc, stderr = Cli.finish(proc, timeout=60)
        print(f"\nctrl-c: clusterctl ended {time.monotonic() - interrupted:.1f}s after SIGINT")
    finally:
        stop(proc)
    assert code == 130 and doc["run_id"] == run_id, (doc, stderr[-2000:])
    assert queue() == ""
    assert wait_until(lambda: not left_over(run_id), 10, what="no process of the run") is True
    assert not [p for p in processes_with("srun") if "--jobid" in p[1]]


@pytest.mark.parametrize("scheduler, words", [
    ({"partition": "nosuch"}, "partition nosuch does not exist"),
    ({"nodes": 9}, "9 node(s) asked for; partition debug has 3"),
    ({"partition": "short", "time": "00:10:00"}, "over partition short's time limit"),
])
def test_what_can_never_start_is_refused_before_anything_is_submitted(slurm_sandbox, cli, prompt_file, tmp_path,
                                                                      scheduler, words):
    inventory = slurm_inventory(slurm_sandbox, tmp_path / "bad.yaml", **scheduler)
    asked = allocations_asked(slurm_sandbox)
    code, doc = cli.json("run", "-i", str(inventory), str(prompt_file))
    assert code == 2 and words in doc["error"], doc
    assert doc["where"].startswith("scheduler.") and doc["fix"]
    assert allocations_asked(slurm_sandbox) == asked and queue() == ""
    code, doc = cli.json("check", "-i", str(inventory))
    assert code == 1 and any(words in c["detail"] and c["status"] == "fail" for c in doc["checks"]), doc


def test_a_gres_form_the_site_does_not_define_is_refused_by_slurm_and_named_with_what_to_change(
        slurm_sandbox, cli, prompt_file, tmp_path):
    """The rehearsal's slurmctld defines no GRES: a typed GPU request, as another site would want it, is refused by
    Slurm itself (not by clusterctl's checks); the error is Slurm's, the fix the diagnosis' (slurm_request_invalid)."""
    inventory = slurm_inventory(slurm_sandbox, tmp_path / "gres.yaml", extra_args=["--gres=gpu:a100:1"])
    code, doc = cli.json("run", "-i", str(inventory), str(prompt_file))
    assert code == 2 and "Invalid generic resource (gres) specification" in doc["error"], doc
    assert doc["fix"].startswith("slurm_request_invalid:") and "scheduler.extra_args" in doc["fix"], doc
    assert queue() == ""


def test_check_and_status_read_the_partition(slurm_sandbox, cli, tmp_path):
    inventory = slurm_inventory(slurm_sandbox, tmp_path / "inv.yaml")
    code, doc = cli.json("check", "-i", str(inventory))
    assert code == 0 and {c["check"] for c in doc["checks"]} == {"slurm.partition", "slurm.nodes", "slurm.time"}
    code, doc = cli.json("status", "-i", str(inventory))
    assert code == 0 and doc["slurm_jobs"] == []


def test_the_exported_batch_script_runs_under_sbatch_wait(slurm_sandbox, cli, prompt_file, tmp_path):
    inventory = slurm_inventory(slurm_sandbox, tmp_path / "inv.yaml")
    script = tmp_path / "job.sbatch"
    code, doc = cli.json("export", "sbatch", "-i", str(inventory), "--prompt-file", str(prompt_file), "-o", str(script))
    assert code == 0 and doc["world_size"] == 4, doc
    done = subprocess.run(["sbatch", "--parsable", "--wait", str(script)], capture_output=True, text=True, timeout=240)
    job_id = done.stdout.strip().split(";")[0]
    out = slurm_sandbox.shared_outputs / "logs" / f"slurm-{job_id}.out"
    assert done.returncode == 0, (done.stderr, out.read_text() if out.exists() else "")
    records = run_records(slurm_sandbox, f"sbatch-{job_id}")
    assert sorted(records) == [0, 1, 2, 3]
    for rank, record in records.items():
        assert record["prompt"] == PROMPT and record["world_size"] == 4
        assert record["hostname"] == slurm_sandbox.node(NODE_OF_RANK[rank]).hostname
    assert queue() == ""


def test_listed_hosts_with_a_container_run_their_ranks_in_it_through_slurm(slurm_sandbox, cli, prompt_file, tmp_path):
    """Where the nodes run Docker: the SSH inventory (hosts, container) plus `scheduler:`. `up` starts
    the containers over SSH; `run` allocates exactly those nodes (--nodelist) and runs the ranks in the
    inventory's container through `docker exec` in srun steps, as over SSH."""
    doc = load_inventory(slurm_sandbox)
    doc["hosts"] = [h for h in doc["hosts"] if h["name"] in ("node1", "node2")]
    doc["scheduler"] = {"type": "slurm", "partition": "debug", "time": "00:10:00"}
    inventory = tmp_path / "container.yaml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    code, up = cli.json("up", "-i", str(inventory))
    assert code == 0, up
    try:
        code, run = cli.json("run", "-i", str(inventory), str(prompt_file))
        assert code == 0 and run["world_size"] == 4 and run["slurm"]["nodes"] == ["node1", "node2"], run
        record = json.loads((cli.state_dir / "runs" / run["run_id"] / "run.json").read_text())
        assert all(c["launched_with"][:2] == ["docker", "exec"] for c in record["commands"].values()), record["commands"]
        records = run_records(slurm_sandbox, run["run_id"])
        assert sorted(records) == [0, 1, 2, 3] and all(r["prompt"] == PROMPT for r in records.values())
        assert queue() == ""
    finally:
        cli.json("down", "-i", str(inventory))


def test_ctrl_c_while_the_job_waits_in_the_queue_leaves_nothing_queued(slurm_sandbox, cli, prompt_file, tmp_path):
    blocker = subprocess.run(["salloc", "--no-shell", "--exclusive", "-N", str(len(slurm_sandbox.nodes)),
                              "-J", "blocker", "-t", "00:05:00"], capture_output=True, text=True, timeout=60)
    blocker_id = blocker.stderr.split("Granted job allocation ")[1].split()[0]
    try:
        inventory = slurm_inventory(slurm_sandbox, tmp_path / "inv.yaml")
        proc = cli.popen("run", "-i", str(inventory), str(prompt_file))
        try:
            wait_until(lambda: "clusterctl-" in queue(), 30, what="the run's job in the queue")
            assert "|PD" in queue()
            proc.send_signal(signal.SIGINT)
            code, doc, stderr = Cli.finish(proc, timeout=60)
        finally:
            stop(proc)
        assert code == 130, (doc, stderr[-2000:])
        assert "clusterctl-" not in queue()
    finally:
        subprocess.run(["scancel", blocker_id], timeout=30)
    wait_until(lambda: queue() == "", 15, what="an empty queue")


def test_logs_and_stop_of_a_running_slurm_run_reach_its_nodes_through_its_allocation(slurm_sandbox, cli, prompt_file,
                                                                                   tmp_path):
    inventory = slurm_inventory(slurm_sandbox, tmp_path / "stall.yaml", args=("--stall_rank", "2", "--stall_s", "300"))
    before = run_dirs(slurm_sandbox)
    proc = cli.popen("run", "-i", str(inventory), str(prompt_file))
    try:
        run_id = wait_for_stall(slurm_sandbox, before, "node2")
        code, logs = cli.json("logs", run_id, "--rank", "2")
        assert code == 0 and any("stalling" in line["text"] for line in logs["lines"]), logs
        code, stopped = cli.json("stop", run_id)
        assert code == 0 and stopped["ok"] is True, stopped
        code, doc, stderr = Cli.finish(proc, timeout=60)
    finally:
        stop(proc)
    assert code == 1 and doc.get("stopped") is True and doc["slurm"]["cancelled"] is True, (doc, stderr[-2000:])
    assert queue() == ""
    assert wait_until(lambda: not left_over(run_id), 10, what="no process of the run") is True
    # and `logs` of the ended run: the nodes again, through a new allocation of them, given back after
    code, logs = cli.json("logs", run_id, "--rank", "0", "--tail", "3")
    assert code == 0 and logs["lines"], logs
    assert queue() == ""


def test_a_hang_on_slurm_is_stopped_and_the_rank_elsewhere_named(slurm_sandbox, cli, prompt_file, tmp_path):
    """Stall detection through srun: stacks taken (py-spy) on the allocation's nodes, the hang stopped,
    the rank named, as over SSH (tests/rehearsal/test_cluster_stalls.py)."""
    jobs = slurm_sandbox.shared_outputs / "slurm-stall-jobs"
    jobs.mkdir(exist_ok=True)
    shutil.copy(FIXTURE_JOBS / "stall.py", jobs / "stall.py")
    doc = yaml.safe_load(slurm_sandbox.slurm_inventory_path.read_text())
    doc["scheduler"]["nodes"] = 2
    doc["job"].update(command=[str(jobs / "stall.py")], args=["--mode", "hang", "--rank", "3", "--seconds", "600"],
                      nproc_per_node=2)
    doc["job"].pop("world_size_divides", None)
    inventory = tmp_path / "hang.yaml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    started = time.monotonic()
    # 10 s of silence (as tests/rehearsal/test_cluster_stalls.py): well past the ranks' start, which prints
    code, run = cli.json("run", "-i", str(inventory), "--stall-timeout", "10", str(prompt_file))
    took = time.monotonic() - started
    print(f"\nhang: stopped and named {took:.0f}s after the run started")
    assert code == 1 and took < 60, (took, run)
    first = run["first_failure"]
    assert (first["host"], first["rank"]) == ("node2", 3), first
    assert first["diagnosis"][0]["cause"] == "rank_hang" and "load_shard" in first["diagnosis"][0]["evidence"]
    assert queue() == ""
    assert wait_until(lambda: not left_over(run["run_id"]), 15, what="no process of the run") is True


@pytest.mark.heavy  # ~1 min: the straggler watch's mechanism runs in make test over SSH (test_cluster_real_loops)
def test_a_plain_ddp_loops_rank_slowed_from_outside_on_slurm_is_named_with_its_host(slurm_sandbox, cli, prompt_file,
                                                                                  tmp_path):
    """Issue 49 on Slurm: the straggler watch samples the allocation's ranks through srun as it does over SSH.
    tests/fixtures/jobs/ddp_plain.py (a plain DDP loop, no torch.distributed call of its own), 2 nodes x 2
    ranks; rank 3 (node2) held 60% of every 0.1 s from this machine, whose process table holds every node's
    ranks: named as the straggler with its host, the run otherwise ok."""
    import threading

    from fixtures.noisy import DutyCycle, find_rank

    jobs = slurm_sandbox.shared_outputs / "slurm-loop-jobs"
    jobs.mkdir(exist_ok=True)
    shutil.copy(FIXTURE_JOBS / "ddp_plain.py", jobs / "ddp_plain.py")
    inventory = slurm_inventory(slurm_sandbox, tmp_path / "slow.yaml")
    doc = yaml.safe_load(inventory.read_text())
    doc["job"].update(command=[str(jobs / "ddp_plain.py")], args=["--kind", "ddp", "--steps", "200"], nproc_per_node=2)
    doc["job"].pop("world_size_divides", None)
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    hold: dict = {}

    def slow():
        pid = wait_until(lambda: find_rank([f"CLUSTERCTL_CLUSTER={doc['name']}", "CLUSTERCTL_HOST=node2"], 3), 180,
                         interval=1.0, what="rank 3 on node2")
        cycle, hold["since"] = DutyCycle(pid, 0.6), time.time()
        while os.path.exists(f"/proc/{pid}"):
            time.sleep(0.5)
        cycle.stop()

    helper = threading.Thread(target=slow, daemon=True)
    helper.start()
    try:
        code, run = cli.json("run", "-i", str(inventory), "--stall-timeout", "0", str(prompt_file))
    finally:
        shutil.rmtree(jobs, ignore_errors=True)
    helper.join(10)
    assert code == 0 and run["ok"] is True, run
    named = run["stragglers"]
    assert [(s["host"], s["rank"]) for s in named][:1] == [("node2", 3)], named
    print(f"\non Slurm, named {named[0]['since'] - hold['since']:.1f}s after the slowdown: {named[0]}")
    assert queue() == ""


def test_a_rank_exiting_with_its_own_error_on_slurm_is_named_with_its_global_rank(slurm_sandbox, cli, prompt_file,
                                                                                  tmp_path):
    """Issue 39: rank 3 (node2, local rank 1) exits with code 3 while the others wait at a barrier and
    fail there: the run names node2 and global rank 3, as over SSH."""
    jobs = slurm_sandbox.shared_outputs / "culprit-jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURE_JOBS / "faults.py", jobs / "faults.py")
    inventory = slurm_inventory(slurm_sandbox, tmp_path / "own.yaml")
    doc = yaml.safe_load(inventory.read_text())
    doc["job"].update(command=[str(jobs / "faults.py")], nproc_per_node=2,
                      args=["--mode", "own", "--rank", "3", "--after", "2", "--out", "{outputs}/{run_id}"])
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    try:
        code, result = cli.json("run", "-i", str(inventory), str(prompt_file))
    finally:
        shutil.rmtree(jobs, ignore_errors=True)
    assert code == 1, result
    first = result["first_failure"]
    assert (first["host"], first["rank"], first["rank_exit_code"]) == ("node2", 3, 3), first
    assert queue() == ""


def test_taking_slurm_away_leaves_no_daemon_job_or_file(slurm_sandbox):
    """Last in this module: `up` without --slurm (as `down` does) stops munged, slurmctld and every
    slurmd, and removes <state>/slurm; the session sandbox goes on without it."""
    from clusterctl.sandbox import slurm as sandbox_slurm, up

    state = slurm_sandbox.state_dir
    assert all(pid is not None for pid in sandbox_slurm.running(slurm_sandbox.layout).values())
    up(len(slurm_sandbox.nodes), docker=slurm_sandbox.docker, state_dir=state)
    assert not (state / "slurm").exists() and not slurm_sandbox.slurm_inventory_path.exists()
    assert not [p for p in processes_with(str(state / "slurm")) if "pytest" not in p[1]]

