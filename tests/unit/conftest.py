"""The unit tier: tests that start no process and open no socket, so that the whole tier runs in under a
minute with nothing but `pip install -e '.[test]'` (no torch, no deepspeed, no sshd, no root).

Held, not hoped for: while a test of this folder runs (its fixtures included), starting a process
(subprocess, os.fork/posix_spawn/system/exec, multiprocessing) or creating a socket fails that test with a
message saying so; a test that grows a process fails loudly and goes to tests/local/. A call made on a
thread, or caught by the code under test, still fails the test when it ends."""
from __future__ import annotations

import contextlib
import multiprocessing.util
import os
import socket
import subprocess

import pytest
# urllib3 (under the Docker SDK) creates an IPv6 socket once, at import, to learn whether the host has IPv6:
# imported here, before any guard, so a unit test that is the first to import it does not count as opening one
import urllib3.util.connection  # noqa: F401

WHERE = "tests/unit/ starts no process and opens no socket"
FIX = "move the test to tests/local/ (processes, loopback sockets) or tests/rehearsal/ (sshd, Docker, root)"
_PROCESS_CALLS = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve")


class _Guard:
    """The calls a unit test may not make, replaced while one of its phases runs; `seen` says what it tried."""

    def __init__(self):
        self.seen: list[str] = []

    def refuse(self, what: str):
        self.seen.append(what)
        pytest.fail(f"{WHERE}, and this test tried {what}: {FIX}", pytrace=False)

    @contextlib.contextmanager
    def installed(self):
        guard = self
        originals = [(os, name, getattr(os, name)) for name in _PROCESS_CALLS]
        originals += [(subprocess.Popen, "_execute_child", subprocess.Popen._execute_child),
                      (multiprocessing.util, "spawnv_passfds", multiprocessing.util.spawnv_passfds),
                      (socket.socket, "__init__", socket.socket.__init__)]
        for name in _PROCESS_CALLS:
            setattr(os, name, self._refusing_os_call(name))

        def execute_child(popen, args, *rest, **kwargs):
            guard.refuse(f"to start a process: {str(args)[:200]}")

        def spawnv_passfds(path, args, passfds):
            guard.refuse(f"to start a multiprocessing process: {path}")

        socket_init = socket.socket.__init__

        def init(sock, family=-1, type=-1, proto=-1, fileno=None):
            if fileno is None:  # a new socket; an existing descriptor wrapped (socketpair's halves) is not one
                guard.refuse(f"to open a socket (family {family}, type {type})")
            socket_init(sock, family, type, proto, fileno)

        subprocess.Popen._execute_child = execute_child
        multiprocessing.util.spawnv_passfds = spawnv_passfds
        socket.socket.__init__ = init
        try:
            yield
        finally:
            for owner, name, original in originals:
                setattr(owner, name, original)

    def _refusing_os_call(self, name: str):
        def refused(*args, **kwargs):
            self.refuse(f"os.{name}{str(args)[:200]}")
        # named as the original, so that pickle still finds `os.system` by reference while it is replaced
        refused.__module__, refused.__name__, refused.__qualname__ = "os", name, name
        return refused


_GUARD = pytest.StashKey[_Guard]()


def _guarded(item):
    return item.stash.setdefault(_GUARD, _Guard()).installed()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """What a test tried where no exception reached pytest (a thread, a broad `except`) fails it too."""
    report = yield
    guard = item.stash.get(_GUARD, None)
    if guard is not None and guard.seen:
        if report.passed:
            report.outcome = "failed"
            report.longrepr = f"{WHERE}, and this test tried {guard.seen[0]}: {FIX}"
        guard.seen.clear()
    return report
