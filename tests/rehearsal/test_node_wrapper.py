"""The node-side shell pieces a run is made of, run for real on this machine: the torchrun
wrapper with its marker-scoped stop, and the file put that nodes sharing one filesystem
run at the same moment."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from clusterctl.plan import wrapper as torchrun
from clusterctl.plan.shipping import put_file_command

from local.test_node_wrapper import _inventory


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_nodes_whose_shells_share_a_pid_put_the_same_file_at_once(tmp_path):
    """Containers on different nodes have PID namespaces of their own, so their shells share
    PIDs: a temporary name made of `$$` collided, and all but one node failed with
    "mv: cannot stat". Here each writer runs as PID 1 of its own PID namespace."""
    data = os.urandom(4 << 20)
    command = put_file_command(_inventory("t"), str(tmp_path / "files"), "bench.py", data)
    for _ in range(3):
        writers = [subprocess.Popen(["unshare", "--pid", "--fork", *command.argv], stdin=subprocess.PIPE,
                                    stderr=subprocess.PIPE) for _ in range(3)]
        for writer in writers:
            writer.stdin.write(data)
            writer.stdin.close()
        failures = [writer.stderr.read().decode() for writer in writers if writer.wait(30) != 0]
        assert failures == []
    assert os.listdir(tmp_path / "files") == ["bench.py"]
    assert (tmp_path / "files" / "bench.py").read_bytes() == data
    assert (tmp_path / "files" / "bench.py").stat().st_mode & 0o777 == 0o644
