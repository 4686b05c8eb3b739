"""`clusterctl run` on the rehearsal cluster (Issue 5): 3 nodes x 2 CPU ranks of the example
job through real sshd, Docker and torchrun; the prompt byte for byte; fail fast on a failing
rank; Ctrl-C; one run at a time. A node cut off mid-run: test_cluster_health.py's first test (the same run
goes on to quarantine that node)."""
from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from clusterctl_helpers import FIXTURE_JOBS, Cli, load_inventory, processes_with, run_records, variant, wait_until

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

NODE_OF_RANK = {0: "node1", 1: "node1", 2: "node2", 3: "node2", 4: "node3", 5: "node3"}
CANARY = "/tmp/cc-prompt-was-run-by-a-shell"
PROMPT = ("A \"quoted\" cat's 'walk' $(touch " + CANARY + ") `touch " + CANARY + "` $HOME ${PATH} $$ \\ \\n {run_id} %s"
          "\nsecond line\twith a tab; rm -rf / && echo pwned | cat > x < y * ? [a] ~ # !"
          "\n猫が草の上を歩く — café, naïve, Ελληνικά, emoji 🐈‍⬛.")


@pytest.fixture(scope="module")
def cli(sandbox, tmp_path_factory):
    cli = Cli(tmp_path_factory.mktemp("run-state"))
    code, doc = cli.json("up", str(sandbox.inventory_path))
    assert code == 0, doc
    yield cli
    cli.json("down", "-i", str(sandbox.inventory_path))  # the next module starts from no container


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompt") / "prompt.txt"
    path.write_bytes(PROMPT.encode() + b"\n")
    return path


def _with_args(sb, path: Path, *extra: str) -> Path:
    return variant(sb, path, lambda d: d["job"].update(args=d["job"]["args"] + list(extra)))


def _run_dirs(sb) -> set:
    logs = sb.shared_outputs / "logs"
    return set(os.listdir(logs)) if logs.is_dir() else set()


def _wait_for_stall(sb, before: set, host: str, timeout: float = 90) -> str:
    """The run id of the run started after `before`, once its stalling rank said so on `host`."""

    def stalling():
        for run_id in _run_dirs(sb) - before:
            log = sb.shared_outputs / "logs" / run_id / host / "agent.log"
            if log.exists() and "stalling" in log.read_text(errors="replace"):
                return run_id
        return None

    return wait_until(stalling, timeout, interval=0.5, what=f"a stalling rank on {host}")


def _left_over(run_id: str) -> list:
    return [(pid, cmd) for pid, cmd in processes_with(run_id) if "pytest" not in cmd]


def test_the_example_job_runs_on_3_nodes_x_2_ranks_and_every_rank_gets_the_prompt_byte_for_byte(
        sandbox, cli, prompt_file):
    """And its ranks print no warning caused by clusterctl's own settings (a test of its own until round five:
    the same run of the same job served both)."""
    doc_inventory = load_inventory(sandbox)
    user_env = {**doc_inventory["job"].get("env", {}), **doc_inventory["container"].get("env", {})}
    assert not [name for name in user_env if name.startswith(("NCCL_", "GLOO_"))]
    code, doc = cli.json("exec", "-i", str(sandbox.inventory_path), "--", "docker", "exec", "cc-sandbox", "python3",
                         "-c", "import os, socket; print(socket.gethostbyname(socket.gethostname()), "
                               "*sorted(k for k in os.environ if k.startswith(('NCCL_', 'GLOO_'))))")
    # the Debian loopback trap on odd nodes (the container copies the node's /etc/hosts), and nothing
    # NCCL/GLOO-ish in the container for clusterctl to lean on
    assert {n: e["stdout"].strip() for n, e in doc["hosts"].items()} == {
        n.name: "127.0.1.1" if n.hostname_on_loopback else n.address for n in sandbox.nodes}

    # the flight recorder under the names torch 2.13 reads without a deprecation warning (the facts know the nodes'
    # torch), and numpy beside torch (no "Failed to initialize NumPy" on import): the ranks print no warning
    # caused by clusterctl's own settings (checked in this run's logs below)
    code, plan = cli.json("run", "--plan", "-i", str(sandbox.inventory_path), str(prompt_file))
    assert code == 0, plan
    for name, command in plan["plan"].items():
        assert "TORCH_FR_BUFFER_SIZE" in command["env"] and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in command["env"], name

    code, doc = cli.json("run", "-i", str(sandbox.inventory_path), str(prompt_file))
    assert code == 0 and doc["ok"] is True, doc
    assert (doc["world_size"], doc["nproc_per_node"], doc["exit_code"]) == (6, 2, 0)
    assert doc["master"] == {"host": "node1", "address": "198.19.0.11", "port": 29500}  # on the fabric
    run_id = doc["run_id"]
    assert run_id and "first_failure" not in doc
    assert (sandbox.shared_outputs / f"{run_id}.gif").read_bytes()[:6] == b"GIF89a"

    records = run_records(sandbox, run_id)
    assert sorted(records) == list(range(6))
    for rank, record in records.items():
        assert record["prompt"] == PROMPT, f"rank {rank} got another prompt"
        assert record["error"] is None and record["world_size"] == 6
        assert record["node"] == NODE_OF_RANK[rank]
        assert record["hostname"] == sandbox.node(NODE_OF_RANK[rank]).hostname
        assert record["master"] == "198.19.0.11:29500"
    assert not Path(CANARY).exists()
    for node in ("node1", "node2", "node3"):
        log = (sandbox.shared_outputs / "logs" / run_id / node / "agent.log").read_text(errors="replace")
        assert "generate rank" in log  # the ranks' own output is there: the warnings would be too
        assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in log and "is deprecated; use" not in log, node
        assert "NumPy" not in log, node


def test_a_failing_rank_stops_every_node_fast_and_is_named_first(sandbox, cli, prompt_file, tmp_path):
    inventory = _with_args(sandbox, tmp_path / "fail.yaml", "--fail_rank", "3")
    code, doc = cli.json("run", "-i", str(inventory), str(prompt_file))
    returned = time.time()
    assert code == 1 and doc["ok"] is False and doc["exit_code"] != 0
    first = doc["first_failure"]
    assert (first["host"], first["rank"]) == ("node2", 3), first
    assert first["diagnosis"] and first["diagnosis"][0]["host"] == "node2"
    assert "injected failure on rank 3" in first["diagnosis"][0]["evidence"]
    records = run_records(sandbox, doc["run_id"])
    assert records[3]["error"] == "RuntimeError: injected failure on rank 3 (--fail_rank)"
    assert returned - records[3]["t_end"] < 15, "the run did not stop within 15 s of the failure"
    assert wait_until(lambda: not _left_over(doc["run_id"]), 10, what="no process of the run") is True


def test_ctrl_c_stops_every_rank_and_a_second_run_meanwhile_is_refused(sandbox, cli, prompt_file, tmp_path):
    inventory = _with_args(sandbox, tmp_path / "stall.yaml", "--stall_rank", "0", "--stall_s", "300")
    before = _run_dirs(sandbox)
    proc = cli.popen("run", "-i", str(inventory), str(prompt_file))
    try:
        run_id = _wait_for_stall(sandbox, before, "node1")

        code, doc = cli.json("run", "-i", str(sandbox.inventory_path), str(prompt_file))  # same controller state
        assert code == 2 and "already in progress" in doc["error"], doc
        other = Cli(tmp_path / "another-controller")
        code, doc = other.json("run", "-i", str(sandbox.inventory_path), str(prompt_file))  # another machine's state
        # another controller sees the run on the nodes themselves: the GPU leases name the holder (issue 48)
        assert code == 2 and doc["error"].startswith("GPUs held: "), doc
        assert f"by run {run_id} (" in doc["error"] and f"clusterctl stop {run_id}" in doc["fix"], doc

        proc.send_signal(signal.SIGINT)
        code, doc, stderr = Cli.finish(proc, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130 and doc["exit_code"] == 130 and doc["run_id"] == run_id, (doc, stderr[-2000:])
    assert not _leases_of(sandbox, run_id)  # released before `run` returned (issue 48): the next run is not refused
    assert wait_until(lambda: not _left_over(run_id), 10, what="no process of the run") is True


def _leases_of(sandbox, run_id: str) -> list:
    """The GPU leases `run_id` holds on the nodes, as node/leases.py lists them (the outputs are shared)."""
    from clusterctl.node import leases

    where = sandbox.shared_outputs / leases.LEASES
    hosts = [p.name for p in where.iterdir()] if where.is_dir() else []
    return [lease for host in hosts for lease in leases.listing(str(sandbox.shared_outputs), host)["leases"]
            if lease["run_id"] == run_id]


def test_a_tqdm_style_job_on_2_nodes_x_2_ranks_shows_at_most_40_progress_lines_and_each_ranks_final_state(
        sandbox, cli, prompt_file, tmp_path):
    """Issue 27: 4 ranks each redrawing a progress line 200 times with `\\r` (plain python: the rank
    image has no tqdm) made 797 lines of the live log, halves of lines glued to another rank's
    prefix. The live log (what `run` prints; rich draws it on stderr) shows each rank's states
    and its final one; the files on the nodes keep every byte as the ranks wrote them."""
    jobs = sandbox.shared_outputs / "test-jobs"
    jobs.mkdir(exist_ok=True)
    (jobs / "progress.py").write_bytes((FIXTURE_JOBS / "progress.py").read_bytes())

    def two_nodes(d):
        d["hosts"] = [h for h in d["hosts"] if h["name"] in ("node1", "node2")]
        d["job"].update(command=["/workspace/output/test-jobs/progress.py"], args=["--steps", "200", "--delay", "0.02"])
        d["job"].pop("world_size_divides", None)

    inventory = variant(sandbox, tmp_path / "progress.yaml", two_nodes)
    before = _run_dirs(sandbox)
    proc = cli.popen("run", "-i", str(inventory), str(prompt_file), json_output=False)
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    shown = (out + err).splitlines()
    progress = [line for line in shown if re.search(r"\d+/200\b", line)]
    assert 4 <= len(progress) <= 40, "\n".join(progress[:60])
    for rank in range(4):
        final = f"[{NODE_OF_RANK[rank]} r{rank}] rank {rank}: 100%|{'#' * 20}| 200/200"
        assert final in shown, f"rank {rank}'s final state is not in the live log:\n" + "\n".join(progress)
    # one rank's line never carries another's text or torchrun's prefix
    for line in progress:
        match = re.match(r"\[node[12] r(\d)\] rank (\d): ", line)
        assert match and match.group(1) == match.group(2) and "rank" not in line[match.end():], line
    assert not [line for line in shown if re.search(r"\[node\d rank\d\]:", line)]
    warnings = [line for line in shown if "the same on every rank" in line]
    assert len(warnings) == 2 and "[repeated 3x across 3 ranks]" in warnings[1], warnings

    (run_id,) = _run_dirs(sandbox) - before
    for rank in range(4):
        node, local = NODE_OF_RANK[rank], rank % 2
        (log,) = (sandbox.shared_outputs / "logs" / run_id / node).glob(f"{run_id}_*/attempt_0/{local}/stdout.log")
        data = log.read_bytes()
        assert data.count(b"\r") == 201 and data.endswith(f"| 200/200\nrank {rank} finished\n".encode()), data[-200:]
    agent_log = (sandbox.shared_outputs / "logs" / run_id / "node1" / "agent.log").read_bytes()
    assert b"rank1]: rank 1:" in agent_log  # torchrun's own copy stays in agent.log as it wrote it


def test_run_plans_with_the_facts_up_learned_until_a_nodes_container_restarts(sandbox, cli, prompt_file):
    # last in this module: it restarts node2's container
    inventory = str(sandbox.inventory_path)
    code, first = cli.json("run", "--plan", "-i", inventory, str(prompt_file))
    assert code == 0 and first["facts_from"] == {"node1": "up", "node2": "up", "node3": "up"}, first
    code, doc = cli.json("exec", "-i", inventory, "--limit", "node2", "--", "docker", "restart", "-t", "0", "cc-sandbox")
    assert code == 0, doc
    code, again = cli.json("run", "--plan", "-i", inventory, str(prompt_file))
    assert code == 0 and again["facts_from"] == {"node1": "up", "node2": "probed", "node3": "up"}, again
    # the probe finds what up had found: the same plan either way
    assert again["topology"] == first["topology"] and again["master"] == first["master"]
