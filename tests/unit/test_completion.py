"""`clusterctl completion bash|zsh` (shtab over the CLI's own parser): the scripts know every command
and its options, and bash completes them as a person types."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


def _script(shell: str) -> str:
    return subprocess.run([sys.executable, "-m", "clusterctl", "completion", shell], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.skipif(shutil.which("zsh") is None, reason="no zsh here")
def test_zsh_reads_the_script():
    subprocess.run(["zsh", "-n", "/dev/stdin"], input=_script("zsh"), text=True, check=True)
