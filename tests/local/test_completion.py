"""`clusterctl completion bash|zsh` (shtab over the CLI's own parser): the scripts know every command
and its options, and bash completes them as a person types."""
from __future__ import annotations

import subprocess
import sys

import pytest

from clusterctl.cli import COMMANDS


def _script(shell: str) -> str:
    return subprocess.run([sys.executable, "-m", "clusterctl", "completion", shell], capture_output=True, text=True,
                          check=True).stdout


def _bash_completes(script: str, *words: str) -> list[str]:
    probe = (f'source /dev/stdin; COMP_WORDS=({" ".join(words)}); COMP_CWORD={len(words) - 1}; '
             'COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; _shtab_clusterctl; echo "${COMPREPLY[@]}"')
    return subprocess.run(["bash", "-c", probe], input=script, capture_output=True, text=True, check=True).stdout.split()


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_the_completion_script_names_every_command(shell):
    script = _script(shell)
    assert all(name in script for name in COMMANDS)


def test_bash_completion_offers_the_commands_and_their_options():
    script = _script("bash")
    assert "collect-logs" in _bash_completes(script, "clusterctl", "col")
    assert _bash_completes(script, "clusterctl", "collect-logs", "--de") == ["--dest"]


def test_bash_completion_offers_an_options_choices():
    assert _bash_completes(_script("bash"), "clusterctl", "completion", "") == ["bash", "zsh"]
