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
import textwrap
from pathlib import Path

import pytest

from clusterctl.cli import main

from unit.test_terminal_safety import raw_controls
from clusterctl_helpers import free_port


# --------------------------------------------------------------------------- a real command


NOISY = r"""printf '\033]0;pwned\007\033[2J\033]52;c;aGVsbG8=\007\302\2333m[bold red]red?[/bold red] raw \233 end\r\n'
printf 'err \033[5mblink\n' >&2
exit 3"""


def _local_inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text("name: noisy\nhosts:\n  - {name: a, connection: local, gpus: none}\n"
                    "  - {name: b, connection: local, gpus: none}\n"
                    f"job:\n  command: [x.py]\n  outputs: {tmp_path}/out\n")
    return path


def test_exec_on_local_hosts_prints_what_they_print_visibly_escaped(tmp_path, capsys):
    env = {**os.environ, "CLUSTERCTL_STATE": str(tmp_path / "state")}
    code = main(["exec", "-i", str(_local_inventory(tmp_path)), "--", "sh", "-c", NOISY], env=env)
    captured = capsys.readouterr()
    assert code == 1
    assert not raw_controls(captured.err)
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x1b]52;c;aGVsbG8=\\x07\\x9b3m[bold red]red?[/bold red]" in captured.err
    assert "err \\x1b[5mblink" in captured.err  # the stderr tail in the failed hosts' detail too
    assert captured.err.count("[a] \\x1b]0;pwned") == 1 and captured.err.count("[b] \\x1b]0;pwned") == 1


def test_exec_json_keeps_the_bytes_the_node_sent_in_valid_json(tmp_path, capsys):
    env = {**os.environ, "CLUSTERCTL_STATE": str(tmp_path / "state")}
    code = main(["exec", "-i", str(_local_inventory(tmp_path)), "--json", "--", "sh", "-c", NOISY], env=env)
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert code == 1 and captured.out.isascii() and not raw_controls(captured.err)
    stdout = document["hosts"]["a"]["stdout"]
    assert stdout.startswith("\x1b]0;pwned\x07\x1b[2J\x1b]52;c;aGVsbG8=\x07\x9b3m[bold red]")
    assert "raw \ufffd end\r\n" in stdout  # the transport reads a non-UTF-8 byte as U+FFFD


@pytest.mark.slow
def test_a_rank_printing_escape_sequences_leaves_no_raw_control_in_what_run_prints(tmp_path):
    """`clusterctl run` on this machine (torchrun, two CPU ranks): the live log, the status view
    and the failure summary show the rank's escapes as text; its log file keeps them raw."""
    import subprocess

    script = tmp_path / "noisy.py"
    script.write_text(textwrap.dedent("""\
        import os, sys
        rank = int(os.environ["RANK"])
        print("\\x1b]0;pwned\\x07\\x1b[2J\\x1b]52;c;aGVsbG8=\\x07\\x9b31m[bold red]rank says[/bold red]", flush=True)
        sys.exit(3 if rank == 1 else 0)
        """))
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"name: noisy\nhosts:\n  - {{name: local, connection: local}}\n"
                         f"rendezvous: {{port: {_free_port()}}}\n"
                         f"job:\n  command: [{script}]\n  nproc_per_node: 2\n  outputs: {tmp_path}/out\n"
                         f"  python: {sys.executable}\n")
    (tmp_path / "prompt.txt").write_text("p\n")
    env = {**os.environ, "CLUSTERCTL_STATE": str(tmp_path / "state"), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-m", "clusterctl", "run", "-i", str(inventory), str(tmp_path / "prompt.txt")],
                          env=env, cwd=tmp_path, capture_output=True, timeout=300)
    err = done.stderr.decode("utf-8")
    assert done.returncode == 1, err[-3000:]
    assert not raw_controls(err), sorted(raw_controls(err))
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in err and "[bold red]rank says[/bold red]" in err
    logs = list((tmp_path / "out").rglob("agent.log"))
    assert logs and b"\x1b]0;pwned\x07" in logs[0].read_bytes()  # the file keeps what the rank printed


def _free_port() -> int:
    return free_port()  # tests/clusterctl_helpers.py: below the ephemeral range
