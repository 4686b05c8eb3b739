"""The executor's clock (clusterctl/executor/clock.py): the waits every stage makes through it.
No timed assertions: what is checked is what a loop does, not how long it took."""
from __future__ import annotations

import threading

from clusterctl.executor import Ticker, attempts, ticks, wait_until


def test_wait_until_says_yes_once_the_condition_holds():
    answers = iter([False, False, True])
    assert wait_until(lambda: next(answers), timeout_s=60, interval_s=0.001)


def test_wait_until_asks_at_least_once_and_says_no_when_the_time_is_up():
    asked = []
    assert not wait_until(lambda: asked.append(1) or False, timeout_s=0, interval_s=0.001)
    assert asked == [1]


def test_wait_until_is_woken_by_the_event_another_thread_sets():
    ready = threading.Event()
    threading.Timer(0.01, ready.set).start()
    assert wait_until(ready.is_set, timeout_s=60, interval_s=30, wake=ready)


def test_ticks_gives_turns_until_the_loop_breaks_and_none_once_the_time_is_up():
    turns = 0
    for left in ticks(60, 0.001):
        assert 0 < left <= 60
        turns += 1
        if turns == 3:
            break
    assert turns == 3
    assert list(ticks(0, 0.001)) == []


def test_attempts_counts_the_tries():
    assert list(attempts(4, 0.001)) == [0, 1, 2, 3]
    assert list(attempts(1, 60)) == [0]  # no pause after the last try


def test_a_ticker_turns_until_done():
    polled = []
    for _left in Ticker(0.001).during(60, done=lambda: len(polled) == 2):
        polled.append(1)
    assert polled == [1, 1]
    assert list(Ticker(0.001).during(60, done=lambda: True)) == []
