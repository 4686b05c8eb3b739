"""Flight recorder: on by default in the ranks' environment (unless the user says otherwise), dumps read
safely (real dumps written by torch's own writer: tests/fixtures/flight_recorder/SOURCES.md), the rank
that did not join named, by torch's analyser where importable and by clusterctl's reader alike; and
a hang's stacks and dumps shown by `diagnose` on a collected run directory."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from clusterctl.diagnose import flight_recorder as fr

from unit.test_flight_recorder import FIXTURES, dumps_in, node


def test_the_rank_that_did_not_join_is_named_by_clusterctls_reader_and_by_torchs_analyser(tmp_path):
    root = dumps_in(tmp_path, {"node1": [0, 1], "node2": [2]})
    dumps = fr.find_dumps(root)
    assert sorted((d.rank, d.host) for d in dumps) == [(0, "node1"), (1, "node1"), (2, "node2")]
    [stuck] = fr.stuck_collectives(dumps)
    assert (stuck.group, stuck.seq, stuck.op, stuck.joined, stuck.missing, stuck.no_dump) == (
        "0", 3, "gloo:all_reduce", (0, 2), (1,), ())
    assert stuck.last_of[1].op == "gloo:broadcast"
    pytest.importorskip("torch")
    assert fr.torch_missing_ranks(dumps) == {("0", 3): {1}}
    [finding] = fr.flight_recorder_findings(root)
    assert (finding.cause, finding.host, finding.rank) == ("rank_hang", "node1", 1)
    assert finding.evidence.startswith("flight recorder (torch.distributed.flight_recorder): ranks 0, 2 entered "
                                       "gloo:all_reduce #3 of group '0'")
    assert "rank 1 on node1 did not; its last: gloo:broadcast #2" in finding.evidence


def test_fresh_dumps_from_real_gloo_ranks_name_the_absent_rank(tmp_path):
    pytest.importorskip("torch")
    from clusterctl_helpers import free_port  # below the ephemeral range

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "MASTER_", "RANK", "WORLD_SIZE"))}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3", f"--master-port={port}",
                    str(FIXTURES / "jobs" / "fr_dump.py"), "--out", str(tmp_path / "host1"), "--timeout", "2"],
                   env=env, capture_output=True, timeout=120, check=True)
    [stuck] = fr.stuck_collectives(fr.find_dumps(tmp_path))
    assert (stuck.seq, stuck.missing, stuck.joined) == (3, (1,), (0, 2))
