"""py-spy shipped once per node per run: which nodes keep it, and its removal when the run ends.

The straggler watch samples every node round after round; shipping the 2.8 MB gzipped binary each
round would move ~280 MB per round over 100 nodes for a file that has not changed. So the first
round of a run ships it and the node keeps it (watch/sampler.py's script), and later rounds send only
its sha256: the node checks the kept file against it before running it, and a file changed (or
gone) on the node is never run: the node says so and asks for the binary, shipped again next round.

Where the node keeps it: `clusterctl-pyspy.<cluster>.<run id>/py-spy.<sha256>` (directory and file
mode 700, owned by the user the script runs as: root through sudo, else the SSH user) under the
first of ${TMPDIR:-/tmp}, /var/tmp, /dev/shm, $HOME that lets it run: the places the script copied
it to already. Not the run's directory: the script runs on the host, which may not see that
directory (a container without a bind mount); run directories outlive the run (collect-logs reads
them), and `job.outputs` may be a shared, noexec filesystem. The run's end removes the directory
(`forget`, one round trip per node it was shipped to; a round still under way then removes it
itself), and so does every kill of the run's processes (modules/process.py's scan: a failed run's
stop, `clusterctl stop`, and `clusterctl down`, which removes whatever a killed controller left).
"""
from __future__ import annotations

import threading
from typing import Optional

from clusterctl.executor import Connections, for_each_host
from clusterctl.models import Command, Host, HostResult, HostStatus
from clusterctl.modules.process import REMOVE_KEPT, kept_pyspy_name

# the most the run's end waits for a watch's round still under way before `forget` (a round ends with its ranks,
# within a sample): a first round that outlived the run kept its copy after the removal, and nobody removed it
ROUND_SETTLE_S = 3.0

_FORGET = "kept=$1\n" + REMOVE_KEPT + "\nexit 0\n"  # $1 the kept directory's name


def forget_command(pattern: str) -> Command:
    return Command(("sh", "-c", _FORGET, "clusterctl-pyspy-forget", pattern), timeout=30, privileged=True)


class KeptPySpy:
    """One run's py-spy on its nodes, shared by the straggler and stall watches (threads: a lock)."""

    def __init__(self, cluster: str, run_id: str):
        self.name = kept_pyspy_name(cluster, run_id)
        self._held: dict[str, str] = {}  # host -> the digest it said it keeps
        self._shipped: dict[str, Host] = {}  # every host shipped to: `forget` asks these
        self._closed = False  # the run ended: nothing more is kept
        self._dumps: dict[str, dict[int, str]] = {}  # host -> pid -> its rank's last good dump (a straggler round's)
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._closed

    def held(self, host: str, expected: str) -> bool:
        """Whether `host` keeps the binary of digest `expected`: then only the digest is sent."""
        with self._lock:
            return bool(expected) and self._held.get(host) == expected

    def shipping(self, host: Host) -> None:
        with self._lock:
            self._shipped[host.name] = host

    def heard(self, transport, host: str, kept: str, asks: bool) -> None:
        """What the node said: the digest it keeps now (""), or that it asks for the binary. A round
        that ended after the run did removes what it kept itself (`forget` may have missed it)."""
        with self._lock:
            if kept and not asks and not self._closed:
                self._held[host] = kept
            else:
                self._held.pop(host, None)
            late = self._closed and bool(kept)
        if late:
            transport.run(forget_command(self.name))

    def dumps(self, host: str) -> dict[int, str]:
        """The last good py-spy dump of each rank of `host` (by pid): a later round's node says `same` for a rank
        not run since, and the stack is read from here (watch/sampler.py)."""
        with self._lock:
            return dict(self._dumps.get(host, {}))

    def dumped(self, host: str, dumps: dict[int, str]) -> None:
        with self._lock:
            if not self._closed:
                self._dumps[host] = dict(dumps)

    def forget(self, connections: Connections) -> dict[str, HostResult]:
        """Remove the kept binary from every node it was shipped to (the run's end)."""
        with self._lock:
            hosts = list(self._shipped.values())
            self._shipped.clear()
            self._held.clear()
            self._dumps.clear()
            self._closed = True
        if not hosts:
            return {}
        command = forget_command(self.name)

        def action(transport, host: Host) -> HostResult:
            result = transport.run(command)
            return HostResult(host.name, HostStatus.OK if result.exit_code == 0 else HostStatus.FAILED,
                              result.stdout.strip() or result.stderr.strip()[-200:])

        return for_each_host(hosts, action, connections)


def ship_now(kept: Optional[KeptPySpy], host: Host, expected: str) -> bool:
    """Whether this round sends the binary to `host` (always without a KeptPySpy: `clusterctl stacks`)."""
    if kept is None or not expected or kept.closed:
        return True
    if kept.held(host.name, expected):
        return False
    kept.shipping(host)
    return True
