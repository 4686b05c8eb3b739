"""py-spy travels to a node once per run (watch/pyspy_kept.py + watch/sampler.py): which round sends
what, and the node script's keeping, checking and refusing, run for real with `sh` on this machine."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from clusterctl.watch import sampler
from clusterctl.models import Host, Inventory
from clusterctl.modules import process

BINARY, ARCH, SHA = sampler.payload()
pytestmark = pytest.mark.skipif(not BINARY, reason="no Linux py-spy to ship on this controller")


# --------------------------------------------------------------------------- the node script, for real


def _node_round(tmp: Path, run: str, ship: bool, cluster: str = "kept-test") -> dict:
    inventory = Inventory(cluster, (Host("n1", "127.0.0.1"),))
    command = sampler.sample_command(inventory, "n1", run, 1, 0.0, nonblocking=True,
                                     keep=process.kept_pyspy_name(cluster, run), ship=ship)
    env = {**os.environ, "TMPDIR": str(tmp)}
    done = subprocess.run(command.argv, input=command.stdin or b"", capture_output=True, timeout=60, env=env)
    stdout = done.stdout.decode(errors="replace")
    return {"stdin": len(command.stdin or b""), "stdout": stdout, "node": sampler.parse_node_output(stdout, "n1")}


@pytest.fixture
def rank():
    """A process marked as rank 0 of a run (as cleanup and the sampler find ranks)."""
    run = f"r-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, **dict(process.marker_env("kept-test", "n1", run)), "RANK": "0", "LOCAL_RANK": "0"}
    proc = subprocess.Popen([sys.executable, "-c", "import time\ndef waiting_here():\n    time.sleep(120)\nwaiting_here()"],
                            env=env)
    time.sleep(0.5)
    yield run
    proc.kill()
    proc.wait()


def test_the_node_keeps_the_shipped_binary_mode_700_and_the_next_round_runs_it_from_the_digest_alone(tmp_path, rank):
    first = _node_round(tmp_path, rank, ship=True)
    assert first["node"].kept == SHA and first["node"].tool.startswith("shipped")
    kept = tmp_path / process.kept_pyspy_name("kept-test", rank) / f"py-spy.{SHA}"
    assert kept.stat().st_mode & 0o777 == 0o700 and kept.parent.stat().st_mode & 0o777 == 0o700
    assert kept.stat().st_uid == os.getuid()
    second = _node_round(tmp_path, rank, ship=False)
    assert second["stdin"] == 0 and second["node"].tool.startswith("kept") and not second["node"].asks
    frames = [f.function for r in second["node"].samples[0] for t in r.threads for f in t.frames]
    assert "waiting_here" in frames


def test_a_kept_binary_changed_on_the_node_is_refused_not_run_and_asked_for_again(tmp_path, rank):
    _node_round(tmp_path, rank, ship=True)
    kept = tmp_path / process.kept_pyspy_name("kept-test", rank) / f"py-spy.{SHA}"
    ran = tmp_path / "the-changed-file-ran"
    kept.write_text(f"#!/bin/sh\ntouch {ran}\necho py-spy 0.4\n")
    answer = _node_round(tmp_path, rank, ship=False)
    assert answer["node"].asks and "changed on the node" in answer["node"].problem and not answer["node"].samples
    assert not ran.exists() and not kept.exists()
    again = _node_round(tmp_path, rank, ship=True)  # the next round ships it again
    assert again["node"].kept == SHA and again["node"].samples


def test_a_round_that_finds_no_kept_binary_asks_for_it(tmp_path, rank):
    answer = _node_round(tmp_path, rank, ship=False)
    assert answer["node"].asks and "gone from the node" in answer["node"].problem and answer["node"].kept == ""


def test_the_run_s_end_and_a_kill_of_its_ranks_remove_the_kept_directory(tmp_path, rank):
    from clusterctl.watch.pyspy_kept import forget_command

    _node_round(tmp_path, rank, ship=True)
    directory = tmp_path / process.kept_pyspy_name("kept-test", rank)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    assert directory.is_dir()
    subprocess.run(forget_command(directory.name).argv, env=env, check=True, timeout=30)
    assert not directory.exists()
    _node_round(tmp_path, rank, ship=True)
    other = tmp_path / "clusterctl-pyspy.other-cluster.r1"
    other.mkdir()
    subprocess.run(process.scan_command("kept-test", "n1", 1, "kill").argv, env=env, check=True, timeout=30)  # `down`
    assert not directory.exists() and other.exists()  # another cluster's is left alone


def test_a_kept_directory_that_is_a_link_is_not_trusted_even_with_the_right_binary_in_it(tmp_path, rank):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    subprocess.run(["sh", "-c", f'gzip -dc > "{elsewhere}/py-spy.{SHA}" && chmod 700 "{elsewhere}/py-spy.{SHA}"'],
                   input=BINARY, check=True, timeout=30)
    (tmp_path / process.kept_pyspy_name("kept-test", rank)).symlink_to(elsewhere)
    answer = _node_round(tmp_path, rank, ship=False)
    assert answer["node"].asks and not answer["node"].samples and answer["node"].tool == ""


def test_hosts_sharing_a_machine_ship_at_once_and_every_one_keeps_the_one_binary(tmp_path, rank):
    """Hosts that share /tmp (several `connection: local` hosts, rehearsal nodes, a $HOME on NFS) ship in the same
    round: each must end up keeping the binary, none may break another's copy, and nothing of theirs is left but
    the kept file (a shared temporary name and a failed keep's `rm -rf` of the directory made every round of 16
    rehearsal nodes ship it again)."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        rounds = list(pool.map(lambda _: _node_round(tmp_path, rank, ship=True), range(12)))
    assert [r["node"].kept for r in rounds] == [SHA] * 12, [r["stdout"][-300:] for r in rounds if r["node"].kept != SHA]
    directory = tmp_path / process.kept_pyspy_name("kept-test", rank)
    assert sorted(p.name for p in directory.iterdir() if p.name.startswith("py-spy")) in (
        [f"py-spy.{SHA}"], [f"py-spy.{SHA}", f"py-spy.{SHA}.seen"])
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        later = list(pool.map(lambda _: _node_round(tmp_path, rank, ship=False), range(12)))
    assert all(r["node"].tool.startswith("kept") and not r["node"].asks and r["node"].samples for r in later)
