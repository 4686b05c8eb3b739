"""executor.Streams: many hosts' long-running commands read by one thread (the live log of a run,
`logs --follow`). Real local processes through LocalTransport (connection: local); an unreachable
host through a connect that fails, as in test_executor.py."""
from __future__ import annotations

import threading
import time

from clusterctl.errors import UnreachableError
from clusterctl.executor import Connections, Streams
from clusterctl.models import Command, CommandResult, Host, HostResult, HostStatus
from clusterctl.transport import LocalTransport


def local_hosts(n: int) -> list[Host]:
    return [Host(f"n{i}", "127.0.0.1", connection="local") for i in range(n)]


def connect(down=()):
    def make(host: Host):
        if host.name in down:
            raise UnreachableError("cannot reach 198.18.0.9:22", where=host.name)
        return LocalTransport(host).open()

    return make


class Collected:
    def __init__(self):
        self.out: dict[str, bytes] = {}
        self.ended: dict[str, CommandResult] = {}
        self.threads: set[str] = set()

    def on_output(self, name: str, data: bytes) -> None:
        self.threads.add(threading.current_thread().name)
        self.out[name] = self.out.get(name, b"") + data

    def on_end(self, name: str, result: CommandResult) -> HostResult:
        self.ended[name] = result
        return HostResult(name, HostStatus.OK if result.ok else HostStatus.FAILED, detail=result.stderr)


def test_every_hosts_output_arrives_whole_in_one_thread_with_its_exit_status_and_stderr():
    seen = Collected()
    script = 'for i in 1 2 3; do echo "$0 line $i"; sleep 0.05; done; echo "$0 says bye" >&2; exit ${0#n}'
    hosts = local_hosts(12)
    streams = Streams(hosts, lambda h: Command(("sh", "-c", script, h.name)), seen.on_output, seen.on_end,
                      Connections(connect()))
    assert streams.wait(20)
    assert seen.threads == {"streams"}  # one reading thread, whatever the number of hosts
    for i, host in enumerate(hosts):
        assert seen.out[host.name] == b"".join(f"{host.name} line {k}\n".encode() for k in (1, 2, 3))
        assert seen.ended[host.name].exit_code == i
        assert seen.ended[host.name].stderr == f"{host.name} says bye\n"
    assert streams.results["n0"].status is HostStatus.OK
    assert streams.results["n3"].status is HostStatus.FAILED


def test_an_unreachable_host_is_a_value_and_the_others_stream_on():
    seen = Collected()
    streams = Streams(local_hosts(3), lambda h: Command(("echo", h.name)), seen.on_output, seen.on_end,
                      Connections(connect(down={"n1"})))
    assert streams.wait(20)
    assert streams.results["n1"].status is HostStatus.UNREACHABLE
    assert "cannot reach" in streams.results["n1"].detail
    assert seen.out == {"n0": b"n0\n", "n2": b"n2\n"}


def test_a_command_past_its_timeout_is_ended_and_reported_timed_out():
    seen = Collected()
    started = time.monotonic()
    streams = Streams(local_hosts(2), lambda h: Command(("sh", "-c", "echo started; exec sleep 30"), timeout=0.5),
                      seen.on_output, seen.on_end, Connections(connect()))
    assert streams.wait(10)
    assert time.monotonic() - started < 5
    assert all(r.timed_out for r in seen.ended.values())
    assert seen.out == {"n0": b"started\n", "n1": b"started\n"}


def test_a_silent_stream_does_not_hold_the_others_and_close_ends_it():
    seen = Collected()
    commands = {"n0": ("sleep", "30"), "n1": ("sh", "-c", "echo quick")}
    streams = Streams(local_hosts(2), lambda h: Command(commands[h.name], stdin_open=True), seen.on_output,
                      seen.on_end, Connections(connect()))
    deadline = time.monotonic() + 10
    while "n1" not in seen.ended and time.monotonic() < deadline:
        time.sleep(0.02)
    assert seen.out == {"n1": b"quick\n"} and "n0" not in seen.ended
    streams.close()
    assert streams.wait(5)
    assert streams.results["n0"].status is HostStatus.FAILED  # stopped following, its command ended


def test_output_far_larger_than_a_pipe_buffer_arrives_in_order():
    seen = Collected()
    script = "i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done"
    streams = Streams(local_hosts(3), lambda h: Command(("sh", "-c", script)), seen.on_output, seen.on_end,
                      Connections(connect()))
    assert streams.wait(60)
    expected = "".join(f"line-{i}\n" for i in range(20000)).encode()
    assert all(seen.out[name] == expected for name in ("n0", "n1", "n2"))
