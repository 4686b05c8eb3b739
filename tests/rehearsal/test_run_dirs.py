"""The run's directories on a job.outputs that nodes share as different users (root on one node,
a sudo user on another: the realistic rehearsal cluster without containers). The node-side scripts
run here for real, the second "node" as nobody through setpriv."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from clusterctl.plan import wrapper as agent
from clusterctl.run import runner

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to act as a second user")


def _sh(script: str, *args: str, data: bytes = b"", other_user: bool = False) -> subprocess.CompletedProcess:
    argv = ["sh", "-c", script, "clusterctl-test", *args]
    if other_user:
        argv = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", *argv]
    return subprocess.run(argv, input=data, capture_output=True, timeout=30)


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
    assert _sh(agent._WRITE_ENV, str(run / "node1"), data=b"A=1\n").returncode == 0
    assert _sh(runner._PUT_FILE, str(run / ".files"), "job.py", data=b"print(1)\n").returncode == 0
    second = _sh(agent._WRITE_ENV, str(run / "node2"), data=b"A=1\n", other_user=True)
    assert second.returncode == 0, second.stderr
    same = _sh(runner._PUT_FILE, str(run / ".files"), "job.py", data=b"print(1)\n", other_user=True)
    assert same.returncode == 0, same.stderr  # the same bytes, written first by root: fine
    different = _sh(runner._PUT_FILE, str(run / ".files"), "job.py", data=b"print(2)\n", other_user=True)
    assert different.returncode != 0  # never silently a different job file
    assert {p.name: oct(p.stat().st_mode & 0o7777) for p in (outputs / "logs", run, run / ".files")} == {
        "logs": "0o1777", "R": "0o1777", ".files": "0o1777"}
    assert oct((run / "node1").stat().st_mode & 0o777) == "0o700" == oct((run / "node2").stat().st_mode & 0o777)
    assert (run / ".files" / "job.py").read_bytes() == b"print(1)\n"


def test_a_private_outputs_keeps_the_run_directories_as_private_as_itself(tmp_path):
    outputs = tmp_path / "outputs"
    assert _sh(agent._WRITE_ENV, str(outputs / "logs" / "R" / "node1"), data=b"A=1\n").returncode == 0
    modes = {p.name: p.stat().st_mode & 0o777 for p in (outputs, outputs / "logs", outputs / "logs" / "R")}
    assert len(set(modes.values())) == 1, modes  # each as its parent
    assert (outputs / "logs" / "R" / "node1" / "env").read_bytes() == b"A=1\n"
