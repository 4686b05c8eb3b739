"""`run` reads the flight-recorder dumps off the nodes before it reports (issue 39): a collective
that timed out names the rank that did not join, not the rank whose watchdog fired. The dumps and
log are the real ones captured on 2 x H200 (tests/fixtures/flight_recorder/nccl_h200_2ranks_rank1_late:
rank 1 sleeps before an all_reduce, the watchdog fires on rank 0), read through a real local
transport from a node's run dir."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st
from clusterctl_helpers import examples
from clusterctl.watch.dumps import parse_dumps

from local.test_run_reads_dumps import H200


@settings(max_examples=examples(200), deadline=None)
@given(st.text(max_size=300))
def test_whatever_a_node_sends_back_is_parsed_or_skipped_never_raised(text):
    assert isinstance(parse_dumps(text, "n1"), list)
