"""The executor with a fake transport: results are values, failures stay on their host."""
from __future__ import annotations

import threading
import time

from clusterctl.errors import UnreachableError
from clusterctl.executor import Connections, PlannedTask, for_each_host, run_commands, run_plan
from clusterctl.models import Command, CommandResult, Host, HostResult, HostStatus, Inventory, Skip


class FakeTransport:
    """Answers commands from a table: argv[0] -> (exit code, stdout)."""

    def __init__(self, host: Host, answers=None, delay: float = 0.0):
        self.host = host
        self.answers = answers or {}
        self.delay = delay
        self.ran: list[tuple[str, ...]] = []

    def run(self, cmd: Command, on_line=None) -> CommandResult:
        time.sleep(self.delay)
        self.ran.append(cmd.argv)
        code, out = self.answers.get(cmd.argv[0], (0, f"{self.host.name}\n"))
        if on_line:
            for line in out.splitlines():
                on_line("stdout", line)
        return CommandResult(code, out, "", self.delay)

    def close(self):
        pass


def hosts(n: int) -> list[Host]:
    return [Host(f"h{i}", f"198.18.0.{10 + i}") for i in range(1, n + 1)]


def fake_connect(down=(), answers=None, delay=0.0, made=None):
    def connect(host: Host):
        if host.name in down:
            raise UnreachableError(f"cannot reach {host.address}:22", where=host.name)
        transport = FakeTransport(host, (answers or {}).get(host.name), delay)
        if made is not None:
            made[host.name] = transport
        return transport

    return connect


def test_an_unreachable_host_is_a_result_and_the_others_carry_on():
    connections = Connections(fake_connect(down={"h2"}))
    results = for_each_host(hosts(3), lambda t, h: run_commands(t, h, [Command(("hostname",))]), connections)
    assert [r.status for r in results.values()] == [HostStatus.OK, HostStatus.UNREACHABLE, HostStatus.OK]
    assert "cannot reach" in results["h2"].detail
    assert results["h1"].stdout == "h1\n"


def test_a_crashing_action_fails_only_its_host():
    def action(transport, host):
        if host.name == "h1":
            raise RuntimeError("boom")
        return HostResult(host.name, HostStatus.OK)

    results = for_each_host(hosts(2), action, Connections(fake_connect()))
    assert results["h1"].status is HostStatus.FAILED and "boom" in results["h1"].detail
    assert results["h2"].status is HostStatus.OK


def test_hosts_run_in_parallel_within_the_pool_width():
    active, peak, lock = [0], [0], threading.Lock()

    def action(transport, host):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return HostResult(host.name, HostStatus.OK)

    for_each_host(hosts(20), action, Connections(fake_connect()), width=8)
    assert peak[0] == 8


def test_one_connection_per_host_is_reused_across_steps():
    made = {}
    connections = Connections(fake_connect(made=made))
    for _ in range(3):
        for_each_host(hosts(2), lambda t, h: run_commands(t, h, [Command(("true",))]), connections)
    assert len(made) == 2
    assert len(made["h1"].ran) == 3


def test_commands_stop_at_the_first_failure():
    connections = Connections(fake_connect(answers={"h1": {"false": (1, "")}}))
    commands = [Command(("echo", "a")), Command(("false",)), Command(("echo", "never"))]
    result = for_each_host(hosts(1), lambda t, h: run_commands(t, h, commands), connections)["h1"]
    assert result.status is HostStatus.FAILED
    assert result.exit_code == 1 and "exit 1: false" in result.detail
    transport = connections.get(hosts(1)[0])
    assert transport.ran == [("echo", "a"), ("false",)]


def test_a_failed_host_leaves_the_play_and_later_tasks_skip_it(tmp_path):
    inventory = Inventory("t", tuple(hosts(3)))
    connections = Connections(fake_connect(answers={"h2": {"false": (1, "")}}))
    modules = {
        "maybe_fail": lambda ctx: [Command(("false",) if ctx.host.name == "h2" else ("true",))],
        "echo": lambda ctx: [Command(("echo", ctx.host.name), changes=True)],
        "skip": lambda ctx: Skip("nothing to do"),
    }
    tasks = [PlannedTask("one", "maybe_fail", {}), PlannedTask("two", "echo", {}), PlannedTask("three", "skip", {})]
    report = run_plan(tasks, inventory, connections, modules.__getitem__, log_dir=tmp_path)
    assert report.hosts["h2"].status is HostStatus.FAILED
    assert "h2" not in report.tasks[1].results
    assert report.hosts["h1"].status is HostStatus.CHANGED
    assert report.tasks[2].results["h3"].status is HostStatus.SKIPPED
    assert not report.ok
    assert (tmp_path / "02-two" / "h1.log").read_text().startswith("$ echo h1")


def test_master_and_workers_selectors_follow_the_inventory():
    inventory = Inventory("t", tuple(hosts(3)))
    seen = []
    modules = {"note": lambda ctx: seen.append(ctx.host.name) or Skip("noted")}
    run_plan([PlannedTask("m", "note", {}, hosts="master")], inventory, Connections(fake_connect()), modules.__getitem__)
    run_plan([PlannedTask("w", "note", {}, hosts="workers")], inventory, Connections(fake_connect()), modules.__getitem__)
    assert seen[0] == "h1" and sorted(seen[1:]) == ["h2", "h3"]


def test_past_max_open_a_nodes_connection_lives_for_its_action_only():
    made: dict = {}
    closed: list = []

    def connect(host):
        transport = FakeTransport(host)
        transport.close = lambda name=host.name: closed.append(name)
        made.setdefault(host.name, []).append(transport)
        return transport

    connections = Connections(connect, max_open=4)
    for _ in range(3):  # three steps on ten nodes
        results = for_each_host(hosts(10), lambda t, h: run_commands(t, h, [Command(("true",))]), connections, width=10)
        assert all(r.succeeded for r in results.values())
    kept = [name for name, transports in made.items() if len(transports) == 1]
    assert len(kept) == 4 and connections.peak_open <= 10  # the first four reused by every step
    assert all(len(made[name]) == 3 for name in made if name not in kept)  # the others: one per step
    assert sorted(closed) == sorted(name for name in made if name not in kept for _ in range(3))
    connections.close()
    assert len(closed) == 6 * 3 + 4


def test_a_connection_past_max_open_stays_while_another_action_still_uses_it():
    connections = Connections(fake_connect(), max_open=0)
    host = hosts(1)[0]
    first = connections.acquire(host)
    second = connections.acquire(host)
    assert first is second
    connections.release(host.name)
    assert connections.acquire(host) is first  # still open: one user left
    connections.release(host.name)
    connections.release(host.name)
    assert connections.acquire(host) is not first  # closed with its last user, opened again


def test_the_descriptor_limit_is_lifted_within_the_hard_limit():
    import resource

    from clusterctl.executor import raise_descriptor_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        got = raise_descriptor_limit(2048)
        assert got == resource.getrlimit(resource.RLIMIT_NOFILE)[0] == (2048 if hard == resource.RLIM_INFINITY
                                                                      else min(2048, hard))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_connections_warmed_in_the_background_are_the_ones_used_and_a_failure_is_said_where_used():
    """Issue 52: `run` and `exec` open the connections while they still import and plan."""
    calls, gate = [], threading.Event()

    def connect(host: Host):
        calls.append(host.name)
        gate.wait(5)  # still opening when the command first asks for it
        if host.name == "h2":
            raise UnreachableError(f"cannot reach {host.address}:22", where=host.name)
        return FakeTransport(host)

    connections = Connections(connect)
    connections.warm(hosts(3))
    connections.warm(hosts(3))  # under way: not opened twice
    gate.set()
    results = for_each_host(hosts(3), lambda t, h: run_commands(t, h, [Command(("hostname",))]), connections)
    assert sorted(calls) == ["h1", "h2", "h3"]
    assert [r.status for r in results.values()] == [HostStatus.OK, HostStatus.UNREACHABLE, HostStatus.OK]
    assert "cannot reach" in results["h2"].detail
    connections.warm(hosts(3))  # open or failed already: nothing more
    assert sorted(calls) == ["h1", "h2", "h3"]


def test_warming_opens_no_more_than_the_connections_kept_open():
    made = {}
    connections = Connections(fake_connect(made=made), max_open=2)
    connections.warm(hosts(5))
    for_each_host(hosts(2), lambda t, h: run_commands(t, h, [Command(("hostname",))]), connections)
    deadline = time.monotonic() + 5
    while len(made) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(made) == ["h1", "h2"]
