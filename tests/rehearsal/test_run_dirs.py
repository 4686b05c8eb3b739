"""The run's directories on a job.outputs that nodes share as different users (root on one node,
a sudo user on another: the realistic rehearsal cluster without containers). The node-side program
(node/run_files.py, as plan/node_files.py sends it) runs here for real: as root (a node reached as root,
or `sudo` for the sudo user, SUDO_UID naming that user), the second user as nobody through setpriv. A
second local user who made `logs/<run>/.files` first on a 1777 outputs gets nothing of theirs run."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from clusterctl.plan import node_files

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to act as a second user")


def _op(operation: str, path, *args: str, data: bytes = b"", other_user: bool = False,
        sudo_for: int | None = None) -> subprocess.CompletedProcess:
    """One node/run_files.py operation as the controller sends it; as nobody, or as root through sudo for a user."""
    argv = list(node_files.argv("python3", operation, str(path), *args))
    if other_user:
        argv = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", *argv]
    env = {**os.environ, **({"SUDO_UID": str(sudo_for), "SUDO_GID": str(sudo_for)} if sudo_for is not None else {})}
    return subprocess.run(argv, input=data, capture_output=True, timeout=30, env=env)


@pytest.fixture
def reachable_dir():
    """A directory another user can traverse (pytest's tmp_path lies under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="clusterctl-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_a_shared_1777_outputs_lets_each_user_make_its_run_directory_and_read_the_jobs_files(reachable_dir):
    outputs = reachable_dir / "outputs"
    outputs.mkdir()
    outputs.chmod(0o1777)
    run = outputs / "logs" / "R"
    assert _op("write-env", run / "node1", "1", data=b"A=1\n").returncode == 0  # a node reached as root
    assert _op("put", run / ".files", "job.py", data=b"print(1)\n").returncode == 0
    second = _op("write-env", run / "node2", "1", data=b"A=1\n", sudo_for=65534)  # the sudo user's node
    assert second.returncode == 0, second.stderr
    assert (run / "node2").stat().st_uid == 65534 == (run / "node2" / "env").stat().st_uid
    same = _op("put", run / ".files", "job.py", data=b"print(1)\n", other_user=True)
    assert same.returncode == 0, same.stderr  # the same bytes, written first by root: fine
    different = _op("put", run / ".files", "job.py", data=b"print(2)\n", other_user=True)
    assert different.returncode != 0  # never silently a different job file
    assert {p.name: oct(p.stat().st_mode & 0o7777) for p in (outputs / "logs", run, run / ".files")} == {
        "logs": "0o1777", "R": "0o1777", ".files": "0o755"}
    assert {p.stat().st_uid for p in (outputs / "logs", run, run / ".files")} == {0}  # root's: every node accepts them
    assert oct((run / "node1").stat().st_mode & 0o777) == "0o700" == oct((run / "node2").stat().st_mode & 0o777)
    assert (run / ".files" / "job.py").read_bytes() == b"print(1)\n"


def test_another_user_who_made_the_runs_files_dir_first_gets_nothing_run(reachable_dir):
    """H2 (issue 47): on a shared 1777 outputs another local user makes `logs/<run>/.files` first and puts
    a node_metrics.py of their own there. Shipping refuses the directory, naming it and the fix: the
    run never starts on it, so nothing of theirs runs as root."""
    outputs = reachable_dir / "outputs"
    outputs.mkdir()
    outputs.chmod(0o1777)
    files = outputs / "logs" / "R2" / ".files"
    for made in (outputs / "logs", files.parent, files):
        assert subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "mkdir", "-m",
                               "1777" if made != files else "0777", str(made)]).returncode == 0
    (files / "node_metrics.py").write_text("open('/tmp/owned', 'w')\n")
    os.chown(files / "node_metrics.py", 65534, 65534)
    put = _op("put", files, "node_metrics.py", data=b"# clusterctl's sampler\n")
    refusal = put.stderr.decode()
    assert put.returncode == 4 and f"refused {outputs / 'logs'}: is owned by uid 65534" in refusal, refusal
    assert "have root make it" in refusal
    assert (files / "node_metrics.py").read_text() == "open('/tmp/owned', 'w')\n"  # nothing written, nothing run
def test_a_private_outputs_keeps_the_run_directories_as_private_as_itself(tmp_path):
    outputs = tmp_path / "outputs"
    assert _op("write-env", outputs / "logs" / "R" / "node1", "0", data=b"A=1\n").returncode == 0
    modes = {p.name: p.stat().st_mode & 0o777 for p in (outputs, outputs / "logs", outputs / "logs" / "R")}
    assert len(set(modes.values())) == 1, modes  # each as its parent
    assert (outputs / "logs" / "R" / "node1" / "env").read_bytes() == b"A=1\n"
