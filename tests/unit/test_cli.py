"""The CLI on `connection: local` inventories: exit codes, --json documents, clear errors."""
from __future__ import annotations

import json
import os
from pathlib import Path

from clusterctl.cli import main


def run_cli(args, tmp_path, capsys):
    code = main([*args], env={**os.environ, "CLUSTERCTL_STATE": str(tmp_path / "state")})
    out = capsys.readouterr().out
    return code, (json.loads(out) if "--json" in args else out)


def local_inventory(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(f"name: t\nhosts:\n  - {{name: here, connection: local}}\njob:\n  command: [x.py]\n"
                    f"  outputs: {tmp_path}/out\n{extra}")
    return path


def test_a_bad_inventory_is_exit_2_with_where_and_fix_and_no_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\nhosts:\n  - {name: a, adress: 1.2.3.4}\n")
    code, doc = run_cli(["exec", "-i", str(bad), "--json", "--", "true"], tmp_path, capsys)
    assert code == 2 and doc["ok"] is False
    assert "bad.yaml:3" in doc["where"] and doc["fix"]


def test_commands_without_an_active_cluster_say_how_to_get_one(tmp_path, capsys):
    code, doc = run_cli(["status", "--json"], tmp_path, capsys)
    assert code == 2 and "clusterctl up" in doc["fix"]


def test_limit_naming_an_unknown_host_is_refused(tmp_path, capsys):
    code, doc = run_cli(["exec", "-i", str(local_inventory(tmp_path)), "--limit", "nope", "--json", "--", "true"],
                        tmp_path, capsys)
    assert code == 2 and "nope" in doc["error"]


def test_a_prompt_with_a_nul_byte_is_refused_before_anything_runs(tmp_path, capsys):
    prompt = tmp_path / "p.txt"
    prompt.write_bytes(b"line one\nbad\0byte\n")
    code, doc = run_cli(["run", "-i", str(local_inventory(tmp_path)), "--json", str(prompt)], tmp_path, capsys)
    assert code == 2 and "NUL" in doc["error"] and doc["where"].endswith("p.txt:2")


def test_diagnose_names_the_seed_failure_from_a_log_file(tmp_path, capsys):
    log = tmp_path / "rank.log"
    log.write_text("[rank3]: RuntimeError: CUDA error: invalid device ordinal\n")
    code, doc = run_cli(["diagnose", str(log), "--json"], tmp_path, capsys)
    assert code == 0 and doc["findings"][0]["cause"] == "gpu_ordinal"
