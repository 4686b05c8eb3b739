"""Runs that heal themselves, the parts that need no cluster (issue 35): the job: keys and their one
error each, the cause table, who is left out and who joins, and the summary lines."""
from __future__ import annotations

import pytest

from clusterctl.backends.healing import Fleet, _next_step, on_hosts, summary_lines
from clusterctl.errors import InventoryError
from clusterctl.inventory.load import parse_inventory
from clusterctl.ground.healing import TABLE, classify, response_of
from clusterctl.outcome import Outcome

HOSTS = "hosts:\n" + "".join(f"  - {{name: node{i}, address: 10.0.0.{i}}}\n" for i in range(1, 5))


def _inventory(job: str):
    return parse_inventory(HOSTS + "job:\n  command: [train.py]\n" + job, "inv.yaml")


def test_the_healing_keys_are_read_with_their_defaults_fail_fast_on_every_host():
    healing = _inventory("").job.healing
    assert (healing.nodes, healing.restarts, healing.min_nodes, healing.checkpoint, healing.heal) == (None, 0, None, None, ())
    assert not healing.enabled and healing.lost_after == 15.0
    healing = _inventory("  nodes: 3\n  restarts: 2\n  min_nodes: 2\n  checkpoint: {dir: /data/ckpt, complete: COMPLETE}\n"
                         "  heal: {killed_by_signal: job}\n  lost_after: 6\n").job.healing
    assert (healing.nodes, healing.restarts, healing.min_nodes, healing.lost_after) == (3, 2, 2, 6.0)
    assert (healing.checkpoint.dir, healing.checkpoint.complete, healing.heal) == ("/data/ckpt", "COMPLETE", (("killed_by_signal", "job"),))
    assert (healing.checkpoint.replicas, healing.checkpoint.keep, healing.checkpoint.bandwidth) == (0, 2, None)
    spec = _inventory("  nodes: 3\n  checkpoint: {dir: /c, complete: C, replicas: 2, keep: 3, bandwidth: 200m/s}\n"
                      ).job.healing.checkpoint
    assert (spec.replicas, spec.keep, spec.bandwidth) == (2, 3, 200 << 20)


@pytest.mark.parametrize("job, said", [
    ("  nodes: 5\n", "job.nodes is 5 but the inventory lists 4 host(s)"),
    ("  nodes: 2\n  min_nodes: 3\n", "job.min_nodes is 3, more than the 2 node(s) a run uses"),
    ("  restarts: -1\n", "restarts must be between 0 and 100"),
    ("  restarts: '2'\n", "restarts must be a whole number"),
    ("  checkpoint: {dir: /data/ckpt}\n", "job.checkpoint needs complete:"),
    ("  checkpoint: {dir: /data/ckpt, complete: a/COMPLETE}\n", "is a name inside a checkpoint's directory"),
    ("  nodes: 3\n  checkpoint: {dir: /c, complete: C, replicas: 3}\n", "job.checkpoint.replicas is 3, but a run uses 3"),
    ("  checkpoint: {dir: /c, complete: C, keep: 0}\n", "keep must be"),
    ("  checkpoint: {dir: /c, complete: C, bandwidth: 200}\n", "has no unit"),
    ("  checkpoint: {dir: /c, complete: C, replica: 1}\n", "replica"),
    ("  heal: {killed_by_signl: job}\n", "unknown cause 'killed_by_signl'"),
    ("  heal: {killed_by_signal: retry}\n", "job.heal.killed_by_signal must be node, job or transient"),
    ("  lost_after: 1\n", "job.lost_after: lost_after must be a number at least 3 (seconds), got 1"),
    ("  lost_after: 15s\n", "lost_after must be a number at least 3 (seconds), got '15s'"),
])
def test_a_bad_healing_value_is_one_error_naming_its_line(job, said):
    with pytest.raises(InventoryError) as raised:
        _inventory(job)
    assert said in str(raised.value) and "inv.yaml:" in str(raised.value)


def test_the_placeholders_attempt_and_checkpoint_are_known():
    assert _inventory("  args: ['--resume', '{checkpoint}', '--attempt', '{attempt}']\n").job.args[1] == "{checkpoint}"


def _failure(cause: str, host: str = "node2") -> dict:
    return {"host": host, "rank": 1, "diagnosis": [{"cause": cause, "host": host}]}


def test_node_faults_blame_the_node_job_faults_end_the_run_and_transient_ones_relaunch_as_is():
    assert {c for c in ("node_unreachable", "gpu_xid", "ecc_error", "fabricmanager", "ib_config", "disk_full",
                        "oom_killed", "killed_by_signal") if TABLE[c] == "node"} == {
        "node_unreachable", "gpu_xid", "ecc_error", "fabricmanager", "ib_config", "disk_full", "oom_killed",
        "killed_by_signal"}
    assert all(TABLE[c] == "job" for c in ("import_error", "cuda_oom", "launcher_args", "config_divisibility", "unknown",
                                           "ddp_unused_parameters"))
    assert TABLE["slurm_gres_config"] == "node"  # a node's own gres.conf: a spare's may be right
    assert all(TABLE[c] == "transient" for c in ("rdzv_unreachable", "nccl_timeout_slow_rank", "rank_hang"))
    assert classify(_failure("gpu_xid")).host == "node2" and classify(_failure("gpu_xid")).response == "node"
    assert classify(_failure("cuda_oom")).response == "job"
    assert classify(None).response == "job"
    assert response_of("never-seen-cause") == "job"
    assert classify(_failure("killed_by_signal"), {"killed_by_signal": "job"}).response == "job"
    assert classify({"host": None, "diagnosis": [{"cause": "gpu_xid"}]}).response == "transient"


class _Host:
    def __init__(self, name):
        self.name = name


def _fleet(active, spares=()):
    return Fleet([_Host(n) for n in active], [_Host(n) for n in spares])


class _Healing:
    def __init__(self, restarts=2, min_nodes=None, heal=()):
        self.restarts, self.min_nodes, self.heal = restarts, min_nodes, heal


def _failed(cause, host="node2"):
    return Outcome({"ok": False, "exit_code": 1, "first_failure": _failure(cause, host)})


def test_a_node_fault_leaves_the_node_out_for_good_and_the_first_spare_joins():
    fleet = _fleet(["node1", "node2"], ["node3", "node4"])
    said, why = _next_step(_failed("node_unreachable"), _Healing(), 1, fleet)
    assert why is None and said == "node2 lost (node_unreachable), node3 joins"
    assert fleet.names() == ["node1", "node3"] and fleet.excluded == [{"host": "node2", "cause": "node_unreachable"}]
    _next_step(_failed("gpu_xid", "node1"), _Healing(), 2, fleet)
    assert fleet.names() == ["node3", "node4"]  # the master lost: the first survivor is the master now


def test_without_a_spare_min_nodes_decides_whether_the_run_goes_on_with_fewer_nodes():
    said, why = _next_step(_failed("ecc_error"), _Healing(min_nodes=2), 1, _fleet(["node1", "node2", "node3"]))
    assert why is None and "going on with 2 node(s)" in said
    said, why = _next_step(_failed("ecc_error"), _Healing(), 1, _fleet(["node1", "node2", "node3"]))
    assert said is None and "node2 lost (ecc_error), no spare host is left and 2 node(s) remain" in why


def test_a_job_fault_success_a_stop_and_spent_restarts_end_the_run():
    assert _next_step(_failed("import_error"), _Healing(), 1, _fleet(["node1"]))[1].endswith("not retried")
    assert _next_step(Outcome({"ok": True, "exit_code": 0}), _Healing(), 1, _fleet(["node1"])) == (None, None)
    assert _next_step(Outcome({"ok": False, "exit_code": 1, "stopped": True}), _Healing(), 1, _fleet(["a"])) == (None, None)
    assert "restart(s) of job.restarts are spent" in _next_step(_failed("rdzv_unreachable"), _Healing(1), 2, _fleet(["a"]))[1]


def test_the_master_left_out_hands_the_rendezvous_address_to_the_new_master_on_the_jobs_network():
    inventory = parse_inventory(HOSTS + "rendezvous: {address: 192.168.0.1}\n", "inv.yaml")
    fleet = _fleet([])
    fleet.active = [h for h in inventory.hosts if h.name != "node1"][:2]
    moved = on_hosts(inventory, fleet, {"node2": "192.168.0.2"})
    assert [h.name for h in moved.hosts] == ["node2", "node3"] and moved.rendezvous.address == "192.168.0.2"
    fleet.active = list(inventory.hosts[:2])
    assert on_hosts(inventory, fleet).rendezvous.address == "192.168.0.1"


def test_the_summary_says_one_line_per_relaunch():
    attempts = [{"attempt": 1, "hosts": ["node1", "node2"], "excluded": [{"host": "node2", "cause": "node_unreachable"}],
                 "first_failure": _failure("node_unreachable"), "relaunch_s": None, "checkpoint": None},
                {"attempt": 2, "hosts": ["node1", "node3"], "excluded": [], "first_failure": None, "relaunch_s": 23.6,
                 "checkpoint": "/data/ckpt/step-5"}]
    assert summary_lines(attempts) == ["node2 lost (node_unreachable): relaunched on node1, node3 in 24 s, "
                                       "resuming from step-5"]


def test_a_slurm_relaunch_asks_for_an_allocation_without_the_nodes_left_out():
    from clusterctl.backends.healing import _fleet
    from clusterctl.slurm.submit import salloc_argv

    inventory = parse_inventory("name: demo\nscheduler: {type: slurm, partition: gpu, nodes: 2, extra_args: "
                                "[--qos=high, --exclude=bad1]}\njob:\n  command: [train.py]\n  restarts: 2\n", "inv.yaml")
    fleet = _fleet(inventory, None)
    assert fleet.leave_out("gpu07", "gpu_xid") == "another node of the allocation"  # the scheduler grants one
    fleet.leave_out("gpu03", "node_unreachable")
    argv = salloc_argv(on_hosts(inventory, fleet), "RUN")
    assert argv[-2:] == ("--qos=high", "--exclude=bad1,gpu07,gpu03") and "--nodes=2" in argv
    assert salloc_argv(on_hosts(inventory, _fleet(inventory, None)), "RUN")[-2:] == ("--qos=high", "--exclude=bad1")
    # the quarantined nodes (backends/slurm.py: excluded_nodes) join the same option: Slurm honours only the last
    argv = salloc_argv(on_hosts(inventory, fleet), "RUN", exclude=("sick5", "gpu03"))
    assert [a for a in argv if a.startswith("--exclude")] == ["--exclude=bad1,gpu07,gpu03,sick5"]


def test_collect_logs_names_the_logs_of_a_host_left_out_by_its_rank_in_the_last_attempt_it_ran_in():
    from clusterctl.collect.gather import first_ranks

    # the record of a real run on 4 local hosts (docs/gpu-validation/healing/h100x4_run.json's shape):
    # g1 left out after attempt 1, g3 the spare in attempt 2
    record = {"nproc_per_node": 1, "topology": [{"host": "g0", "ranks": [0, 0]}, {"host": "g2", "ranks": [1, 1]},
                                                {"host": "g3", "ranks": [2, 2]}],
              "attempts": [{"attempt": 1, "hosts": ["g0", "g1", "g2"]}, {"attempt": 2, "hosts": ["g0", "g2", "g3"]}]}
    assert first_ranks(record) == {"g0": 0, "g2": 1, "g3": 2, "g1": 1}
    # nproc_per_node "auto": the ranks a node holds, from the final topology
    record = {"nproc_per_node": "auto", "topology": [{"host": "a", "ranks": [0, 3]}, {"host": "c", "ranks": [4, 7]}],
              "attempts": [{"hosts": ["a", "b", "c"]}, {"hosts": ["a", "c"]}]}
    assert first_ranks(record)["b"] == 4
    assert first_ranks({"topology": [{"host": "a", "ranks": [0, 1]}]}) == {"a": 0}  # a run without restarts
