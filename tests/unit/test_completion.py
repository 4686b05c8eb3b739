"""`clusterctl completion bash|zsh` (shtab over the CLI's own parser): the scripts know every command
and its options, and bash completes them as a person types."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from local.test_completion import _script


@pytest.mark.skipif(shutil.which("zsh") is None, reason="no zsh here")
def test_zsh_reads_the_script():
    subprocess.run(["zsh", "-n", "/dev/stdin"], input=_script("zsh"), text=True, check=True)
