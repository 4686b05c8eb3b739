"""The inventory's `notify:` section (issue 41): where a run's notifications go (clusterctl/observe/notify.py).

    notify:
      webhook: https://hooks.slack.com/services/T000/B000/XXXX   # POSTed a JSON document
      format: slack            # slack | json (default json)
      command: [/usr/local/bin/page-me, --team, ml]               # run on the controller, the JSON on stdin
      on: [failure, quarantine]                                  # default: every event
"""
from __future__ import annotations

from typing import Any, Optional
from urllib.parse import urlsplit

from clusterctl.inventory.values import Doc, describe, did_you_mean, expect_choice, expect_text, expect_text_list
from clusterctl.models import MASK, NotifySettings

NOTIFY_KEYS = ("webhook", "format", "command", "on")
FORMATS = ("json", "slack")
EVENTS = NotifySettings().on


def notify_settings(doc: Doc, data: Any) -> Optional[NotifySettings]:
    if data is None:
        return None
    path = ("notify",)
    section = doc.mapping(_on_as_written(doc, data), path, NOTIFY_KEYS)
    webhook = doc.value(section, "webhook", path, _expect_url)
    command = doc.value(section, "command", path, expect_text_list, ())
    if webhook is None and not command:
        doc.fail(path, "notify: needs a webhook: or a command:",
                 "write notify: {webhook: https://hooks.example.com/x} or notify: {command: [/usr/local/bin/page-me]}")
    return NotifySettings(webhook=webhook, command=command,
                          format=doc.value(section, "format", path, lambda d, v, p: expect_choice(d, v, p, FORMATS),
                                           "json"),
                          on=doc.value(section, "on", path, _expect_events, EVENTS))


def _on_as_written(doc: Doc, data: Any) -> Any:
    """YAML 1.1 reads a bare `on:` key as the boolean true: it is the `on:` the user wrote."""
    if not isinstance(data, dict) or True not in data:
        return data
    line = doc.locator.line(("notify", True))
    if line is not None:
        doc.locator.record(("notify", "on"), line)
    return {("on" if key is True else key): value for key, value in data.items()}


def _expect_url(doc: Doc, value: Any, path: tuple) -> str:
    url = expect_text(doc, value, path)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        doc.fail(path, f"notify.webhook must be an http(s) URL, got {describe(value)}",
                 "write webhook: https://hooks.slack.com/services/... (the URL your chat or pager gave you)")
    return url


def _expect_events(doc: Doc, value: Any, path: tuple) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        doc.fail(path, f"notify.on must be a list of events, got {describe(value)}",
                 f"write on: [{', '.join(EVENTS)}] (or leave it out: every event)")
    for index, event in enumerate(value):
        if event not in EVENTS:
            doc.fail(path + (index,), f"unknown notify event {describe(event)}"
                     f"{did_you_mean(str(event), EVENTS)}", f"use some of: {', '.join(EVENTS)}")
    return tuple(dict.fromkeys(value))


def masked_url(url: str) -> str:
    """A webhook's URL is its credential: https://hooks.slack.com/services/T/B/x -> https://hooks.slack.com/***"""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}/{MASK}"
