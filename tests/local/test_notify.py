"""Notifications (issue 41): the inventory's `notify:` section, the two shapes of a message, and
delivery to a real webhook receiver on loopback (retried, logged, never holding up the caller,
secrets masked) and to a command run on this machine."""
from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from clusterctl.inventory.load import parse_inventory
from clusterctl.observe.messages import message
from clusterctl.observe.notify import LOG_NAME, Delivery, Notifier
from clusterctl.ground.masking import masker as mask_of
from loopback_receiver import Receiver

HOSTS = "hosts:\n  - {name: node1, address: 10.0.0.1}\n  - {name: node2, address: 10.0.0.2}\n"
QUICK = Delivery(tries=3, first_pause_s=0.01, timeout_s=5.0, flush_s=30.0)
FAILED = {  # the shape watch/failures.py writes in run.json's first_failure
    "host": "node2", "rank": 3, "exit_code": 1, "rank_exit_code": 1,
    "diagnosis": [{"cause": "cuda_oom", "host": "node2", "rank": 3, "confidence": 0.93,
                   "evidence": "torch.OutOfMemoryError: CUDA out of memory",
                   "fix": "lower the batch size or enable activation checkpointing"}]}
RECORD = {"run_id": "20261127-080000-abc123", "cluster": "lab", "started": 1000.0, "ended": 1100.5, "exit_code": 1,
          "state": "ended", "first_failure": FAILED,  # a run record as docs/schemas/run-record.json declares it
          "topology": [{"host": f"node{n + 1}", "node_rank": n, "ranks": [4 * n, 4 * n + 3], "gpus": [0, 1, 2, 3],
                        "nic": "eth0", "local_addr": f"10.0.0.{n + 1}"} for n in range(2)]}


def _inventory(notify: str, env: str = ""):
    return parse_inventory(f"name: lab\n{HOSTS}{env}notify:\n{notify}", "lab.yaml")


def _notifier(tmp_path: Path, notify: str, env: str = "", delivery: Delivery = QUICK) -> Notifier:
    inventory = _inventory(notify, env)
    return Notifier(inventory.notify, lambda run_id: tmp_path / run_id, mask_of(inventory), delivery)


def _log(tmp_path: Path) -> str:
    return (tmp_path / RECORD["run_id"] / LOG_NAME).read_text()


# --------------------------------------------------------------------------- delivery


def test_a_webhook_on_loopback_gets_the_message_once(tmp_path):
    with Receiver() as receiver:
        notifier = _notifier(tmp_path, f"  webhook: {receiver.url}\n")
        notifier.send(message("failure", RECORD, now=2000.0))
        assert notifier.flush()
    assert [d["event"] for d in receiver.documents()] == ["failure"]
    assert receiver.documents()[0]["diagnosis"]["cause"] == "cuda_oom"
    assert "webhook http://127.0.0.1:" in _log(tmp_path) and "delivered (try 1)" in _log(tmp_path)
    assert "secret-path" not in _log(tmp_path), "the webhook's path is its credential"


def test_a_receiver_that_fails_twice_gets_the_message_on_the_third_try_and_the_log_says_so(tmp_path):
    with Receiver(answers=(500, 503)) as receiver:
        notifier = _notifier(tmp_path, f"  webhook: {receiver.url}\n  format: slack\n")
        notifier.send(message("end", RECORD, now=2000.0))
        assert notifier.flush()
    assert len(receiver.bodies) == 1 and "blocks" in receiver.documents()[0]
    assert "delivered (try 3)" in _log(tmp_path)


def test_an_unreachable_webhook_is_logged_after_its_tries_and_raises_nothing(tmp_path):
    import socket

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: connection refused
    notifier = _notifier(tmp_path, f"  webhook: http://127.0.0.1:{port}/x\n")
    notifier.send(message("failure", RECORD, now=2000.0))
    assert notifier.flush()
    assert "NOT delivered after 3 tries" in _log(tmp_path) and "refused" in _log(tmp_path).lower()


def test_sending_returns_while_the_receiver_has_not_answered_yet(tmp_path):
    hold = threading.Event()
    with Receiver(hold=hold) as receiver:
        notifier = _notifier(tmp_path, f"  webhook: {receiver.url}\n")
        notifier.send(message("failure", RECORD, now=2000.0))  # returns although the receiver holds the answer
        assert receiver.got_one.wait(30)
        assert receiver.bodies == [] and not (tmp_path / RECORD["run_id"] / LOG_NAME).exists()
        hold.set()
        assert notifier.flush()
    assert len(receiver.bodies) == 1


def test_events_left_out_of_on_are_not_sent(tmp_path):
    with Receiver() as receiver:
        notifier = _notifier(tmp_path, f"  webhook: {receiver.url}\n  on: [failure]\n")
        notifier.send(message("end", RECORD, now=2000.0))
        notifier.send(message("straggler", RECORD, now=2000.0))
        assert notifier.flush()
    assert receiver.bodies == [] and notifier.sent == []


def test_a_secret_of_the_inventory_in_a_diagnosis_is_masked_before_it_is_sent(tmp_path):
    env = "job:\n  command: [train.py]\n  env:\n    HF_TOKEN: {value: hf_secretvalue123, secret: true}\n"
    record = {**RECORD, "first_failure": {**FAILED, "diagnosis": [
        {"cause": "auth", "evidence": 'Invalid token "hf_secretvalue123"', "fix": "renew it"}]}}
    with Receiver() as receiver:
        notifier = _notifier(tmp_path, f"  webhook: {receiver.url}\n", env=env)
        notifier.send(message("failure", record, now=2000.0))
        assert notifier.flush()
    assert b"hf_secretvalue123" not in receiver.bodies[0]
    assert receiver.documents()[0]["diagnosis"]["evidence"] == 'Invalid token "***"'


def test_a_command_gets_the_json_document_on_its_stdin(tmp_path):
    got = tmp_path / "got.json"
    argv = json.dumps([sys.executable, "-c", f"import sys; open({str(got)!r}, 'w').write(sys.stdin.read())"])
    notifier = _notifier(tmp_path, f"  command: {argv}\n")
    notifier.send(message("failure", RECORD, now=2000.0))
    assert notifier.flush()
    assert json.loads(got.read_text())["diagnosis"]["host"] == "node2"
    assert "command " + sys.executable + ": delivered" in _log(tmp_path)


def test_a_command_that_fails_is_logged_with_what_it_said(tmp_path):
    argv = json.dumps([sys.executable, "-c", "import sys; sys.stderr.write('pager down\\n'); sys.exit(3)"])
    notifier = _notifier(tmp_path, f"  command: {argv}\n")
    notifier.send(message("end", RECORD, now=2000.0))
    assert notifier.flush()
    assert "NOT delivered after 3 tries" in _log(tmp_path) and "exited 3: pager down" in _log(tmp_path)


# --------------------------------------------------------------------------- the hooks


def _session(tmp_path: Path):
    from types import SimpleNamespace

    from clusterctl.state import State

    return SimpleNamespace(state=State(tmp_path / "state"))


def _write_record(session, record: dict) -> None:
    session.state.write_json(session.state.run_dir(record["run_id"]) / "run.json", record)


def test_around_a_run_that_fails_one_failure_and_one_end_are_sent_and_a_host_it_quarantined(tmp_path):
    from clusterctl.health.events import Event
    from clusterctl.health.fleet import record_events
    from clusterctl.observe.notify_hooks import notified

    session = _session(tmp_path)
    with Receiver() as receiver:
        inventory = _inventory(f"  webhook: {receiver.url}\n",
                               env="health:\n  rules:\n    node_lost: {quarantine_after: 1}\n")

        def run():  # what a run leaves behind: its record, and a node lost in the health record
            _write_record(session, RECORD)
            record_events(session.state.health_db, inventory, [Event("node2", "node_lost", "run", "gone")])
            return "the outcome"

        assert notified(session, inventory, run) == "the outcome"
    got = receiver.documents()
    assert sorted(d["event"] for d in got) == ["end", "failure", "quarantine"], got
    quarantine = next(d for d in got if d["event"] == "quarantine")
    assert quarantine["detail"]["host"] == "node2" and quarantine["summary"].startswith("node2 quarantined")


def test_a_relaunch_inside_a_run_is_sent_with_that_attempts_diagnosis(tmp_path):
    from clusterctl.observe.notify_hooks import notified, relaunching

    session = _session(tmp_path)
    with Receiver() as receiver:
        inventory = _inventory(f"  webhook: {receiver.url}\n  on: [relaunch]\n")

        def run():
            _write_record(session, {**RECORD, "state": "running", "relaunching": True})
            relaunching(session, RECORD["run_id"], "node2 left out (cuda_oom)", FAILED, attempt=1)

        notified(session, inventory, run)
    [sent] = receiver.documents()
    assert sent["event"] == "relaunch" and sent["detail"] == {"attempt": 1, "verdict": "node2 left out (cuda_oom)"}
    assert sent["diagnosis"]["cause"] == "cuda_oom" and sent["state"] == "running"


def test_a_straggler_is_sent_once_per_naming(tmp_path):
    from clusterctl.observe import notify_hooks

    straggler = {"host": "node2", "rank": 3, "since": 1050.0, "until": None, "evidence": "40 of 40 samples"}
    with Receiver() as receiver:
        notifier = _notifier(tmp_path, f"  webhook: {receiver.url}\n")
        token = notify_hooks.CURRENT.set(notifier)
        try:
            tell = notify_hooks.straggler_hook({**RECORD, "state": "running"})
        finally:
            notify_hooks.CURRENT.reset(token)
        tell([straggler])
        tell([{**straggler, "lag_s": 0.5}])  # the same naming, refreshed
        tell([{**straggler, "until": 1080.0}])  # keeps pace again
        assert notifier.flush()
    assert [(d["event"], d["detail"]["rank"]) for d in receiver.documents()] == [("straggler", 3)]


def test_a_detached_runs_end_is_sent_when_the_controller_learns_it(tmp_path):
    from clusterctl.observe.notify_hooks import ended_detached

    session = _session(tmp_path)
    with Receiver() as receiver:
        ended_detached(session.state, _inventory(f"  webhook: {receiver.url}\n"), {**RECORD, "detached": True})
    assert sorted(d["event"] for d in receiver.documents()) == ["end", "failure"]
