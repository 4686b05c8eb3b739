"""`clusterctl collect-logs` (and the diagnosis it prints) on the rehearsal cluster (Issue 6):
logs, outputs and node diagnostics of a run, fetched once, with a manifest and no secret;
runs failing through real planted faults diagnosed with the right cause on the right host.
`clusterctl diagnose DIR` agrees with it (issue 18; test_diagnose_cluster.py's two runs until round five,
the same jobs as two of these): a run that succeeded is no failure for both, and a failed run gets the same
ranked findings, each with a confidence."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterctl.preflight.facts import parse_df
from clusterctl_helpers import (CONTAINER_OUTPUTS, FIXTURE_JOBS, Cli, container_of, stop, variant,
                                wait_until)

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

SECRETS = (b"hf_secretvalue123", b"pw_secretvalue456")
RANK_OF = {"node1": 0, "node2": 1, "node3": 2}
JOBS_DIR = "cc-test-jobs"  # under the shared outputs, which every container mounts
HOLD_PORT = (
    "import socket, time\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', 29500)); s.listen(1); time.sleep(300)\n"
)


def _faults_job(sb, path: Path, *args: str) -> Path:
    """The sandbox cluster with secrets in its env, running tests/fixtures/jobs/faults.py, 1 rank a node."""

    def change(doc):
        doc["container"]["env"] = {"MY_PASSWORD": SECRETS[1].decode()}
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/faults.py"],
                          args=[*args, "--out", "{outputs}/{run_id}"], nproc_per_node=1,
                          env={"HF_TOKEN": {"value": SECRETS[0].decode(), "secret": True}})

    return variant(sb, path, change)


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    jobs = sandbox.shared_outputs / JOBS_DIR
    jobs.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURE_JOBS / "faults.py", jobs / "faults.py")
    where = tmp_path_factory.mktemp("collect")
    cli = Cli(where / "state")
    (where / "prompt.txt").write_text("a cat\n")
    inventory = _faults_job(sandbox, where / "ok.yaml", "--mode", "ok")
    code, doc = cli.json("up", str(inventory))
    assert code == 0, doc
    yield cli, inventory, where / "prompt.txt"
    cli.json("down", "-i", str(inventory))  # the next module starts from no container
    shutil.rmtree(jobs, ignore_errors=True)


def _run(cli, inventory, prompt) -> dict:
    code, doc = cli.json("run", "-i", str(inventory), str(prompt))
    assert code == (0 if doc["ok"] else 1), doc
    return doc


def _collect(cli, inventory, run_id: str, dest: Path) -> dict:
    code, doc = cli.json("collect-logs", "-i", str(inventory), "--run", run_id, "--dest", str(dest))
    assert code == 0 and doc["ok"] is True, doc
    assert (doc["run_id"], doc["dest"]) == (run_id, str(dest))
    return doc


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_collect_gets_logs_outputs_and_diagnostics_once_with_a_manifest_and_no_secret(sandbox, cluster, tmp_path):
    cli, inventory, prompt = cluster
    run = _run(cli, inventory, prompt)
    assert run["exit_code"] == 0
    run_id, dest = run["run_id"], tmp_path / "collected"
    doc = _collect(cli, inventory, run_id, dest)
    assert doc["findings"] == [] and doc["files"] == len(_files(dest)) - 1  # all but the manifest
    # a run that succeeded is no failure for `diagnose` either (from the run's exit codes, whatever its logs
    # print: its ranks print secrets and warnings)
    code, diagnosed = cli.json("diagnose", str(dest))
    assert code == 0 and diagnosed["findings"] == [] and diagnosed["root_cause"] is None, diagnosed

    for host, rank in RANK_OF.items():
        rank_log = (dest / host / "logs" / f"{host}-r{rank}.log").read_text()
        assert f"[faults rank {rank}] all_reduce: 3" in rank_log
        assert "HF_TOKEN=*** MY_PASSWORD=***" in rank_log  # what the job printed, masked
        agent_log = (dest / host / "logs" / f"{host}-agent.log").read_text()
        assert f"[{host} rank{rank}]: [faults rank {rank}] all_reduce: 3" in agent_log  # torchrun's copy
        diag = dest / host / "diag"
        shm = parse_df((diag / "df-shm.txt").read_text())  # read from the host, not by a docker exec
        assert shm.mount == "/dev/shm" and shm.size_bytes == 256 << 20, (diag / "df-shm.txt").read_text()
        assert "198.18.0." in (diag / "ip-addr.txt").read_text()
        assert json.loads((diag / "docker-inspect.json").read_text())[0]["Name"] == "/cc-sandbox"
        assert "MY_PASSWORD=***" in (diag / "env.txt").read_text()
        result = (dest / "outputs" / run_id / f"result-rank{rank}.txt").read_text()
        assert result == f"rank {rank} of 3: sum 3; token ***\n"

    manifest = json.loads((dest / "manifest.json").read_text())
    on_disk = {str(p.relative_to(dest)) for p in _files(dest)} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for rel, entry in manifest["files"].items():
        data = (dest / rel).read_bytes()
        assert (entry["size"], entry["sha256"]) == (len(data), hashlib.sha256(data).hexdigest()), rel

    for path in _files(dest) + _files(cli.state_dir):
        data = path.read_bytes()
        assert not [s for s in SECRETS if s in data], f"a secret value is in {path}"

    again = _collect(cli, inventory, run_id, dest)  # nothing new on the nodes: nothing fetched
    assert {h: (e["status"], e["files"]) for h, e in again["hosts"].items()} == {h: ("ok", 0) for h in RANK_OF}
    assert again["files"] == doc["files"]
    after = json.loads((dest / "manifest.json").read_text())["files"]
    assert set(after) == set(manifest["files"])

    def content(files):  # diag/ is the node at collection time: read again on every collect
        return {rel: e["sha256"] for rel, e in files.items() if "/diag/" not in f"/{rel}"}

    assert content(after) == content(manifest["files"])


def test_a_rank_short_of_shared_memory_is_diagnosed_shm_too_small_on_its_host(sandbox, cluster, tmp_path):
    cli, _, prompt = cluster
    inventory = _faults_job(sandbox, tmp_path / "shm.yaml", "--mode", "shm", "--shm_mb", "100")
    container_pid = container_of(sandbox, "node2", "cc-sandbox").attrs["State"]["Pid"]

    def shm_size(size: str) -> None:  # node2's container only: its /dev/shm tmpfs, resized for real
        subprocess.run(["nsenter", "--mount", f"--target={container_pid}", "mount", "-o", f"remount,size={size}",
                        "/dev/shm"], check=True)

    shm_size("64m")
    try:
        run = _run(cli, inventory, prompt)
        doc = _collect(cli, inventory, run["run_id"], tmp_path / "collected")  # while the node is still wrong
    finally:
        shm_size("256m")
    assert run["exit_code"] != 0
    assert (run["first_failure"]["host"], run["first_failure"]["rank"]) == ("node2", 1)
    assert run["first_failure"]["diagnosis"][0]["cause"] == "shm_too_small"
    top = doc["findings"][0]
    assert (top["cause"], top["host"], top["rank"]) == ("shm_too_small", "node2", 1), doc["findings"]
    assert "No space left on device" in top["evidence"] and "df /dev/shm: 64 MiB" in top["evidence"]
    assert "container.shm_size" in top["fix"]


def test_a_rank_that_exits_while_the_others_wait_in_a_collective_is_named_before_the_cascade(
        sandbox, cluster, tmp_path):
    cli, _, prompt = cluster
    inventory = _faults_job(sandbox, tmp_path / "exit.yaml", "--mode", "exit", "--rank", "1")
    run = _run(cli, inventory, prompt)
    assert run["exit_code"] != 0
    assert (run["first_failure"]["host"], run["first_failure"]["rank"]) == ("node2", 1), run["first_failure"]
    dest = tmp_path / "collected"
    doc = _collect(cli, inventory, run["run_id"], dest)
    assert "Connection closed by peer" in (dest / "node1" / "logs" / "node1-r0.log").read_text()  # the cascade
    top = doc["findings"][0]
    assert (top["host"], top["rank"]) == ("node2", 1), doc["findings"]
    # `diagnose` of the bundle agrees with collect-logs: the same ranked findings, each with a confidence
    code, diagnosed = cli.json("diagnose", str(dest))
    assert code == 0 and diagnosed["findings"][0] == top
    assert 1 <= len(doc["findings"]) <= 3 and diagnosed["findings"] == doc["findings"], (diagnosed, doc["findings"])
    assert all(0 <= f["confidence"] <= 1 for f in diagnosed["findings"])


def test_the_rendezvous_port_taken_on_the_master_is_diagnosed_port_in_use(sandbox, cluster, tmp_path):
    cli, inventory, prompt = cluster
    holder = subprocess.Popen(sandbox.ns_argv("node1", [sys.executable, "-c", HOLD_PORT]))
    try:
        wait_until(lambda: sandbox.ns_exec("node1", ["ss", "-Hltn", "sport = :29500"]).stdout.strip(), 15,
                   what="the planted listener")
        run = _run(cli, inventory, prompt)
        doc = _collect(cli, inventory, run["run_id"], tmp_path / "collected")
    finally:
        stop(holder)
    assert run["exit_code"] != 0 and run["first_failure"]["host"] == "node1"
    top = doc["findings"][0]
    assert (top["cause"], top["host"]) == ("port_in_use", "node1"), doc["findings"]
    assert "EADDRINUSE" in top["evidence"] and "rendezvous.port" in top["fix"]
