"""A detached run that heals itself, the parts that need no cluster (issue 35): the engine's heal
(node/heal_policy.py, pure) read from the node's log tails as from the controller's diagnosis, the
launch template the controller hands over (heal/detached.py), and the engine's attempts on a
clock of its own (node/engine.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterctl.inventory.load import parse_inventory
from clusterctl.node import engine, heal_policy, node_healing
from clusterctl.heal.detached import attempts_of, plan_healing
from clusterctl.watch.failures import Ended, first_failure
from clusterctl.ground.healing import TABLE, classify
from clusterctl.modules import process

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CAPTURED = FIXTURES / "torchrun_failures" / "own_error_rank3_barrier"  # a rank's own exception, its peers' barrier broke
INVENTORY = parse_inventory("""
name: heal
hosts: [{name: node1, address: 198.18.0.11}, {name: node2, address: 198.18.0.12}, {name: node3, address: 198.18.0.13}]
job: {command: [train.py], args: ['{prompt}', '--world', '{world_size}', '--attempt', '{attempt}'], nproc_per_node: 1,
      nodes: 2, restarts: 2, checkpoint: {dir: /data/ckpt, complete: COMPLETE}}
""", "inv.yaml")


def _tail(name: str) -> str:
    return (FIXTURES / "logs" / name).read_text()


def _captured(host: str) -> str:
    return (CAPTURED / f"{host}.agent.log").read_text()


CASES = {  # name: the failures the supervisor heard, in order ({"host", "at", "lost", "exit_code", "tail"})
    "a node silent": [{"host": "node2", "at": 10.0, "lost": True, "exit_code": None, "tail": ""}],
    "a rank SIGKILLed on one node": [
        {"host": "node1", "at": 10.0, "lost": False, "exit_code": 1, "tail": _captured("node1")},
        {"host": "node2", "at": 10.5, "lost": False, "exit_code": 1, "tail": _tail("killed_by_signal/seed-001-sigkill.log")}],
    "an exception on every rank": [
        {"host": h, "at": 10.0 + i, "lost": False, "exit_code": 1, "tail": _captured(h)}
        for i, h in enumerate(("node1", "node2", "node3"))],
    "a rank SIGKILLed under the none launcher": [
        {"host": "node1", "at": 10.0, "lost": False, "exit_code": 1, "tail": _captured("node1")},
        {"host": "node2", "at": 10.5, "lost": False, "exit_code": 137,
         "tail": "[node2 rank1]: Killed\n[node2 rank1]: clusterctl: the job exited with code 137\n"}],
    "an import error": [{"host": "node1", "at": 10.0, "lost": False, "exit_code": 1,
                         "tail": "Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>\n"
                                 "ModuleNotFoundError: No module named 'transformers'\n"}],
    "the master refused the rendezvous": [{"host": "node2", "at": 10.0, "lost": False, "exit_code": 1,
                                           "tail": _tail("rdzv_unreachable/seed-004-connection-refused.log")}],
    "a gloo collective timeout": [{"host": "node1", "at": 10.0, "lost": False, "exit_code": 1,
                                   "tail": "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                                           "Timed out waiting 30000ms for recv operation to complete\n"}],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cause_read_from_the_log_tails_on_the_node_is_the_one_the_diagnosis_names(case):
    """One decision (heal_policy.verdict) on two readings of the same failures: the node's (its log
    tails, heal_policy.CAUSES) and the controller's diagnosis (watch/failures.py)."""
    failures = CASES[case]
    ended = [Ended(f["host"], f["at"], f["lost"], f["exit_code"], f["tail"]) for f in failures]
    attached = classify(first_failure(INVENTORY, ended, poll_s=1.0, lost_after_s=15.0))
    response, cause, host = heal_policy.verdict(failures, TABLE)
    assert response == attached.response, (case, cause, attached)
    if response == "node":
        assert host == attached.host


def test_a_node_fault_anywhere_is_blamed_before_the_earlier_errors_of_its_peers():
    failures = CASES["a rank SIGKILLed on one node"]
    assert heal_policy.verdict(failures, TABLE) == ("node", "killed_by_signal", "node2")
    assert heal_policy.verdict(failures, {**TABLE, "killed_by_signal": "job"})[0] == "job"  # the user's override
    assert heal_policy.verdict([], TABLE) == ("job", "unknown", None)


def test_replanning_leaves_the_blamed_host_out_and_takes_the_first_spare_the_first_survivor_is_master():
    nproc = {"node1": 1, "node2": 1, "node3": 1, "node4": 1}
    assert heal_policy.replan(["node1", "node2"], ["node3", "node4"], "node1", None, nproc) == (
        ["node2", "node3"], ["node4"], None)
    assert heal_policy.replan(["node1", "node2", "node3"], [], "node3", 2, nproc) == (["node1", "node2"], [], None)
    refused = heal_policy.replan(["node1", "node2"], [], "node2", None, nproc)
    assert refused[0] is None and "no spare host is left and 1 node(s) remain (job.min_nodes is not set)" in refused[2]
    refused = heal_policy.replan(["node1", "node2", "node3"], [], "node3", 2, nproc, divides=4)
    assert refused[0] is None and "world size would be 2" in refused[2]


def test_the_launch_template_becomes_the_next_attempts_torchrun_on_the_survivors(tmp_path):
    hosts = list(INVENTORY.hosts)
    heal = plan_healing(INVENTORY, hosts[:2], hosts[2:], {}, "RUN1", "a {run_id} prompt @x.nnodes@")
    config = heal.config_for("node3")
    token = config["token"]
    values = heal_policy.launch_values(token, ["node1", "node3"], "node3", config["addresses"], config["nproc"], 2,
                                        "/data/ckpt/step-5")
    argv = [heal_policy.substitute(a, values) for a in config["template"]["argv"]]
    assert "--nnodes=2:2" in argv and "--node-rank=1" in argv and "--rdzv-endpoint=198.18.0.11:29500" in argv
    assert argv[-6:] == ["train.py", "a {run_id} prompt @x.nnodes@", "--world", "2", "--attempt", "2"]
    env = dict((k, heal_policy.substitute(v, values)) for k, v in config["template"]["env"])
    assert env["CLUSTERCTL_ATTEMPT"] == "2" and env["CLUSTERCTL_CHECKPOINT"] == "/data/ckpt/step-5"
    assert env["CLUSTERCTL_HOST"] == "node3" and env[process.MARKER_RUN] == "RUN1"
    assert "template" not in heal.rules and heal.record() == {"fleet": ["node1", "node2", "node3"], "restarts": 2}
    json.dumps(config)  # it travels as supervision.json


def test_the_latest_complete_checkpoint_is_found_on_the_node_as_the_controller_finds_it(tmp_path):
    for name, complete in (("step-9", True), ("step-10", True), ("step-11", False)):
        (tmp_path / name).mkdir()
        if complete:
            (tmp_path / name / "COMPLETE").write_text("")
    assert heal_policy.latest_checkpoint({"dir": str(tmp_path), "complete": "COMPLETE"}) == f"{tmp_path}/step-10"
    assert heal_policy.latest_checkpoint({"dir": str(tmp_path / "none"), "complete": "COMPLETE"}) is None


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _healer(clock, restarts=1):
    hosts = list(INVENTORY.hosts)
    heal = plan_healing(INVENTORY, hosts[:2], hosts[2:], {}, "RUN1", "p")
    config = {"run_id": "RUN1", "hosts": ["node1", "node2", "node3"], "lost_after_s": 15.0, "stall_timeout_s": 0,
              "timeout_s": 0, "heal": {**heal.config_for("node1"), "restarts": restarts}}
    return engine.Engine(config, "/nowhere", now=clock)


def _beat(healer, host, seq, **report):
    return healer.beat({"host": host, "seq": seq, "ranks": 1, "attempt": 1, **report})


def test_a_silent_node_is_left_out_the_survivor_stopped_and_the_spare_ordered_to_launch_attempt_2():
    clock, seq = Clock(), iter(range(1, 10_000))
    healer = _healer(clock, restarts=2)  # no checkpoint yet: attempt 1 made no progress and counts double
    for _ in range(3):
        for host in ("node1", "node2"):
            _beat(healer, host, next(seq))
        _beat(healer, "node3", next(seq), ranks=0)
        clock.t += 1
        healer.tick()
    clock.t += 16  # node2 cut off: only node1 and the spare report
    _beat(healer, "node1", next(seq))
    healer.tick()
    assert healer.phase == "stopping" and _beat(healer, "node1", next(seq))["stop"] is True
    assert _beat(healer, "node1", next(seq), exit_code=-15, tail="clusterctl: stopped")["ack"] is False
    healer.tick()
    assert healer.phase == "backoff" and healer.excluded == [{"host": "node2", "cause": "node_unreachable"}]
    clock.t += 1.5
    healer.tick()
    order = _beat(healer, "node3", next(seq), ranks=0)["launch"]
    assert order["attempt"] == 2 and "launch" in _beat(healer, "node1", next(seq), exit_code=-15)
    for host in ("node1", "node3"):
        _beat(healer, host, next(seq), attempt=2, exit_code=0)
    healer.tick()
    assert healer.phase == "over" and healer.final_state == "succeeded"
    state = healer.document(final=True)
    attempts = attempts_of({**state, "final": True})
    assert [a["hosts"] for a in attempts] == [["node1", "node2"], ["node1", "node3"]]
    assert [a["exit_code"] for a in attempts] == [1, 0] and attempts[1]["relaunch_s"] is not None
    assert attempts[0]["excluded"] == [{"host": "node2", "cause": "node_unreachable"}]


def test_a_job_fault_ends_the_run_at_once_and_a_stop_between_attempts_launches_nothing():
    clock, seq = Clock(), iter(range(1, 10_000))
    healer = _healer(clock)
    for host in ("node1", "node2"):
        _beat(healer, host, next(seq), exit_code=1, tail=_captured("node2"))
    clock.t += 4
    healer.tick()
    healer.tick()
    assert healer.phase == "over" and "the job's own fault: not retried" in healer.heal_refused
    healer = _healer(clock)
    _beat(healer, "node2", next(seq), lost=False)
    healer.phase, healer.relaunch_at = "backoff", clock.t + 30
    _beat(healer, "node3", next(seq), ranks=0, stopped=True)
    healer.tick()
    assert healer.phase == "over" and healer.final_state == "stopped" and not healer.orders


def test_setting_an_attempt_aside_keeps_the_daemons_files_and_moves_nothing_of_a_spare_that_ran_nothing(tmp_path):
    run_dir = tmp_path / "node1"
    run_dir.mkdir()
    for name in ("agent.pid", "agent.log", "env", "stop", "supervision.json", "keep.log", "node_agent.py"):
        (run_dir / name).write_text(name)
    node_healing.set_aside(str(run_dir), 1)
    assert sorted(p.name for p in run_dir.iterdir()) == ["keep.log", "node_agent.py", "supervision.json"]
    assert sorted(p.name for p in (tmp_path / "node1.attempt-1").iterdir()) == ["agent.log", "agent.pid", "env", "stop"]
    spare = tmp_path / "node3"
    spare.mkdir()
    (spare / "env").write_text("")
    node_healing.set_aside(str(spare), 1)
    assert not (tmp_path / "node3.attempt-1").exists() and (spare / "env").exists()


@pytest.mark.parametrize("launcher", ["torchrun", "none", "mpirun", "deepspeed"])
def test_each_launchers_template_filled_in_on_the_node_is_what_the_controller_launches_on_that_plan(launcher):
    """A detached relaunch (plan/launch_plan.py's tokens, heal_policy.launch_values) starts on each node exactly
    what an attached relaunch starts there, planned anew on the hosts in use (run/runner.py)."""
    from dataclasses import replace

    from clusterctl.plan.launcher import shaped
    from clusterctl.run.runner import JobRunner
    from clusterctl.plan.topology import plan

    inventory = replace(INVENTORY, job=replace(INVENTORY.job, launcher=launcher))
    hosts = list(inventory.hosts)
    heal = plan_healing(inventory, hosts[:2], hosts[2:], {}, "RUN1", "a prompt")
    active = ["node1", "node3"]
    attempt2 = shaped(inventory, plan(replace(inventory, hosts=(hosts[0], hosts[2])), {}))
    runner = JobRunner(inventory, attempt2, "RUN1", "a prompt", None, lambda e: None, attempt=2,
                       checkpoint="/data/ckpt/step-5")
    for host in active:
        config = heal.config_for(host)
        values = heal_policy.launch_values(config["token"], active, host, config["addresses"], config["nproc"], 2,
                                           "/data/ckpt/step-5", config["gpus"])
        launch = config["template_master"] if host == "node1" and "template_master" in config else config["template"]
        argv = tuple(heal_policy.substitute(a, values) for a in launch["argv"])
        env = tuple((k, heal_policy.substitute(v, values)) for k, v in launch["env"])
        assert argv == runner.nodes[host].torchrun, host
        assert env == runner.nodes[host].env, host


def test_a_checkpoint_is_never_a_link_a_foreign_directory_or_an_odd_name(tmp_path):
    """The security finding of issue 50: the newest-named directory of any owner reached the env file."""
    import os

    for name in ("step-3", "step-7"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "COMPLETE").write_text("")
    odd = tmp_path / "step-9\nEVIL=1"
    odd.mkdir()
    (odd / "COMPLETE").write_text("")
    (tmp_path / "step-8").symlink_to(tmp_path / "step-7")
    (tmp_path / "step-6").mkdir()
    (tmp_path / "step-6" / "COMPLETE").symlink_to(tmp_path / "step-3" / "COMPLETE")  # a marker that is a link
    refused: list = []
    found = heal_policy.latest_checkpoint({"dir": str(tmp_path), "complete": "COMPLETE"}, refused)
    assert found == f"{tmp_path}/step-7"
    assert any("symbolic link" in r and "step-8" in r for r in refused)
    assert any("characters" in r for r in refused) and not any("\n" in r.split("under")[0][1:-2] for r in refused)
    assert heal_policy.complete_steps(str(tmp_path), "COMPLETE") == ["step-3", "step-7"]
    if os.geteuid() == 0:  # a directory of another uid is someone else's
        os.chown(tmp_path / "step-7", 12345, 12345)
        assert heal_policy.latest_checkpoint({"dir": str(tmp_path), "complete": "COMPLETE"}) == f"{tmp_path}/step-3"


def test_the_engine_ends_a_loop_that_makes_no_progress_after_two_attempts():
    """A transient failure before any checkpoint, twice: attempt 2 is launched, attempt 3 never is."""
    clock, seq = Clock(), iter(range(1, 10_000))
    healer = _healer(clock, restarts=5)
    healer.heal = {**healer.heal, "checkpoint": {"dir": "/nowhere/ckpt", "complete": "COMPLETE"}}
    tail = "torch.distributed.DistStoreError: Timed out after 30s"
    for attempt in (1, 2):
        for host in ("node1", "node2"):
            _beat(healer, host, next(seq), attempt=attempt, exit_code=1, tail=tail)
        clock.t += 4
        healer.tick()
        healer.tick()
        if attempt == 1:
            assert healer.phase == "backoff"
            clock.t += 2
            healer.tick()
    assert healer.phase == "over" and "attempts 1 and 2 in a row made no progress" in healer.heal_refused
    assert healer.state == "failed" and "made no progress" in healer.stop_reason  # the supervisor's last line says them
    attempts = healer.document(final=True)["attempts"]
    assert [a["progress"] for a in attempts] == [False, False] and attempts[1]["resumed_from"] is None


def _replicated(clock, restarts=2):
    healer = _healer(clock, restarts)
    spec = {"dir": "/local/ckpt", "complete": "COMPLETE", "replicas": 1, "keep": 2, "bandwidth": None}
    healer.heal = {**healer.heal, "checkpoint": spec}
    healer.copies = engine.checkpoint_copies.Copies(spec)
    return healer


def _holding(own, held, restored=None):
    return {"own": own, "held": held, "events": [], "restored": restored or {}}


@pytest.mark.parametrize("restore_fails", [False, True])
def test_a_relaunch_with_replicas_restores_the_newest_step_complete_across_the_survivors_first(restore_fails):
    """node2 lost with its own step-3 only on its disk: step-2 (its replica on node1) is the newest every host
    of attempt 1 has a surviving copy of; node1 and the spare node3 restore it before attempt 2 launches."""
    clock, seq = Clock(), iter(range(1, 10_000))
    healer = _replicated(clock)
    _beat(healer, "node1", next(seq), checkpoints=_holding(["step-1", "step-2", "step-3"], {"node2": ["step-2"]}))
    _beat(healer, "node2", next(seq), checkpoints=_holding(["step-2", "step-3"], {"node1": ["step-2", "step-3"]}))
    _beat(healer, "node3", next(seq), ranks=0, checkpoints=_holding([], {}))
    clock.t += 16  # node2 cut off
    _beat(healer, "node1", next(seq))
    _beat(healer, "node3", next(seq), ranks=0)
    healer.tick()
    _beat(healer, "node1", next(seq), exit_code=-15, stopped=False, tail="clusterctl: stopped")
    healer.tick()
    assert healer.phase == "backoff" and healer.attempts[0]["progress"] is True
    clock.t += 1.5
    healer.tick()
    assert healer.phase == "restoring" and not healer.orders
    order = _beat(healer, "node3", next(seq), ranks=0)["restore"]
    assert order == {"attempt": 2, "step": "step-2", "sources": {"node1": ["node1"], "node2": ["node1"]}}
    done = {"attempt": 2, "step": "step-2", "ok": not restore_fails, "says": None if not restore_fails else
            "shard-1.pt: its SHA-256 differs from the manifest's", "bytes": 10, "s": 0.5}
    clock.t += 1
    _beat(healer, "node3", next(seq), ranks=0, checkpoints=_holding([], {}, done))
    _beat(healer, "node1", next(seq), exit_code=-15, checkpoints=_holding(["step-1", "step-2", "step-3"],
                                                                           {"node2": ["step-2"]}, {**done, "ok": True}))
    healer.tick()
    assert healer.phase == "running" and healer.attempt == 2
    values = healer.orders["node3"]["values"]
    checkpoint = next(v for k, v in values.items() if k.endswith(".checkpoint@"))
    assert checkpoint == ("" if restore_fails else "/local/ckpt/step-2")  # a refused copy is never resumed from
    attempt = healer.document()["attempts"][-1]
    assert attempt["timings"]["transfer_s"] == 1.0 and attempt["timings"]["detection_s"] > 15
    if restore_fails:
        assert any(e["kind"] == "refused" and "SHA-256" in e["says"] for e in healer.document()["replica_events"])
