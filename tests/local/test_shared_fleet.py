"""Two operators share one fleet (issue 48), on this machine: two `connection: local` hosts, one inventory
file, two directories (each its own `.clusterctl/` state, each its own operator name). The job is a
marked `sleep` per node (`job.launcher: none`), so no torch is needed.

Before issue 48, B's `up` killed A's detached run without a word and A's `status` went on saying
`running`. Now: B's `up` and `down` leave it alone and name it; B's `run` is refused naming A; B's
`status` shows A's run; `run --wait` queues B and starts it once A's leases are free; a forced cleanup is
logged on the node and A's `status` says `interrupted`, naming B."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from clusterctl_helpers import environ_of, wait_until
from ssh_testbed import free_port

CLUSTER = f"fleet-{os.getpid()}"
ROOT = Path(__file__).resolve().parents[2]


def _inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(f"name: {CLUSTER}\nhosts:\n  - {{name: node1, connection: local, gpus: none}}\n"
                    f"  - {{name: node2, connection: local, gpus: none}}\nrendezvous: {{port: {free_port()}}}\n"
                    f"job:\n  launcher: none\n  command: [sleep, '600']\n  nproc_per_node: 1\n"
                    f"  outputs: {tmp_path / 'outputs'}\nchecks: {{ib: off}}\n")
    (tmp_path / "prompt.txt").write_text("a cat\n")
    return path


def _operator(tmp_path: Path, who: str) -> dict:
    home = tmp_path / who
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "MASTER_", "RANK", "WORLD_SIZE"))}
    env.update(CLUSTERCTL_STATE=str(home / ".clusterctl"), CLUSTERCTL_OPERATOR=f"{who}@ctl-{who}",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH")))))  # this checkout's clusterctl
    return {"cwd": home, "env": env}


def _start(op: dict, *argv: str, json_output: bool = True) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "clusterctl", argv[0], *(["--json"] if json_output else []),
                             *argv[1:]], cwd=op["cwd"],
                            env=op["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _cli(op: dict, *argv: str) -> tuple[int, dict, str]:
    proc = _start(op, *argv)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, json.loads(out), err


def _ranks(run_id: str) -> list[int]:
    """The job's own processes of a run (the marked `sleep`s), as the cleanup scan finds them."""
    found = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline == b"sleep\x00600\x00" and environ_of(pid).get("CLUSTERCTL_RUN_ID") == run_id:
            found.append(pid)
    return found


def _cleanup() -> None:
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        if environ_of(pid).get("CLUSTERCTL_CLUSTER") == CLUSTER:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_two_operators_never_destroy_each_others_runs(tmp_path):
    inventory = str(_inventory(tmp_path))
    prompt = str(tmp_path / "prompt.txt")
    alice, bob = _operator(tmp_path, "alice"), _operator(tmp_path, "bob")
    waiting = None
    try:
        code, started, err = _cli(alice, "run", "-i", inventory, "--detach", prompt)
        assert code == 0, err[-2000:]
        run_a = started["run_id"]
        assert len(_ranks(run_a)) == 2

        code, up, err = _cli(bob, "up", inventory)
        assert code == 0, err[-2000:]
        assert len(_ranks(run_a)) == 2, "B's up killed A's ranks"
        left = up["hosts"]["node1"]["left_running"]
        assert [(r["run_id"], r["operator"]) for r in left] == [(run_a, "alice@ctl-alice")]
        told = _start(bob, "up", inventory, json_output=False)
        _out, err = told.communicate(timeout=120)
        assert f"node1: ranks of run {run_a} (alice@ctl-alice, since " in err and "left running" in err, err[-2000:]
        assert len(_ranks(run_a)) == 2

        code, refused, err = _cli(bob, "run", "-i", inventory, prompt)
        assert code == 2 and f"by run {run_a} (alice@ctl-alice, since " in refused["error"], refused
        assert "run --wait" in refused["fix"]

        code, status, err = _cli(bob, "status", "-i", inventory)
        assert [(r["run_id"], r["operator"]) for r in status["fleet"]["runs"]] == [(run_a, "alice@ctl-alice")]
        assert status["fleet"]["runs"][0]["gpus"] == {"node1": ["slot0"], "node2": ["slot0"]}

        code, down, err = _cli(bob, "down", "-i", inventory)
        assert code == 0 and len(_ranks(run_a)) == 2, "B's down killed A's ranks"

        waiting = _start(bob, "run", "-i", inventory, "--wait", "--detach", prompt, json_output=False)
        wait_until(lambda: _cli(bob, "status", "-i", inventory)[1]["fleet"]["waiting"], 30, 0.5, what="B in the queue")
        code, forced, err = _cli(bob, "up", inventory, "--force")
        assert code == 0 and wait_until(lambda: not _ranks(run_a), 10, 0.5, what="A's ranks ended by force")
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, err[-3000:]
        assert "waiting for GPU leases: position 1 in the queue; held by run " + run_a in err, err[-3000:]
        run_b = err.split("goes on, watched on the cluster")[0].rsplit("run ", 1)[1].strip()
        assert len(_ranks(run_b)) == 2

        code, status, err = _cli(alice, "status", "-i", inventory)
        mine = next(r for r in status["runs"] if r["run_id"] == run_a)
        assert mine["state"] == "interrupted", mine
        assert [(w["run_id"], w["by"]) for w in status["fleet"]["interrupted_by"]] == [(run_a, "bob@ctl-bob")]
        told = _start(alice, "status", "-i", inventory, json_output=False)
        _out, err = told.communicate(timeout=120)
        assert f"run {run_a} was interrupted: ended by bob@ctl-bob (`clusterctl up --force`)" in err, err[-2000:]
        forced_log = (tmp_path / "outputs" / ".clusterctl-leases" / "node1" / "forced.log").read_text()
        assert json.loads(forced_log)["by"] == "bob@ctl-bob"
    finally:
        if waiting is not None and waiting.poll() is None:
            waiting.kill()
            waiting.wait()
        _cleanup()


def test_ctrl_c_leaves_the_queue_at_once(tmp_path):
    inventory = str(_inventory(tmp_path))
    prompt = str(tmp_path / "prompt.txt")
    alice, bob = _operator(tmp_path, "alice"), _operator(tmp_path, "bob")
    try:
        code, started, err = _cli(alice, "run", "-i", inventory, "--detach", prompt)
        assert code == 0, err[-2000:]
        waiting = _start(bob, "run", "-i", inventory, "--wait", prompt, json_output=False)
        tickets = lambda: [p.name for p in (tmp_path / "outputs" / ".clusterctl-leases" / "node1").iterdir()  # noqa: E731
                           if p.name.startswith("ticket.")]
        wait_until(tickets, 30, 0.5, what="B's ticket on node1")
        waiting.send_signal(signal.SIGINT)
        waiting.communicate(timeout=30)
        assert waiting.returncode == 130 and not tickets()
    finally:
        _cleanup()


def test_the_cleanup_scan_kills_only_the_runs_judged_dead_and_removes_only_what_they_kept(tmp_path):
    """`up`'s kill round names the runs proven dead: a live run, and one that started after the judgement
    (its id unknown then), keep their processes and their kept py-spy directories."""
    from clusterctl.modules import process

    marked = {}
    for run_id in ("dead-run", "live-run", "new-run"):
        env = {**os.environ, "CLUSTERCTL_CLUSTER": CLUSTER, "CLUSTERCTL_HOST": "n1", "CLUSTERCTL_RUN_ID": run_id}
        marked[run_id] = subprocess.Popen(["sleep", "600"], env=env)
        (tmp_path / process.kept_pyspy_name(CLUSTER, run_id)).mkdir(mode=0o700)
    try:
        env = {**os.environ, "TMPDIR": str(tmp_path)}
        listed = subprocess.run(process.scan_command(CLUSTER, "n1", 1, "list").argv, env=env, capture_output=True,
                                text=True, timeout=30, check=True).stdout
        assert set(process.runs_of(listed).values()) == {"dead-run", "live-run", "new-run"}
        killed = subprocess.run(process.scan_command(CLUSTER, "n1", 1, "kill", only=("dead-run",)).argv, env=env,
                                capture_output=True, text=True, timeout=30, check=True).stdout
        assert [p["pid"] for p in process.parse_scan(killed)["ours"]] == [marked["dead-run"].pid]
        assert marked["dead-run"].wait(timeout=10) is not None
        assert marked["live-run"].poll() is None and marked["new-run"].poll() is None
        assert sorted(p.name.rsplit(".", 1)[1] for p in tmp_path.iterdir()) == ["live-run", "new-run"]
    finally:
        for proc in marked.values():
            proc.kill()
            proc.wait()
