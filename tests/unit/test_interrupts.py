"""An interrupt Python swallowed (raised inside a finalizer or a weakref callback, where exceptions are only printed
as ignored) is raised again: by the pool's wait within a slice, and by the CLI once the command returns. Seen on the
rehearsal cluster: `Exception ignored in: WeakSet._remove ... KeyboardInterrupt`, then `up` exited 0."""
from __future__ import annotations

import gc
import signal
import sys
import time
from types import SimpleNamespace

import pytest

from clusterctl import interrupts
from clusterctl.executor import Connections, for_each_host
from clusterctl.models import Host, HostResult, HostStatus


class _InterruptedWhileFinalized:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)  # the handler raises here, inside a finalizer: Python ignores it


@pytest.fixture
def installed():
    previous = interrupts.install()
    yield
    interrupts.restore(previous)


def test_a_keyboard_interrupt_swallowed_by_a_finalizer_is_raised_again_once(installed):
    _InterruptedWhileFinalized()
    gc.collect()
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_if_swallowed()
    interrupts.raise_if_swallowed()  # once: the record is spent


def test_other_unraisable_exceptions_still_reach_the_previous_hook(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    previous = interrupts.install()
    try:
        sys.unraisablehook(SimpleNamespace(exc_type=ValueError, exc_value=ValueError("x"), exc_traceback=None,
                                           err_msg="Exception ignored in", object=None))
        interrupts.raise_if_swallowed()
    finally:
        interrupts.restore(previous)
    assert [type(u.exc_value) for u in seen] == [ValueError] and sys.unraisablehook == seen.append


def test_the_pools_wait_raises_a_swallowed_interrupt_without_waiting_for_the_hosts(installed):
    def action(transport, host):
        if host.name == "slow":
            sys.unraisablehook(SimpleNamespace(exc_type=KeyboardInterrupt, exc_value=KeyboardInterrupt(),
                                               exc_traceback=None, err_msg="Exception ignored in", object=None))
            time.sleep(3)
        return HostResult(host.name, HostStatus.OK)

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        for_each_host([Host("slow", "198.18.0.1")], action, Connections(lambda host: SimpleNamespace(close=lambda: None)))
    assert time.monotonic() - started < 2


def test_restore_puts_back_the_handlers_and_the_hook():
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), sys.unraisablehook)
    interrupts.restore(interrupts.install())
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), sys.unraisablehook) == before
