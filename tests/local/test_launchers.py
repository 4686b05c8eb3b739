"""`job.launcher`: torchrun (the default) or none (job.command once per node, plan/launcher.py)."""
from __future__ import annotations

import subprocess
from clusterctl.plan import launcher as launchers


def test_the_wrapper_keeps_the_exit_code_and_copies_a_failures_stderr_with_the_ranks_prefix(tmp_path):
    rank_dir = tmp_path / "r1_none" / "attempt_0" / "0"
    job = ["sh", "-c", 'echo out; echo "Traceback: boom" >&2; exit 3']
    done = subprocess.run(["sh", "-c", launchers._ONCE, "x", str(rank_dir), "[n1 rank0]: ", *job],
                          capture_output=True, text=True)
    assert done.returncode == 3
    assert (rank_dir / "stdout.log").read_text() == "out\n"
    assert (rank_dir / "stderr.log").read_text() == "Traceback: boom\n"
    assert done.stderr.splitlines() == ["[n1 rank0]: Traceback: boom", "[n1 rank0]: clusterctl: the job exited with code 3"]
    ok = subprocess.run(["sh", "-c", launchers._ONCE, "x", str(tmp_path / "ok"), "[n1 rank0]: ", "true"],
                        capture_output=True, text=True)
    assert (ok.returncode, ok.stderr) == (0, "")
