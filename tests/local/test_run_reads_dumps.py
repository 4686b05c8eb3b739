"""`run` reads the flight-recorder dumps off the nodes before it reports (issue 39): a collective
that timed out names the rank that did not join, not the rank whose watchdog fired. The dumps and
log are the real ones captured on 2 x H200 (tests/fixtures/flight_recorder/nccl_h200_2ranks_rank1_late:
rank 1 sleeps before an all_reduce, the watchdog fires on rank 0), read through a real local
transport from a node's run dir."""
from __future__ import annotations

import shutil
from pathlib import Path

from clusterctl.executor import Connections
from clusterctl.inventory.load import parse_inventory
from clusterctl.watch.dumps import with_dumps
from clusterctl.watch.failures import Ended, first_failure
from clusterctl.transport import connect

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "flight_recorder" / "nccl_h200_2ranks_rank1_late"
RUN_DIR = next(H200.glob("gpus01/outputs/logs/*/gpus01"))


def _inventory():
    return parse_inventory("name: fr\nhosts:\n  - {name: gpus01, connection: local}\njob: {command: [x.py]}\n", "inv.yaml")


def test_a_collective_timeout_is_put_on_the_rank_that_did_not_join_before_run_reports(tmp_path):
    inventory = _inventory()
    run_dir = tmp_path / "run"
    shutil.copytree(RUN_DIR, run_dir)
    tail = (run_dir / "agent.log").read_text(errors="replace")
    first = first_failure(inventory, [Ended("gpus01", 1.0, False, 1, tail)], 1.0, 7)
    assert first["rank"] != 1  # the logs alone: the rank whose watchdog fired
    connections = Connections(connect)
    try:
        named = with_dumps(first, inventory, {"gpus01": (inventory.hosts[0], str(run_dir))}, connections)
    finally:
        connections.close()
    assert (named["host"], named["rank"], named["named_by"]) == ("gpus01", 1, "flight recorder"), named
    top = named["diagnosis"][0]
    assert top["cause"] == "rank_hang" and "#2" in top["evidence"] and "rank 1 on gpus01 did not" in top["evidence"]


def test_an_own_failure_is_left_as_it_is_and_no_dump_names_nobody(tmp_path):
    inventory = _inventory()
    own = {"host": "gpus01", "rank": 3, "rank_exit_code": 3, "diagnosis": [{"cause": "unknown"}]}
    assert with_dumps(own, inventory, {"gpus01": (inventory.hosts[0], str(tmp_path))}, None) is own
    timeout = {"host": "gpus01", "rank": 0, "diagnosis": [{"cause": "nccl_timeout_slow_rank"}]}
    connections = Connections(connect)
    try:
        assert with_dumps(timeout, inventory, {"gpus01": (inventory.hosts[0], str(tmp_path))}, connections) is timeout
    finally:
        connections.close()
