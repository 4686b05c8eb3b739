"""The CLI on `connection: local` inventories: exit codes, --json documents, clear errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from unit.test_cli import local_inventory, run_cli

REPO = Path(__file__).resolve().parents[2]


def test_help_lists_every_command_of_the_contract():
    out = subprocess.run([sys.executable, "-m", "clusterctl", "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("up", "run", "collect-logs", "check", "status", "exec", "down", "diagnose", "play", "sandbox"):
        assert command in out


def test_exec_on_a_local_host_returns_stdout_and_exit_code_per_host(tmp_path, capsys):
    code, doc = run_cli(["exec", "-i", str(local_inventory(tmp_path)), "--json", "--", "echo", "a b"], tmp_path, capsys)
    assert code == 0 and doc["ok"]
    assert doc["hosts"]["here"] == {**doc["hosts"]["here"], "status": "changed", "stdout": "a b\n", "exit_code": 0}


def test_a_failing_command_makes_exec_exit_1(tmp_path, capsys):
    code, doc = run_cli(["exec", "-i", str(local_inventory(tmp_path)), "--json", "--", "false"], tmp_path, capsys)
    assert code == 1 and not doc["ok"] and doc["hosts"]["here"]["status"] == "failed"


def test_run_plan_prints_the_topology_and_commands_without_launching(tmp_path, capsys):
    inv = local_inventory(tmp_path, "  nproc_per_node: 2\n")
    prompt = tmp_path / "p.txt"
    prompt.write_text("hello\n")
    code, doc = run_cli(["run", "-i", str(inv), "--plan", "--json", str(prompt)], tmp_path, capsys)
    assert code == 0 and doc["world_size"] == 2 and doc["exit_code"] is None
    assert "--rdzv-backend=static" in doc["plan"]["here"]["argv"]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_run_on_this_machine_alone_completes_and_collect_logs_brings_the_gif_back(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # local.yaml's job runs examples/generate.py from the current directory
    inv = REPO / "inventory" / "local.yaml"
    code, doc = run_cli(["run", "-i", str(inv), "--json", str(REPO / "examples" / "prompt.txt")], tmp_path, capsys)
    assert code == 0 and doc["exit_code"] == 0
    code, collected = run_cli(["collect-logs", "-i", str(inv), "--dest", str(tmp_path / "logs"), "--json"], tmp_path, capsys)
    assert code == 0 and collected["files"] > 5
    assert list((tmp_path / "logs").rglob(f"{doc['run_id']}.gif"))
