"""Message classes met in issue 51's first-scored batches (real public logs, now training entries of the
corpus): each test names the class, not the thread. The first scores themselves are in
docs/diagnosis.md; these only keep the class changes made after them."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import corpus, diagnose_text
from clusterctl.diagnose.evidence_config import rank_placement
from clusterctl.diagnose.logformat import parse_lines

ENTRIES = {entry.path: entry for entry in corpus.load()}


@pytest.mark.parametrize("path", [
    # a store socket that connected, then waited out the default timeout while the main rank tokenized
    "nccl_timeout_slow_rank/b1-axolotl-2684.log",
    # an Ascend HCCL link-establish timeout: a collective library's timeout in its own words
    "nccl_timeout_slow_rank/b2-hiascend-hccl-ei0006-link-timeout.log",
    # ncclInternalError from NCCL's topology search on new hardware: an NCCL too old for it
    "nccl_too_old/b1-milabench-183.log",
    # NCCL listing docker bridges and veths among its socket interfaces
    "nic_mismatch/b1-nccl-697.log",
    # an unhandled system error in a single-host nccl-tests run: shared memory, not the network
    "shm_too_small/b1-nccl-473.log",
    # NCCL's IB transport reporting `local size X remote size Y`: a truncation, not a user's collective order
    "version_mismatch/b3-nccl-969.log",
])
def test_a_first_scored_class_is_named_first(path):
    entry = ENTRIES[path]
    assert corpus.first_scored(entry) and path not in corpus.frozen_test_paths()
    assert diagnose_text(entry.text)[0].cause == entry.cause, [f.cause for f in diagnose_text(entry.text)]


def test_one_hostname_with_two_addresses_on_one_interface_is_two_machines():
    entry = ENTRIES["nic_mismatch/b1-nccl-697.log"]  # any log: the placement reader on its own lines
    lines, _ = parse_lines(entry.text)
    assert rank_placement(lines).clashes == ()
    clash = ("node1:18226:18240 [1] INFO NET : Using interface eth1:100.102.32.176<0>\n"
             "node1:22671:22795 [1] INFO NET : Using interface eth1:100.102.32.175<0>\n")
    placement = rank_placement(parse_lines(clash)[0])
    assert [c[:3] for c in placement.clashes] == [("node1", "eth1", ("100.102.32.175", "100.102.32.176"))]
    assert diagnose_text(clash)[0].cause == "duplicate_host"


def test_a_gpu_index_claimed_by_ranks_a_node_apart_is_duplicate_host_and_adjacent_ranks_duplicate_gpu():
    apart = ("learngpu060:3728589:3730445 [2] INFO Ring 00 : 2[2] -> 3[3] via P2P/IPC\n"
             "learngpu060:3728593:3730444 [6] INFO Ring 00 : 6[6] -> 10[2] via P2P/IPC\n"
             "learngpu060:3728580:3730448 [1] INFO Ring 00 : 1[1] -> 2[2] via P2P/IPC\n")
    assert diagnose_text(apart)[0].cause == "duplicate_host"
    adjacent = ("host:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0\n"
                "host:2:2 [0] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 0\n")
    assert diagnose_text(adjacent)[0].cause == "duplicate_gpu"
