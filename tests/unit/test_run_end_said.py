"""The end of a run (issue 52): when the nodes' output streams hold the run's return past a second, the live
log says which nodes it waits for; streams that end in time say nothing. Both reach `streams_ended`."""
from __future__ import annotations

from types import SimpleNamespace

from clusterctl.run.phases import Phases
from clusterctl.run.runner import JobRunner


class _Streams:
    """What the runner asks of executor.Streams at the end: wait(timeout) -> ended, and results (ended hosts)."""

    def __init__(self, ended: dict, ends_after: int):
        self.results, self._ends_after, self.waits = ended, ends_after, []

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return len(self.waits) > self._ends_after


def _runner(names):
    events = []
    return SimpleNamespace(nodes={n: None for n in names}, on_event=events.append, phases=Phases(0.0)), events


def test_streams_that_end_within_the_second_say_nothing():
    runner, events = _runner(["node1", "node2"])
    streams = _Streams({"node1": 0, "node2": 0}, ends_after=0)
    JobRunner._end_streams(runner, streams)
    assert events == [] and streams.waits == [1.0] and "streams_ended" in runner.phases.to_json()


def test_a_stream_that_holds_the_end_is_named_and_waited_for_up_to_the_rest():
    runner, events = _runner(["node1", "node2", "node3"])
    streams = _Streams({"node1": 0}, ends_after=1)
    JobRunner._end_streams(runner, streams)
    assert [e.text for e in events] == ["end of run: waiting up to 2s more for the output stream of 2 node(s): "
                                        "node2, node3"]
    assert streams.waits == [1.0, 2.0] and "streams_ended" in runner.phases.to_json()
