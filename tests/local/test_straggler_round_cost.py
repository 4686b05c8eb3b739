"""What a straggler round costs a node (issue 52), run for real with `sh` on this machine: a rank whose main
thread has not run since its last dump (schedstat unchanged) is not dumped again (the node says `same` and
the controller reads the earlier dump), a rank that ran is dumped every sample, the straggler rounds read
no socket table while the roll call of a hang still does, and a kept py-spy is hashed once, not every round."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from clusterctl.models import Host, Inventory
from clusterctl.modules import process
from clusterctl.watch import sampler

BINARY, ARCH, SHA = sampler.payload()
pytestmark = pytest.mark.skipif(not BINARY, reason="no Linux py-spy to ship on this controller")
ASLEEP = "import time\ndef waiting_here():\n    time.sleep(120)\nwaiting_here()"
BUSY = "import time\ndef busy_here():\n    while True:\n        sum(range(1000))\nbusy_here()"


def _round(tmp: Path, run: str, samples: int, nonblocking: bool = True, ship: bool = True, known=(),
           host: str = "n1") -> str:
    inventory = Inventory("cost-test", (Host("n1", "127.0.0.1"), Host("n2", "127.0.0.1")))
    command = sampler.sample_command(inventory, host, run, samples, 0.2, nonblocking=nonblocking,
                                     keep=process.kept_pyspy_name("cost-test", run), ship=ship, known=known)
    done = subprocess.run(command.argv, input=command.stdin or b"", capture_output=True, timeout=60,
                          env={**os.environ, "TMPDIR": str(tmp)})
    return done.stdout.decode(errors="replace")


@pytest.fixture
def ranks():
    """Rank 0 asleep all along, rank 1 busy all along, both marked as a run's ranks."""
    run = f"r-{uuid.uuid4().hex[:8]}"
    procs = [subprocess.Popen([sys.executable, "-c", code],
                              env={**os.environ, **dict(process.marker_env("cost-test", "n1", run)), "RANK": str(r),
                                   "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2"}) for r, code in enumerate((ASLEEP, BUSY))]
    time.sleep(0.7)
    yield run
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_rank_that_has_not_run_is_not_dumped_again_and_reads_as_its_earlier_dump(tmp_path, ranks):
    stdout = _round(tmp_path, ranks, 4)
    heads = [line.split()[2:] for line in stdout.splitlines() if line.startswith(sampler.MARK + "rank ")]
    asleep = [h for h in heads if h[2] == "0"]
    busy = [h for h in heads if h[2] == "1"]
    assert len(asleep) == len(busy) == 4
    assert asleep[0][-1] != "same" and all(h[-1] == "same" for h in asleep[1:]), asleep  # dumped once
    assert all(h[-1] != "same" for h in busy), busy  # it runs between samples: dumped each time
    node = sampler.parse_node_output(stdout, "n1")
    assert len(node.samples) == 4
    for sample in node.samples:
        sleeper, worker = sample
        assert [f.function for f in sleeper.frames][-2:] == ["waiting_here", "<module>"] and sleeper.state == "S"
        assert "busy_here" in [f.function for f in worker.frames]
    assert sampler.MARK + "sockets" not in stdout  # the straggler verdict reads no socket


def test_the_roll_call_still_dumps_every_rank_every_sample_and_reads_its_sockets(tmp_path, ranks):
    stdout = _round(tmp_path, ranks, 2, nonblocking=False)
    assert " same" not in stdout and stdout.count(sampler.MARK + "sockets") == 4


def test_a_kept_py_spy_is_hashed_once_then_known_by_its_inode_and_times(tmp_path, ranks):
    _round(tmp_path, ranks, 1)  # ships it: the node keeps it
    kept = tmp_path / process.kept_pyspy_name("cost-test", ranks) / f"py-spy.{SHA}"
    assert kept.exists() and not Path(f"{kept}.seen").exists()
    assert "tool kept" in _round(tmp_path, ranks, 1, ship=False)  # hashed, and what it looks like recorded
    assert Path(f"{kept}.seen").exists()
    assert "tool kept" in _round(tmp_path, ranks, 1, ship=False)
    os.chmod(kept, 0o700)  # any change of the file moves its ctime: hashed again (still the right digest)
    assert "tool kept" in _round(tmp_path, ranks, 1, ship=False)
    kept.write_bytes(b"#!/bin/sh\necho py-spy 0.4\n")
    again = sampler.parse_node_output(_round(tmp_path, ranks, 1, ship=False), "n1")
    assert again.asks and "changed on the node" in again.problem and not kept.exists()


def _heads(stdout: str) -> list[list[str]]:
    return [line.split()[2:] for line in stdout.splitlines() if line.startswith(sampler.MARK + "rank ")]


def test_later_rounds_reuse_the_ranks_found_and_the_dumps_the_controller_holds(tmp_path, ranks):
    first = _round(tmp_path, ranks, 2)
    kept = tmp_path / process.kept_pyspy_name("cost-test", ranks)
    listed = (kept / "ranks.n1").read_text().split("\n")
    assert len([line for line in listed if line]) == 2  # both ranks of LOCAL_WORLD_SIZE 2 found: kept
    node = sampler.parse_node_output(first, "n1")
    asleep = node.samples[0][0].pid
    assert set(node.dumps) == {asleep, node.samples[0][1].pid}
    second = _round(tmp_path, ranks, 2, ship=False, known=[asleep])
    heads = _heads(second)
    assert [h[-1] for h in heads if h[1] == str(asleep)] == ["same", "same"]  # not dumped this round at all
    assert all(h[-1] != "same" for h in heads if h[1] != str(asleep))
    again = sampler.parse_node_output(second, "n1", {asleep: node.dumps[asleep]})
    assert all("waiting_here" in [f.function for f in s[0].frames] for s in again.samples)
    unknown = _round(tmp_path, ranks, 1, ship=False)  # the controller holds no dump: the node dumps it again
    assert all(h[-1] != "same" for h in _heads(unknown))
    (kept / "ranks.n1").write_text(f"{asleep} 0 0 1\n")  # a rank that started again (another start time): looked for anew
    assert len(sampler.parse_node_output(_round(tmp_path, ranks, 1, ship=False), "n1").samples[0]) == 2


def test_hosts_that_share_a_machine_keep_their_own_ranks(tmp_path, ranks):
    """Two `connection: local` hosts (or rehearsal nodes) share the machine's /tmp, so the kept directory: the
    ranks host n1 found are never taken for host n2's (a GPU check sampled g0's rank as g1's and named nobody)."""
    _round(tmp_path, ranks, 1)
    kept = tmp_path / process.kept_pyspy_name("cost-test", ranks)
    assert (kept / "ranks.n1").exists()
    other = sampler.parse_node_output(_round(tmp_path, ranks, 1, ship=False, host="n2"), "n2")
    assert not other.samples and "no rank of run" in (other.problem or ""), other
