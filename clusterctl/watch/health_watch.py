"""The passive health watch of an attached run (issue 36): every WATCH_EVERY_S, one round trip per
running node reads what the node says of its GPUs, and what is worse than before becomes events of
the health record (health/watch.py parses; the run flow records): a hard one quarantines the node
while the run goes on.

The round trip (one batch, on the host: the kernel log and the driver are the host's):
- `nvidia-smi --query-gpu=<WATCH_QUERY> --format=csv,nounits` (absent on a CPU node: nothing said)
- the kernel log's NVRM lines since the run started (dmesg, privileged where kernel.dmesg_restrict
  is set; else `journalctl -k`; neither readable: nothing said), stamped lines compared to the
  node's boot time as watch/kernel_log.py does
- `dcgmi health -c` where DCGM is installed
An Xid line is said once per run (its text without the kernel's timestamp), a GPU counter only when
it goes up since the node's last sample."""
from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import Callable, Optional, Sequence

from clusterctl.executor import Background, Connections, Event, OnEvent, run_commands
from clusterctl.health import watch
from clusterctl.health.events import Event as HealthEvent
from clusterctl.health.events import GpuId
from clusterctl.models import Command, Host, HostResult
from clusterctl.transport import batch_command, split_batch

WATCH_EVERY_S = 30.0
# the poll loop waits for the sample, and the polls renew the nodes' leases (agent.LEASE_S, 15 s): a node
# whose nvidia-smi hangs (a GPU fallen off the bus does that) must not cost the run its leases
SAMPLE_TIMEOUT_S = 5.0
# $1: the run's start (unix time). Lines stamped [seconds since boot] at or after it; an unstamped
# line (the rest of a multi-line notice) goes with the line before it.
_KERNEL_SINCE = r'''since=$1; now=$(date +%s); up=$(cut -d. -f1 /proc/uptime); boot=$((now - up))
out=$(dmesg 2>/dev/null) || out=$(journalctl -k -q -o short-monotonic --no-pager 2>/dev/null) || { echo unreadable; exit 0; }
printf '%s\n' "$out" | awk -v since="$since" -v boot="$boot" '
/^\[/ { ts = $0; sub(/^\[ */, "", ts); sub(/[.\]].*$/, "", ts); keep = (ts ~ /^[0-9]+$/) && (boot + ts >= since) }
keep && /NVRM|fallen off the bus/' | tail -n 50'''
_DCGM = 'command -v dcgmi >/dev/null 2>&1 || exit 0; dcgmi health -c'
_STAMP = re.compile(r"^\[[^\]]*\]\s*")

Recorder = Callable[[Sequence[HealthEvent], dict], Optional[str]]  # (events, {host: [GpuId]}) -> a failure said


def sample_command(since: float) -> Command:
    smi = Command(("nvidia-smi", "--query-gpu=" + ",".join(watch.WATCH_QUERY), "--format=csv,nounits"),
                  timeout=SAMPLE_TIMEOUT_S)
    kernel = Command(("sh", "-c", _KERNEL_SINCE, "clusterctl-watch", str(int(since))), timeout=SAMPLE_TIMEOUT_S,
                     privileged=True)
    dcgm = Command(("sh", "-c", _DCGM), timeout=SAMPLE_TIMEOUT_S)
    return batch_command([("smi", smi), ("kernel", kernel), ("dcgm", dcgm)], timeout=SAMPLE_TIMEOUT_S)


class PassiveWatch:
    """Called on every poll of the run (`tick`); samples the nodes every `every_s`, the first time at once."""

    def __init__(self, connections: Connections, since: float, record: Recorder, on_event: OnEvent,
                 run_id: Optional[str] = None, every_s: float = WATCH_EVERY_S):
        self.connections, self.since, self.record, self.on_event = connections, since, record, on_event
        self.run_id = run_id
        self.every_s = every_s
        self._last: Optional[float] = None
        self._sampling: Optional[Background] = None  # the sample under way
        self._samples: dict[str, tuple] = {}  # host -> its last GpuSamples
        self._xids: set[tuple[str, str]] = set()  # (host, line without its stamp): said already
        self._said: set[tuple] = set()  # DCGM's events said already

    def tick(self, hosts: Sequence[Host]) -> None:
        """In the background (executor.Background): the run's loop never waits for a sample, so a node cut off
        mid-sample holds no poll of the others back (a blocking sample once made a live node look lost)."""
        if self._sampling is not None:
            if self._sampling.wait(0):
                results, self._sampling = self._sampling.results, None
                self._judge(results)
            return
        now = time.monotonic()
        if not hosts or (self._last is not None and now - self._last < self.every_s):
            return
        self._last = now
        command = sample_command(self.since)
        self._sampling = Background(list(hosts), lambda t, h: run_commands(t, h, [command]), self.connections)

    def _judge(self, results: dict) -> None:
        events, gpus = [], {}
        for name, result in results.items():
            found, ids = self.read(name, result)
            events += [replace(event, run_id=self.run_id) for event in found]
            if ids:
                gpus[name] = ids
        failure = self.record(events, gpus) if events or gpus else None
        for event in events:
            self.on_event(Event("note", event.host, f"health: {event.kind} ({event.cause or event.evidence})"[:300]))
        if failure:
            self.on_event(Event("note", text=f"health: {failure}"))

    def read(self, host: str, result: HostResult) -> tuple[list[HealthEvent], list[GpuId]]:
        """The events of one node's sample, and the GPUs it reported."""
        if not result.succeeded:
            return [], []
        sections = split_batch(result.stdout)
        reading = watch.parse_smi_csv(sections.get("smi", ""))
        samples = reading.gpus if reading.unreadable is None else ()
        events = watch.sample_events(host, samples, self._samples.get(host, ()))
        if samples:
            self._samples[host] = samples
        events += watch.xid_events(host, self._new_xids(host, sections.get("kernel", "")), samples)
        health = watch.parse_dcgm_health(sections.get("dcgm", ""))
        if health.unreadable is None:
            events += self._once(watch.dcgm_events(host, health, samples))
        return events, [s.gpu for s in samples]

    def _once(self, events: list[HealthEvent]) -> list[HealthEvent]:
        """DCGM says a standing condition at every read: each one is an event once per run."""
        fresh = [e for e in events if (e.host, e.kind, e.gpu, e.evidence) not in self._said]
        self._said |= {(e.host, e.kind, e.gpu, e.evidence) for e in fresh}
        return fresh

    def _new_xids(self, host: str, text: str) -> list:
        fresh = []
        for xid in watch.parse_xid_lines(text):
            key = (host, _STAMP.sub("", xid.line))
            if key not in self._xids:
                self._xids.add(key)
                fresh.append(xid)
        return fresh
