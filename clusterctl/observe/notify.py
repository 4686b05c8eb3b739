"""Delivering a run's notifications (issue 41): to the inventory's `notify.webhook` (an HTTP POST of
the JSON or Slack shape) and/or `notify.command` (run on this machine, the JSON document on stdin).

Delivery never holds up or fails the run: each message goes on a thread of its own
(executor/beside.py), is tried `Delivery.tries` times with a growing pause and a timeout per try, and
what became of it is one line of the run's `notify.log` (`.clusterctl/runs/<run id>/`). The
inventory's secret values are masked in everything sent (ground/masking.py, the one masking of
text read from the nodes), and the webhook's URL, itself a credential, is logged with its path masked.
At the end of the command the notifier waits for deliveries in flight at most `Delivery.flush_s`."""
from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from clusterctl.executor.beside import Beside, backoff
from clusterctl.ground.masking import Masker
from clusterctl.inventory.notify_section import masked_url
from clusterctl.models import NotifySettings
from clusterctl.observe.messages import Message, json_payload, payload

LOG_NAME = "notify.log"


@dataclass(frozen=True)
class Delivery:
    tries: int = 4
    first_pause_s: float = 1.0  # then 2, 4 s
    timeout_s: float = 10.0  # one try: connect + answer, or the command's run
    flush_s: float = 20.0  # the most the end of a command waits for deliveries in flight


class Notifier:
    """One command's notifications. `log_dir(run_id)`: where that run's notify.log goes."""

    def __init__(self, settings: Optional[NotifySettings], log_dir: Callable[[str], Path],
                 mask: Masker = Masker(), delivery: Delivery = Delivery()):
        self.settings, self.log_dir, self.mask, self.delivery = settings, log_dir, mask, delivery
        self._beside, self._log_lock = Beside(), threading.Lock()
        self.sent: list[Message] = []  # what was handed to delivery (the tests and `report` read it)

    def wanted(self, event: str) -> bool:
        return self.settings is not None and event in self.settings.on

    def send(self, message: Message) -> None:
        """Hand `message` to delivery and return at once (nothing when its event is not wanted)."""
        if not self.wanted(message.event):
            return
        self.sent.append(message)
        settings = self.settings
        if settings.webhook:
            body = self.mask.json_text(json.dumps(payload(message, settings.format))).encode()  # stays JSON
            self._beside.start(lambda: self._deliver(message, "webhook", lambda: _post(settings.webhook, body,
                                                                                      self.delivery.timeout_s)))
        if settings.command:
            body = self.mask.json_text(json.dumps(json_payload(message))).encode()
            self._beside.start(lambda: self._deliver(message, "command", lambda: _run(settings.command, body,
                                                                                      self.delivery.timeout_s)))

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Wait for the deliveries in flight (at most `timeout`, default Delivery.flush_s); True when none is left."""
        return self._beside.wait(self.delivery.flush_s if timeout is None else timeout)

    def __enter__(self) -> "Notifier":
        return self

    def __exit__(self, *exc) -> None:
        self.flush()

    def _deliver(self, message: Message, channel: str, try_once: Callable[[], Optional[str]]) -> None:
        """Try until delivered or the tries are spent; a line of notify.log either way. Never raises."""
        problem = "not tried"
        for attempt in backoff(self.delivery.tries, self.delivery.first_pause_s):
            try:
                problem = try_once()
            except Exception as error:  # whatever delivery meets, the run goes on: said in the log
                problem = f"{type(error).__name__}: {error}"
            if problem is None:
                self._log(message, f"{channel} {self._target(channel)}: delivered (try {attempt + 1})")
                return
        self._log(message, f"{channel} {self._target(channel)}: NOT delivered after {self.delivery.tries} "
                           f"tries: {problem}")

    def _target(self, channel: str) -> str:
        if channel == "webhook":
            return masked_url(self.settings.webhook)
        return self.settings.command[0]

    def _log(self, message: Message, text: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        try:
            folder = self.log_dir(message.run_id)
            folder.mkdir(parents=True, exist_ok=True)
            with self._log_lock, open(folder / LOG_NAME, "a") as log:
                log.write(self.mask(f"{stamp} {message.event}: {text}") + "\n")
        except OSError:
            pass  # nowhere to say it: the run is not to fail for its notifications


def _post(url: str, body: bytes, timeout_s: float) -> Optional[str]:
    """None when the receiver took it (2xx); else what went wrong."""
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": "clusterctl-notify"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return None if 200 <= answer.status < 300 else f"HTTP {answer.status}"
    except urllib.error.HTTPError as error:
        return f"HTTP {error.code} {error.reason}"
    except (urllib.error.URLError, OSError) as error:
        return f"{type(error).__name__}: {getattr(error, 'reason', error)}"


def _run(argv: tuple[str, ...], body: bytes, timeout_s: float) -> Optional[str]:
    try:
        done = subprocess.run(list(argv), input=body, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"{argv[0]} did not end in {timeout_s:.0f} s"
    except OSError as error:
        return f"{argv[0]}: {error.strerror or error}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return f"{argv[0]} exited {done.returncode}: {said[0][:200]}"
    return None
