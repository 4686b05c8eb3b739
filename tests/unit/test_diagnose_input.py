"""`clusterctl diagnose` on bad input: one clear message and exit 2, never a traceback; a run that
succeeded is not a failure (the run record's exit codes decide, as in collect-logs)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clusterctl.cli import main
from clusterctl.diagnose import diagnose_path


def run(args, tmp_path, capsys):
    code = main([*args], env={**os.environ, "CLUSTERCTL_STATE": str(tmp_path / "state")})
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("name, content, message", [
    ("empty.log", b"", "the log is empty"),
    ("blank.log", b"\n\n   \n", "the log is empty"),
    ("model.bin", bytes(range(256)) * 64, "not a text log"),
    ("gbk.log", "训练失败：显存不足，请减小批大小。".encode("gb18030") * 50, "not UTF-8 text"),
], ids=["empty", "blank", "binary", "non-utf8"])
def test_bad_files_are_refused_in_one_line_with_exit_2(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    code, out, err = run(["diagnose", str(path)], tmp_path, capsys)
    assert code == 2
    assert message in err and "Traceback" not in err + out
    assert str(path) in err and "fix:" in err


def test_a_missing_path_and_a_directory_without_logs_are_refused_with_exit_2(tmp_path, capsys):
    code, out, err = run(["diagnose", str(tmp_path / "nope.log")], tmp_path, capsys)
    assert code == 2 and "no such file or directory" in err and "Traceback" not in err
    (tmp_path / "empty-dir" / "sub").mkdir(parents=True)
    (tmp_path / "empty-dir" / "sub" / "model.safetensors").write_bytes(b"\0" * 10)
    code, out, err = run(["diagnose", str(tmp_path / "empty-dir")], tmp_path, capsys)
    assert code == 2 and "no logs in this directory" in err and "Traceback" not in err


def test_bad_input_in_json_mode_is_one_json_error_document(tmp_path, capsys):
    (tmp_path / "e.log").write_bytes(b"")
    code, out, err = run(["diagnose", str(tmp_path / "e.log"), "--json"], tmp_path, capsys)
    assert code == 2 and json.loads(out)["ok"] is False


def test_a_log_with_a_few_stray_bytes_is_still_diagnosed(tmp_path, capsys):
    path = tmp_path / "rank.log"
    path.write_bytes(b"step 1 \xff\xfe loss 0.1\n[rank3]: RuntimeError: CUDA error: invalid device ordinal\n")
    code, out, err = run(["diagnose", str(path), "--json"], tmp_path, capsys)
    doc = json.loads(out)
    assert code == 0 and doc["findings"][0]["cause"] == "gpu_ordinal" and doc["findings"][0]["rank"] == 3
    assert 0 < doc["findings"][0]["confidence"] <= 1


def test_diagnose_json_lists_the_top_three_with_confidence_and_similar_known_cases(tmp_path, capsys):
    path = tmp_path / "ds.log"
    path.write_text("[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', "
                    "'main.py', '--local_rank=0'] exits with return code = -9\n")
    code, out, err = run(["diagnose", str(path), "--json"], tmp_path, capsys)
    doc = json.loads(out)
    # a SIGKILL with no record of an OOM kill is named as what it is; the OOM killer is a runner-up (issue 39)
    assert code == 0 and doc["findings"][0]["cause"] == "killed_by_signal" and len(doc["findings"]) <= 3
    assert "oom_killed" in [f["cause"] for f in doc["findings"]]
    assert doc["similar"] and set(doc["similar"][0]) == {"source", "cause", "fix", "score"}
    assert doc["similar"][0]["source"].startswith("https://github.com/")


def test_human_output_shows_the_confidence_column_and_the_similar_case(tmp_path, capsys):
    path = tmp_path / "d.log"
    path.write_text("docker: Error response from daemon: unknown or invalid runtime name: nvidia.\n")
    code, out, err = run(["diagnose", str(path)], tmp_path, capsys)
    assert code == 0 and "docker_no_gpu_runtime" in err and "conf" in err
    assert "similar: https://github.com/" in err


def _collected(root: Path, exit_code: str) -> Path:
    host = root / "node-a"
    (host / "logs").mkdir(parents=True)
    (host / "logs" / "node-a-r0.log").write_text("[rank0]: UserWarning: something odd\nstep 50/50 done\n")
    exit_file = host / "outputs" / "logs" / "run1" / "node-a" / "agent.exit"
    exit_file.parent.mkdir(parents=True)
    exit_file.write_text(exit_code + "\n")
    return root


def test_a_collected_run_that_succeeded_has_no_failure_from_its_agent_exit_files(tmp_path, capsys):
    root = _collected(tmp_path / "run1", "0")
    assert diagnose_path(root) == []
    code, out, err = run(["diagnose", str(root)], tmp_path, capsys)
    assert code == 0 and "no failure found" in err


def test_the_run_record_decides_before_the_logs(tmp_path, capsys):
    root = _collected(tmp_path / "run1", "1")
    assert diagnose_path(root, record={"exit_code": 0, "nodes": {"node-a": {"exit_code": 0, "lost": False}}}) == []
    assert diagnose_path(root, record={"exit_code": 1, "nodes": {}})[0].cause == "unknown"
    state = tmp_path / "state" / "runs" / "run1"
    state.mkdir(parents=True)
    (state / "run.json").write_text(json.dumps({"exit_code": 0, "nodes": {}}))
    code, out, err = run(["diagnose", str(root), "--json"], tmp_path, capsys)
    assert code == 0 and json.loads(out)["findings"] == []
