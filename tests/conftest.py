"""Shared fixtures. `sandbox`: one rehearsal cluster (3 nodes with Docker Engines) for the
whole session, torn down at its end. Tests marked `sandbox_teardown` change or remove that
cluster, so they run after every other test. `reliability`: declare a row of
docs/reliability.md (tests/reliability.py), written out at the end of the session."""
from __future__ import annotations

import os
import sys

import pytest


def sandbox_skip_reason() -> str | None:
    if os.environ.get("CLUSTERCTL_SKIP_SANDBOX") == "1":
        return "CLUSTERCTL_SKIP_SANDBOX=1"
    if not sys.platform.startswith("linux"):
        return "the sandbox needs Linux (network namespaces)"
    if os.geteuid() != 0:
        return "the sandbox needs root"
    return None


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "sandbox_teardown: resizes or removes the session sandbox; runs after all other tests")


_RECORDER = None


def _recorder():
    global _RECORDER
    if _RECORDER is None:
        from reliability import Recorder

        _RECORDER = Recorder()
    return _RECORDER


@pytest.fixture
def reliability(request):
    """`reliability(case, expected, section=None)` -> a row to `.observe(observed, seconds)` (tests/reliability.py)."""
    return lambda case, expected, section=None: _recorder().declare(request.node.nodeid, case, expected, section)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when == "call" or (report.when == "setup" and not report.passed):
        message = str(report.longrepr).strip().splitlines()[-1][:300] if report.failed and report.longrepr else ""
        _recorder().outcome(item.nodeid, report.outcome, report.duration, message)


def pytest_sessionfinish(session):
    if _RECORDER is not None:
        _RECORDER.write()


def pytest_collection_modifyitems(config, items):
    last = [item for item in items if item.get_closest_marker("sandbox_teardown")]
    if last:
        items[:] = [item for item in items if not item.get_closest_marker("sandbox_teardown")] + last


@pytest.fixture(scope="session", autouse=True)
def json_documents_match_their_schemas():
    """Every `--json` document and run record the suite makes, checked against docs/schemas/."""
    from json_documents import watch

    with watch():
        yield


@pytest.fixture(scope="session")
def sandbox():
    """A 3-node sandbox with a Docker Engine per node (clusterctl.sandbox.Sandbox)."""
    reason = sandbox_skip_reason()
    if reason:
        pytest.skip(reason)
    from clusterctl.sandbox import down, up

    handle = up(3, docker=True)
    try:
        yield handle
    finally:
        down(handle.state_dir)


class _Impersonations:
    """variant name -> the node showing it; the node is made to impersonate the variant when asked
    (Sandbox.impersonate: its sessions' PATH and env, its /sys/class), and keeps it until another
    variant takes the node."""

    NODES = {"h100x8_nvlink_8ib": "node1", "ib_all_down": "node2", "ibpanic": "node3", "zh_cn_shm64": "node1",
             "xid79_dmesg": "node3", "h100x4_metrics": "node3"}  # node3: reached as root (a sudo node's dmesg is the real one)

    def __init__(self, sandbox, root):
        self.sandbox, self.root, self.current = sandbox, root, {}

    def __getitem__(self, variant: str) -> str:
        node = self.NODES[variant]
        if self.current.get(node) != variant:
            self.sandbox.impersonate(node, self.root / variant)
            self.current[node] = variant
        return node

    def restore(self) -> None:
        for node in list(self.current):
            self.sandbox.impersonate(node, None)
        self.current.clear()


@pytest.fixture(scope="module")
def hardware_sandbox(sandbox):
    """The session sandbox, whose `node_of[variant]` names a node impersonating that stand-in variant
    of tests/fixtures/hardware/ (set up on first use, undone at the end of the module)."""
    from pathlib import Path

    impersonations = _Impersonations(sandbox, Path(__file__).resolve().parent / "fixtures" / "hardware")
    sandbox.node_of = impersonations
    try:
        yield sandbox
    finally:
        impersonations.restore()
        del sandbox.node_of
