"""The node-side shell pieces a run is made of, run for real on this machine: the torchrun
wrapper with its marker-scoped stop, and the file put that nodes sharing one filesystem
run at the same moment."""
from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

from clusterctl.models import Host, Inventory, JobSpec, RendezvousSpec
from clusterctl.plan import wrapper as torchrun
from clusterctl.modules import process


def _inventory(name: str) -> Inventory:
    return Inventory(name=name, hosts=(Host("n1", "127.0.0.1"),), rendezvous=RendezvousSpec(port=1),
                     job=JobSpec(command=("job",), nproc_per_node=1, outputs="/out"))


def _run(command, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command.argv, input=command.stdin, capture_output=True, timeout=30, **kwargs)


def _wait_for(path: Path, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_a_stopped_run_leaves_nothing_that_carries_the_marker(tmp_path):
    """Stop kills what carries the marker; the wrapper (unmarked) then writes agent.exit and ends.
    Its own `sleep 1` once carried the marker, outlived the stop and refused the next run."""
    cluster = f"wrapper-test-{uuid.uuid4().hex[:8]}"
    inventory, run_dir = _inventory(cluster), tmp_path / "run"
    env = (*process.marker_env(cluster, "n1", "r1"), ("GREETING", "hello world"))
    assert _run(torchrun.write_env_command(inventory, str(run_dir), env)).returncode == 0
    job = ("sh", "-c", 'echo "$GREETING"; exec sleep 60')
    assert _run(torchrun.start_command(inventory, str(run_dir), job)).returncode == 0
    _wait_for(run_dir / "agent.pid")
    scan = process.scan_command(cluster, "n1", 1, "list")
    deadline = time.monotonic() + 10
    while not process.parse_scan(_run(scan, text=True).stdout)["ours"]:
        assert time.monotonic() < deadline, "the job never showed up with its marker"
        time.sleep(0.05)
    ours = process.parse_scan(_run(scan, text=True).stdout)["ours"]
    assert [p["pid"] for p in ours] == [int((run_dir / "agent.pid").read_text())]  # the job alone, not the wrapper

    assert _run(process.scan_command(cluster, "n1", 1, "kill", "r1")).returncode == 0
    _wait_for(run_dir / "agent.exit")
    assert int((run_dir / "agent.exit").read_text()) != 0
    assert process.parse_scan(_run(scan, text=True).stdout)["ours"] == []
    assert "hello world" in (run_dir / "agent.log").read_text()


def _fake_docker(tmp_path: Path, pid: str) -> dict:
    """A `docker` on PATH that answers `inspect -f` with `pid` and `exec` with a df of its own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text(f'#!/bin/sh\ncase "$1" in\n  inspect) echo "{pid}";;\n'
                      '  exec) echo "Filesystem 1B-blocks Used Available Use% Mounted on"; '
                      'echo "shm 111 0 111 0% /dev/shm";;\nesac\n')
    script.chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")


def test_a_containers_shm_is_read_from_the_host_through_its_pid(tmp_path):
    from clusterctl.collect.fetch import _CONTAINER_SHM
    from clusterctl.preflight.facts import parse_df

    env = _fake_docker(tmp_path, str(os.getpid()))  # this process: its /dev/shm is the host's
    out = subprocess.run(["sh", "-c", _CONTAINER_SHM, "shm", "ctr"], env=env, capture_output=True, text=True,
                         check=True).stdout
    usage, fs = parse_df(out), os.statvfs("/dev/shm")
    assert usage.mount == "/dev/shm" and usage.size_bytes == fs.f_frsize * fs.f_blocks
    assert usage.avail_bytes == fs.f_frsize * fs.f_bavail


def test_without_the_containers_pid_the_shm_is_read_by_docker_exec(tmp_path):
    from clusterctl.collect.fetch import _CONTAINER_SHM
    from clusterctl.preflight.facts import parse_df

    env = _fake_docker(tmp_path, "")  # inspect found nothing (or /proc/PID/root is not ours to read)
    out = subprocess.run(["sh", "-c", _CONTAINER_SHM, "shm", "ctr"], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert parse_df(out).size_bytes == 111


def _start_sleeping_job(tmp_path, lease_s: int):
    cluster = f"lease-test-{uuid.uuid4().hex[:8]}"
    inventory, run_dir = _inventory(cluster), tmp_path / "run"
    env = process.marker_env(cluster, "n1", "r1")
    assert _run(torchrun.write_env_command(inventory, str(run_dir), env)).returncode == 0
    assert _run(torchrun.start_command(inventory, str(run_dir), ("sleep", "60"), lease_s=lease_s)).returncode == 0
    _wait_for(run_dir / "agent.pid")
    return inventory, run_dir


def test_a_lease_nobody_renews_stops_the_nodes_ranks_and_says_why(tmp_path):
    _inventory_, run_dir = _start_sleeping_job(tmp_path, lease_s=2)
    _wait_for(run_dir / "agent.exit", 30)
    assert int((run_dir / "agent.exit").read_text()) != 0
    assert "no word from the controller or the run's supervisor" in (run_dir / "agent.log").read_text()


def test_the_controllers_polls_renew_the_lease_and_the_job_runs_past_it(tmp_path):
    inventory, run_dir = _start_sleeping_job(tmp_path, lease_s=2)
    poll = torchrun.poll_command(inventory, str(run_dir))
    try:
        for _ in range(12):  # 6 s of polls every 0.5 s: three leases' worth
            assert _run(poll, text=True).stdout.strip() == "running"
            time.sleep(0.5)
        assert not (run_dir / "agent.exit").exists()
    finally:
        (run_dir / "stop").write_text("the test is over")
    _wait_for(run_dir / "agent.exit", 30)
    assert "the test is over" in (run_dir / "agent.log").read_text()


def test_the_output_stream_ends_by_itself_once_agent_exit_appears(tmp_path):
    inventory, run_dir = _start_sleeping_job(tmp_path, lease_s=60)
    follow = subprocess.Popen(torchrun.follow_command(inventory, str(run_dir), 1).argv, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)
    try:
        (run_dir / "stop").write_text("the test is over")
        assert follow.wait(timeout=30) == 0
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert (run_dir / "agent.exit").exists()
    deadline = time.monotonic() + 10  # the tail that waited for agent.exit ends with its reader
    while str(run_dir) in _tails():
        assert time.monotonic() < deadline, "a tail of the output stream outlived it"
        time.sleep(0.1)


def _tails() -> list[str]:
    """The working directories of the `tail` processes now (the output stream's run in the run dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (entry / "comm").read_text().strip() == "tail":
                found.append(os.readlink(entry / "cwd"))
        except OSError:
            continue
    return found
