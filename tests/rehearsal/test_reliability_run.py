"""Reliability of `run` and `collect-logs` on the rehearsal cluster, with a job that needs no torch
(tests/fixtures/jobs/tiny.py) and secrets in every place an inventory can hold them: SIGTERM
mid-run, SIGINT/SIGTERM mid-collect, a full local disk during collect, symlinks and odd names in
the outputs, prompts at the argument limit, and secrets kept out of every output and file.
Each case records its row of docs/reliability.md."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, FIXTURE_JOBS, Cli, processes_with, variant, wait_until
from reliability import Watched, slow_uplink

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

NODES = ("node1", "node2", "node3")
# collect-logs' archiver on a node (node/node_archive.py, whose source is its `python3 -c` argument)
TAR_ON_A_NODE = "collect-logs on the node: find what changed and archive it"
JOBS_DIR = "cc-rel-jobs"
SECRETS = {  # name -> value, in every place an inventory can hold one
    "HF_TOKEN": "hf_reltoken_9f8e7d6c",  # job.env, a secret-looking name
    "PLAIN_NAME": "opaque-rel-value-4c3b2a",  # job.env, `secret: true` under a plain name
    "MY_API_KEY": "key-rel-container-2a1b0c",  # container.env
    "BORING": "opaque-rel-boring-5f5e5d",  # container.env, `secret: true`
    "DB_PASSWORD": "pw-rel-node2-7e6d5c",  # node2's own env
}
# 100 KB of text that quoting leaves nearly as is: fits the 128 KiB command line with room to spare
NEAR_LIMIT_PROMPT = ("A cat walks on the grass, " * 4000)[:100_000]
# 78 KB of quotes: over 128 KiB once each ' is quoted for the remote shell
QUOTY_PROMPT = "it's '" * 13_000


def _tiny_job(sb, path: Path, *extra: str) -> Path:
    def change(doc):
        doc["container"]["env"] = {"MY_API_KEY": SECRETS["MY_API_KEY"],
                                   "BORING": {"value": SECRETS["BORING"], "secret": True}}
        next(h for h in doc["hosts"] if h["name"] == "node2")["env"] = {"DB_PASSWORD": SECRETS["DB_PASSWORD"]}
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/tiny.py"], nproc_per_node=1,
                          args=["--out", "{outputs}/{run_id}", "--prompt", "{prompt}", "--print_env", *SECRETS,
                                *extra],
                          env={"HF_TOKEN": SECRETS["HF_TOKEN"],
                               "PLAIN_NAME": {"value": SECRETS["PLAIN_NAME"], "secret": True}})

    return variant(sb, path, change)


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    jobs = sandbox.shared_outputs / JOBS_DIR
    jobs.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURE_JOBS / "tiny.py", jobs / "tiny.py")
    where = tmp_path_factory.mktemp("rel-run")
    cli = Cli(where / "state")
    inventory = _tiny_job(sandbox, where / "tiny.yaml")
    code, doc = cli.json("up", str(inventory))
    assert code == 0, doc
    yield cli, inventory, where
    cli.json("down", "-i", str(inventory))  # the next module starts from no container
    shutil.rmtree(jobs, ignore_errors=True)


@pytest.fixture(scope="module")
def finished_run(sandbox, cluster):
    """A run of the tiny job with a 100 KB prompt: (run document, prompt sha256)."""
    cli, inventory, where = cluster
    prompt = where / "near-limit.txt"
    prompt.write_text(NEAR_LIMIT_PROMPT + "\n")
    code, doc = cli.json("run", "-i", str(inventory), str(prompt))
    assert code == 0 and doc["ok"], doc
    return doc, hashlib.sha256(NEAR_LIMIT_PROMPT.encode()).hexdigest()


def _run_dirs(sb) -> set:
    logs = sb.shared_outputs / "logs"
    return set(os.listdir(logs)) if logs.is_dir() else set()


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _collect(cli, inventory, run_id: str, dest: Path) -> tuple[int, dict, float]:
    started = time.monotonic()
    code, doc = cli.json("collect-logs", "-i", str(inventory), "--run", run_id, "--dest", str(dest))
    return code, doc, time.monotonic() - started


# --------------------------------------------------------------------------- prompts at the limit


def test_a_100_kb_prompt_reaches_every_rank_byte_for_byte(sandbox, finished_run, reliability):
    row = reliability("a 100 KB prompt (under the 128 KiB command-line limit once quoted)",
                      "accepted; every rank receives it byte for byte", section="Hostile input")
    doc, sha = finished_run
    results = {p.name: p.read_text() for p in (sandbox.shared_outputs / doc["run_id"]).glob("rank*.txt")}
    assert sorted(results) == ["rank0.txt", "rank1.txt", "rank2.txt"]
    assert {text.split("; ", 1)[1] for text in results.values()} == {f"prompt 100000 bytes sha256 {sha}\n"}
    row.observe(f"exit 0 in {doc['duration_s']:.1f} s; ranks 0-2 each got 100000 bytes, sha256 {sha[:12]}... "
                "identical to the file's", seconds=None)


def test_a_prompt_too_long_once_quoted_is_refused_before_launching(sandbox, cluster, reliability):
    row = reliability("a 78 KB prompt full of quotes (over 128 KiB once quoted for the remote shell)",
                      "refused before launching (exit 2), naming the limit and the fix; nothing launched", section="Hostile input")
    cli, inventory, where = cluster
    prompt = where / "quoty.txt"
    prompt.write_text(QUOTY_PROMPT + "\n")
    before = _run_dirs(sandbox)
    started = time.monotonic()
    code, doc = cli.json("run", "-i", str(inventory), str(prompt))
    seconds = time.monotonic() - started
    assert code == 2 and "once quoted for the remote shell" in doc["error"] and "128 KiB" in doc["error"], doc
    assert "file" in doc["fix"]
    assert _run_dirs(sandbox) == before
    row.observe(f"exit 2 in {seconds:.1f} s: {doc['error'][:170]}...; nothing launched", seconds=seconds)


# --------------------------------------------------------------------------- interrupts


def test_sigterm_mid_run_stops_every_rank_and_the_next_run_works(sandbox, cluster, tmp_path, reliability):
    row = reliability("SIGTERM to `run` mid-run", "exit 130 within 10 s, every rank stopped (marker scan: no "
                      "process of the run) within 10 s; the next `run` works without --force", section="Interrupts")
    cli, _, where = cluster
    inventory = _tiny_job(sandbox, tmp_path / "sleepy.yaml", "--sleep", "300")
    prompt = where / "cat.txt"
    prompt.write_text("a cat\n")
    before = _run_dirs(sandbox)
    watched = Watched(cli.popen("run", "-i", str(inventory), str(prompt), json_output=False))
    try:
        for rank in range(3):
            watched.wait_for(f"[tiny rank {rank}] started", 90)
        [run_id] = _run_dirs(sandbox) - before
        code, took = watched.signal_and_wait(signal.SIGTERM)
    finally:
        watched.kill()
    assert code == 130 and "stopping every node's ranks" in watched.stderr, watched.stderr[-2000:]
    assert took < 10  # it stops every node's ranks before exiting
    stopped = time.monotonic()
    wait_until(lambda: not [p for p in processes_with(run_id) if "pytest" not in p[1]], 10, interval=0.2,
               what="no process of the run")
    gone = time.monotonic() - stopped
    code, doc = cli.json("run", "-i", str(cluster[1]), str(prompt))
    assert code == 0, doc
    row.observe(f"exit 130 {took:.1f} s after SIGTERM ('interrupted: stopping every node's ranks'); no process of "
                f"the run {gone:.1f} s later; next `run`: exit 0", seconds=took)


def test_sigint_or_sigterm_mid_collect_leaves_no_partial_file_and_the_next_collect_is_complete(
        sandbox, cluster, finished_run, tmp_path, reliability):
    cli, inventory, _ = cluster
    doc, _ = finished_run
    run_id = doc["run_id"]
    large = sandbox.shared_outputs / run_id / "large-output.bin"
    large.write_bytes(os.urandom(16 << 20))
    dest = tmp_path / "collected"
    try:
        for name, signum in (("SIGINT", signal.SIGINT), ("SIGTERM", signal.SIGTERM)):
            row = reliability(f"{name} to `collect-logs` mid-transfer",
                              "exit 130 within 5 s; no tar left on the node; no partial file in dest; the next "
                              "collect fetches everything intact", section="Interrupts")
            with slow_uplink(sandbox, "node1"):
                watched = Watched(cli.popen("collect-logs", "-i", str(inventory), "--run", run_id, "--dest", str(dest),
                                            json_output=False))
                try:
                    watched.wait_until(lambda: processes_with(TAR_ON_A_NODE), 60, what="a tar on node1")
                    time.sleep(1.0)  # bytes are flowing
                    code, took = watched.signal_and_wait(signum)
                finally:
                    watched.kill()
            assert code == 130, watched.stderr[-2000:]
            assert took < 5
            wait_until(lambda: not processes_with(TAR_ON_A_NODE), 10, what="no tar left on the nodes")
            partial = [p for p in dest.rglob("*") if p.is_file() and (".part" in p.name or p.name.endswith(".tmp"))]
            assert not partial, partial
            copy = dest / "outputs" / run_id / "large-output.bin"
            assert not copy.exists() or _sha(copy) == _sha(large)
            row.observe(f"exit 130 {took:.1f} s after {name}; no tar process left; no partial file in dest",
                        seconds=took)
        code, result, seconds = _collect(cli, inventory, run_id, dest)
        assert code == 0, result
        assert _sha(dest / "outputs" / run_id / "large-output.bin") == _sha(large)
        row["observed"] += f"; next collect: exit 0 in {seconds:.1f} s, the 16 MiB output intact (sha256 equal)"
    finally:
        large.unlink(missing_ok=True)


# --------------------------------------------------------------------------- faults and hostile outputs


def test_a_full_local_disk_during_collect_is_a_clear_error_and_earlier_files_stay_intact(
        sandbox, cluster, finished_run, tmp_path, reliability):
    row = reliability("the local disk full during `collect-logs` (a 1 MiB tmpfs as --dest)",
                      "exit non-zero; the error says free space / --dest; the files of an earlier collect intact; "
                      "no partial file", section="Faults")
    cli, inventory, _ = cluster
    doc, _ = finished_run
    run_id = doc["run_id"]
    dest = tmp_path / "small-disk"
    dest.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(dest)], check=True, timeout=10)
    big = sandbox.shared_outputs / run_id / "bigger-than-the-disk.bin"
    try:
        code, first, _ = _collect(cli, inventory, run_id, dest)
        assert code == 0, first
        # logs and outputs must stay byte for byte; diag/ (the node now) and the manifest are rewritten whole
        before = {p: _sha(p) for p in _files(dest) if "diag" not in p.parts and p.name != "manifest.json"}
        diag = {p for p in _files(dest) if "diag" in p.parts}
        big.write_bytes(os.urandom(2 << 20))
        code, doc, seconds = _collect(cli, inventory, run_id, dest)
        after = {p: _sha(p) for p in _files(dest) if p in before}
        leftovers = [p.name for p in _files(dest) if p not in before]
        manifest = json.loads((dest / "manifest.json").read_text())
        assert diag <= set(_files(dest)), "a diagnostics file of the first collect is gone"
    finally:
        big.unlink(missing_ok=True)
        subprocess.run(["umount", "-l", str(dest)], timeout=10)
    failed = {h: e for h, e in doc.get("hosts", {}).items() if e["status"] != "ok" and e["status"] != "changed"}
    message = doc.get("error") or " ".join(e["detail"] for e in failed.values())
    assert code != 0 and doc["ok"] is False, doc
    assert "No space left on device" in message and "--dest" in message and "free space" in message, doc
    assert after == before, "a file of the first collect changed"
    assert not [n for n in leftovers if ".part" in n or n.endswith(".tmp")], leftovers
    assert f"{run_id}/bigger-than-the-disk.bin" not in json.dumps(manifest)
    message = message.replace(str(dest), "DEST")
    row.observe(f"exit {code} in {seconds:.1f} s: {message[:220]}; the {len(before)} logs and outputs of the first "
                "collect unchanged (sha256), diag/ and manifest.json whole, no partial file", seconds=seconds)


def test_symlinks_and_dotted_names_in_the_outputs_are_refused_or_kept_inside_dest(sandbox, cluster, finished_run,
                                                                                   tmp_path, reliability):
    row = reliability("outputs holding a symlink to /etc, a symlink to /etc/passwd, a file named with '..' and one "
                      "named `x\\n0\\t0\\t..` (planted on the nodes, then `collect-logs`)", "the links are not followed: "
                      "refused and reported; the odd names land inside dest (the newline one under a safe name, "
                      "reported); nothing is written outside dest", section="Hostile input")
    cli, inventory, _ = cluster
    doc, _ = finished_run
    run_id = doc["run_id"]
    planted = [sandbox.shared_outputs / f"{run_id}-evil", sandbox.shared_outputs / run_id / "passwd",
               sandbox.shared_outputs / run_id / "..hidden..txt", sandbox.shared_outputs / run_id / "x\n0\t0\t.."]
    planted[0].symlink_to("/etc")
    planted[1].symlink_to("/etc/passwd")
    planted[2].write_text("a name with dots\n")
    planted[3].write_text("a name with a newline\n")
    box = tmp_path / "box"
    dest = box / "collected"
    box.mkdir()
    try:
        code, result, seconds = _collect(cli, inventory, run_id, dest)
    finally:
        for path in planted:
            path.unlink(missing_ok=True)
    assert code == 0, result
    assert [p.name for p in box.iterdir()] == ["collected"]  # nothing beside dest
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    assert not [p for p in dest.rglob("*") if p.name in ("passwd", "shadow", "hostname")]
    assert (dest / "outputs" / run_id / "..hidden..txt").read_text() == "a name with dots\n"
    assert (dest / "outputs" / run_id / "x%0A0%090%09..").read_text() == "a name with a newline\n"
    reported = " ".join(e["detail"] for e in result["hosts"].values())
    assert f"{run_id}-evil -> /etc" in reported and "passwd -> /etc/passwd" in reported, result["hosts"]
    assert "renamed to a safe name" in reported, result["hosts"]
    row.observe(f"exit 0 in {seconds:.1f} s; reported: '{reported[:160]}'; ..hidden..txt inside dest; no link, "
                "nothing from /etc, nothing outside dest", seconds=seconds)


# --------------------------------------------------------------------------- secrets


def _cli_output(cli, *args: str) -> str:
    """stdout + stderr of `clusterctl ARGS` in a subprocess (human output; -v where it exists)."""
    proc = subprocess.run([sys.executable, "-m", "clusterctl", *args], env=cli.env, cwd=str(cli.state_dir.parent),
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    return f"$ clusterctl {' '.join(args)} (exit {proc.returncode})\n{proc.stdout}{proc.stderr}"


def test_secret_values_never_reach_the_terminal_the_state_dir_or_collected_files(sandbox, cluster, tmp_path,
                                                                                 reliability):
    row = reliability("secret values (names with TOKEN/KEY/PASSWORD/SECRET, and `secret: true`) in job, "
                      "container and host env, printed by the job itself", "never in the output of up/run/run "
                      "--plan/check/status/exec -v (human and --json), the state dir, or collected files", section="Secrets")
    cli, inventory, where = cluster
    prompt = where / "cat.txt"
    prompt.write_text("a cat\n")
    inv = str(inventory)
    outputs = [_cli_output(cli, *args) for args in (
        ("up", "-v", inv), ("run", "-v", "-i", inv, str(prompt)), ("run", "--plan", "-v", "-i", inv, str(prompt)),
        ("run", "--plan", "--json", "-i", inv, str(prompt)), ("check", "-v", "-i", inv),
        ("status", "-v", "-i", inv), ("status", "--json", "-i", inv), ("exec", "-v", "-i", inv, "--", "hostname"))]
    text = "\n".join(outputs)
    assert "[tiny rank 1] HF_TOKEN=***" in text and "[tiny rank 1] PLAIN_NAME=***" in text, text[-3000:]
    run_id = sorted(p.name for p in (cli.state_dir / "runs").iterdir() if (p / "run.json").exists())[-1]  # `run -v`
    dest = tmp_path / "collected"
    code, _, _ = _collect(cli, inventory, run_id, dest)
    assert code == 0
    leaks = [f"terminal: {name}" for name, value in SECRETS.items() if value in text]
    for path in _files(cli.state_dir) + _files(dest):
        data = path.read_bytes()
        leaks += [f"{path}: {name}" for name, value in SECRETS.items() if value.encode() in data]
    assert not leaks, leaks
    row.observe(f"{len(outputs)} command outputs ({len(text)} characters), {len(_files(cli.state_dir))} state files "
                f"and {len(_files(dest))} collected files hold none of the {len(SECRETS)} values; the job's own "
                "prints arrive as NAME=***", seconds=None)


def test_state_files_are_0600_and_state_directories_0700(cluster, finished_run, tmp_path, reliability):
    row = reliability("modes of the local state (.clusterctl): run.json, active.json, locks, step logs",
                      "files 0600, directories 0700 (created by clusterctl at every level)", section="Secrets")
    cli, inventory, _ = cluster
    playbook = tmp_path / "hello.yaml"
    playbook.write_text("- name: Say hello\n  shell: echo hello\n")
    code, doc = cli.json("play", "-i", str(inventory), str(playbook))  # a task of commands: a step log per host
    assert code == 0, doc
    modes = {str(p.relative_to(cli.state_dir.parent)): stat.S_IMODE(p.stat().st_mode)
             for p in [cli.state_dir, *cli.state_dir.rglob("*")]}
    kinds = {"run.json": 0, "active.json": 0, ".lock": 0, ".log": 0}
    for path, mode in modes.items():
        is_dir = (cli.state_dir.parent / path).is_dir()
        assert mode == (0o700 if is_dir else 0o600), (path, oct(mode))
        for suffix in kinds:
            kinds[suffix] += path.endswith(suffix)
    assert all(kinds.values()), kinds
    row.observe(f"{len(modes)} paths checked ({', '.join(f'{n} {k}' for k, n in kinds.items())}, and their "
                "directories): every file 0600, every directory 0700", seconds=None)
