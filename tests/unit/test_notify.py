"""Notifications (issue 41): the inventory's `notify:` section, the two shapes of a message, and
delivery to a real webhook receiver on loopback (retried, logged, never holding up the caller,
secrets masked) and to a command run on this machine."""
from __future__ import annotations

import json

import pytest

from clusterctl.errors import InventoryError
from clusterctl.inventory.load import parse_inventory
from clusterctl.observe.messages import message, payload
from clusterctl.inventory.notify_section import masked_url
from json_documents import check

from local.test_notify import FAILED, HOSTS, RECORD, _inventory, _session


# --------------------------------------------------------------------------- the section


def test_the_notify_section_reads_a_webhook_its_shape_a_command_and_the_events():
    notify = _inventory("  webhook: https://hooks.example.com/x\n  format: slack\n  command: [page-me, --team]\n"
                        "  on: [failure, quarantine]\n").notify
    assert (notify.webhook, notify.format, notify.command, notify.on) == (
        "https://hooks.example.com/x", "slack", ("page-me", "--team"), ("failure", "quarantine"))


def test_without_on_every_event_is_sent_in_the_json_shape():
    notify = _inventory("  command: [page-me]\n").notify
    assert notify.format == "json" and notify.on == ("end", "failure", "relaunch", "straggler", "quarantine")


@pytest.mark.parametrize("section, said", [
    ("  on: [failure]\n", "needs a webhook: or a command:"),
    ("  webhook: ftp://x/y\n", "must be an http(s) URL"),
    ("  webhook: https://h/x\n  on: [failur]\n", "did you mean 'failure'"),
    ("  webhook: https://h/x\n  format: teams\n", "must be one of json | slack"),
    ("  webhook: https://h/x\n  url: https://h/y\n", "unknown key 'url'"),
])
def test_a_wrong_notify_section_is_one_error_with_its_file_and_line(section, said):
    with pytest.raises(InventoryError) as caught:
        _inventory(section)
    assert said in str(caught.value) and "lab.yaml:" in str(caught.value), str(caught.value)


def test_an_inventory_dump_masks_the_webhooks_path_which_is_its_credential():
    from clusterctl.inventory.dump import dump_inventory

    dumped = dump_inventory(_inventory("  webhook: https://hooks.example.com/services/T0/B0/XyZ\n"))
    assert "https://hooks.example.com/***" in dumped and "XyZ" not in dumped


# --------------------------------------------------------------------------- the shapes


def test_the_json_message_of_a_failure_carries_the_run_hosts_duration_state_and_diagnosis():
    document = payload(message("failure", RECORD, now=2000.0), "json")
    assert document["schema"] == "clusterctl.notification/1"
    assert {k: document[k] for k in ("event", "run_id", "cluster", "hosts", "state", "duration_s")} == {
        "event": "failure", "run_id": RECORD["run_id"], "cluster": "lab", "hosts": ["node1", "node2"],
        "state": "failed", "duration_s": 100.5}
    assert document["diagnosis"] == {"cause": "cuda_oom", "host": "node2", "rank": 3, "confidence": 0.93,
                                     "fix": FAILED["diagnosis"][0]["fix"], "evidence": FAILED["diagnosis"][0]["evidence"]}
    assert document["summary"] == f"run {RECORD['run_id']} on lab failed: cuda_oom on node2 rank 3"
    check("notification", document, "the JSON notification of a failure")


def test_the_slack_message_has_text_and_blocks_naming_the_cause_and_the_fix():
    document = payload(message("failure", RECORD, now=2000.0), "slack")
    assert document["text"].startswith(f"run {RECORD['run_id']} on lab failed")
    shown = json.dumps(document["blocks"])
    assert document["blocks"][0]["type"] == "header"
    for words in ("*cause* cuda_oom on node2, rank 3", "*fix* lower the batch size", "*duration* 1m40s",
                  "node1, node2", "*state* failed"):
        assert words in shown, (words, shown)


def test_a_run_that_succeeded_ends_with_no_diagnosis_and_a_running_one_counts_its_time_until_now():
    ok = {**RECORD, "exit_code": 0, "first_failure": None}
    ended = payload(message("end", ok, now=2000.0), "json")
    assert "diagnosis" not in ended
    check("notification", ended, "the JSON notification of a run that succeeded")
    running = {**RECORD, "state": "running", "ended": None}
    assert message("straggler", running, now=1030.0).duration_s == 30.0


def test_slack_control_characters_in_the_text_are_escaped():
    record = {**RECORD, "first_failure": {**FAILED, "diagnosis": [{"cause": "x", "fix": "use <a> & <b>"}]}}
    shown = json.dumps(payload(message("failure", record, now=2000.0), "slack"))
    assert "use &lt;a&gt; &amp; &lt;b&gt;" in shown and "<a>" not in shown


def test_the_logged_webhook_shows_only_its_host():
    assert masked_url("https://hooks.slack.com/services/T0/B0/XyZ") == "https://hooks.slack.com/***"


def test_without_a_notify_section_a_run_is_left_alone(tmp_path):
    from clusterctl.observe.notify_hooks import notified

    inventory = parse_inventory(f"name: lab\n{HOSTS}", "lab.yaml")
    assert notified(_session(tmp_path), inventory, lambda: 7) == 7
    assert not (tmp_path / "state").exists()
