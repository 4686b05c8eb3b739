"""Terminal safety (issue 16, part 4): remote text shown on the terminal has every control
character and escape sequence shown as a visible escape, and no rich markup of its own.

A rank that prints `ESC ]0;title BEL` retitles the operator's terminal, `ESC [2J` clears it,
and an OSC 52 sequence writes its clipboard: each must print as text (`\\x1b]0;title\\x07`).
Files on disk and `--json` keep what the node sent (JSON escapes control characters itself).
The escape sequences below are the standard ones (ECMA-48; xterm's ctlseqs for OSC 0 and 52).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from unit.test_terminal_safety import raw_controls


NOISY_RANK = """\
import os, sys
print("\\x1b]0;pwned\\x07\\x1b[2J\\x1b]52;c;aGVsbG8=\\x07\\x9b31m[bold red]rank says[/bold red]", flush=True)
sys.exit(3 if os.environ.get("RANK") == "1" else 0)
"""


@pytest.mark.sandbox
@pytest.mark.slow
def test_on_the_rehearsal_cluster_a_rank_printing_escapes_leaves_no_raw_control_in_what_run_prints(sandbox, tmp_path):
    """Issue 16's "done when": over real SSH and Docker, the live log, the status view and the
    failure summary of `run` show the rank's escapes as text."""
    from clusterctl_helpers import Cli, variant

    script = Path(sandbox.shared_outputs) / "noisy_rank.py"  # job.outputs on every node
    script.write_text(NOISY_RANK)

    def noisy(doc: dict) -> None:
        doc["job"].update(command=[f"{doc['job']['outputs']}/noisy_rank.py"], args=[])
        doc["job"].pop("world_size_divides", None)

    inventory = variant(sandbox, tmp_path / "noisy.yaml", noisy)
    (tmp_path / "prompt.txt").write_text("p\n")
    cli = Cli(tmp_path / "state")
    code, doc = cli.json("up", str(inventory))
    assert code == 0, doc
    try:
        proc = cli.popen("run", "-i", str(inventory), str(tmp_path / "prompt.txt"), json_output=False)
        _, err = proc.communicate(timeout=300)
    finally:
        cli.json("down", "-i", str(inventory))
        script.unlink(missing_ok=True)
    assert proc.returncode == 1, err[-3000:]
    assert not raw_controls(err), sorted(raw_controls(err))
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in err and "[bold red]rank says[/bold red]" in err
