"""The keeper's straggler samples on this machine (node/node_stragglers.py): the py-spy run/supervision.py
ships (gzipped, checked by its sha256) unpacked into the run dir, two marked "ranks" found by their marker
and RANK and read with `py-spy dump --json --nonblocking` once a second: the one whose main thread sits in a
file under torch/distributed/ waits, the busy one does not; a process of another run is not sampled; the
keeper's end leaves no py-spy behind."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from clusterctl.node import node_stragglers
from clusterctl.watch.sampler import payload

MARKER = {"CLUSTERCTL_CLUSTER": "c", "CLUSTERCTL_HOST": "h", "CLUSTERCTL_RUN_ID": "r-detached-stragglers"}
LOOP = "def spin():\n    while True:\n        sum(range(1000))\n"


def test_the_keeper_samples_its_ranks_and_says_which_wait(tmp_path):
    waiting = tmp_path / "lib" / "torch" / "distributed"
    waiting.mkdir(parents=True)
    (waiting / "fake_c10d.py").write_text(LOOP)
    (tmp_path / "train.py").write_text(LOOP)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    data, arch, sha = payload()
    (run_dir / node_stragglers.PACKED).write_bytes(data)
    code = "import sys; sys.path[:0] = sys.argv[1:]; import {0}; {0}.spin()"
    children = [subprocess.Popen([sys.executable, "-c", code.format(module), path],
                                 env={**os.environ, **MARKER, "RANK": str(rank), **extra})
                for rank, module, path, extra in ((0, "fake_c10d", str(waiting), {}), (1, "train", str(tmp_path), {}),
                                                  (2, "train", str(tmp_path), {"CLUSTERCTL_RUN_ID": "another"}))]
    try:
        sampler = node_stragglers.Sampler(str(run_dir), {"arch": arch, "sha": sha},
                                          marker=[f"{k}={v}" for k, v in MARKER.items()])
        deadline = time.monotonic() + 30
        while len(sampler.summary()["samples"]) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        summary = sampler.summary()
        assert sampler.spy == str(run_dir / "py-spy") and "problem" not in summary, summary
        assert len(summary["samples"]) >= 3 and all(s[1] == [[0, 1], [1, 0]] for s in summary["samples"]), summary
        ticks = [s[0] for s in summary["samples"]]
        assert ticks == sorted(set(ticks)), ticks  # one sample a whole second
        sampler.close()
        assert not (run_dir / "py-spy").exists() and not (run_dir / node_stragglers.PACKED).exists()
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_a_rank_that_has_not_run_since_its_last_dump_is_not_dumped_again(tmp_path, monkeypatch):
    """Its main thread's schedstat unchanged since its last good dump: its stack cannot have moved, so the
    keeper judges that dump with the state read now and starts no py-spy (issue 52: a dump is ~15 ms of
    the node's CPU); a busy rank is dumped every sample."""
    from clusterctl.watch.sampler import pyspy_binary

    waiting = tmp_path / "lib" / "torch" / "distributed"
    waiting.mkdir(parents=True)
    (waiting / "fake_store.py").write_text("import time\ndef wait():\n    time.sleep(120)\n")
    (tmp_path / "train.py").write_text(LOOP)
    code = "import sys; sys.path[:0] = sys.argv[1:]; import {0}; {0}.{1}()"
    children = [subprocess.Popen([sys.executable, "-c", code.format(module, call), path])
                for module, call, path in (("fake_store", "wait", str(waiting)), ("train", "spin", str(tmp_path)))]
    started = []
    real = subprocess.Popen
    monkeypatch.setattr(node_stragglers.subprocess, "Popen", lambda argv, **kw: started.append(argv[-1]) or real(argv, **kw))
    sampler = node_stragglers.Sampler.__new__(node_stragglers.Sampler)  # its sampling alone, no thread of its own
    sampler.spy, sampler.error, sampler.lock, sampler.children = pyspy_binary(), "", threading.Lock(), []
    sampler.closed, sampler.dumped = threading.Event(), {}
    try:
        time.sleep(0.7)
        ranks = {children[0].pid: 0, children[1].pid: 1}
        samples = [sampler.sample(ranks) for _ in range(4)]
        assert samples == [[[0, 1], [1, 0]]] * 4, samples
        assert started.count(str(children[0].pid)) == 1 and started.count(str(children[1].pid)) == 4, started
    finally:
        for child in children:
            child.kill()
            child.wait()
