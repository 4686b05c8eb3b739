"""Shared by the three tiers, each a folder with its own rules (README's test line; Makefile's test-unit,
test-local, test-rehearsal):
- tests/unit/: no process, no socket; under a minute with only `.[test]` installed (its conftest holds it);
- tests/local/: node programs as processes, `connection: local` runs, loopback sockets; no root;
- tests/rehearsal/: the rehearsal cluster (Docker, sshd, root; its conftest's session `sandbox`).
The helpers beside this file (clusterctl_helpers.py, ssh_testbed.py, json_documents.py, reliability.py,
browser.py, loopback_receiver.py) and fixtures/ serve every tier. `reliability`: declare a row of
docs/reliability.md (tests/reliability.py), merged into `.pytest_reliability.json` at the end of the session.
Property tests (hypothesis) run under the profile CLUSTERCTL_HYPOTHESIS names: `quick` (the default: a plain
pytest, `make test-unit`) runs a quarter of each test's examples, `full` (`make test`, so CI) all of them;
a test that sets its own count says it with clusterctl_helpers.examples(N)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("full", max_examples=100)  # hypothesis' own default
settings.register_profile("quick", max_examples=25)
settings.load_profile(os.environ.get("CLUSTERCTL_HYPOTHESIS", "quick"))

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared helpers, imported by name from every tier


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


@pytest.fixture(scope="session", autouse=True)
def json_documents_match_their_schemas():
    """Every `--json` document and run record the suite makes, checked against docs/schemas/."""
    from json_documents import watch

    with watch():
        yield
