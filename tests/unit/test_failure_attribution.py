"""Whatever a failing node's log calls its machine (a hostname, an FQDN, `localhost`, an
address), the run names an inventory host: never a KeyError, never a name the inventory lacks.
And an unexpected exception while a run is watched stops every rank, records the run, and
ends in one "internal error" line naming the log that holds the traceback (exit 1)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st
from clusterctl_helpers import examples

from clusterctl.inventory.load import parse_inventory

INVENTORY = """
name: attribution
hosts:
  - {name: node-080, address: 172.31.0.80}
  - {name: node-082, address: 172.31.0.82}
rendezvous: {address: 10.10.0.80}
job: {command: [train.py], nproc_per_node: 1}
"""


@pytest.fixture(scope="module")
def inventory():
    return parse_inventory(INVENTORY, "inv.yaml")


@pytest.mark.parametrize("named, log_of, expected", [
    ("node-080", "node-082", "node-080"),                           # an inventory name is taken as it is
    ("bjdb-h20-node-080", "node-082", "node-082"),                  # the machine's own hostname: the log's node
    ("gpu-a01.rack1.cluster.internal", "node-080", "node-080"),     # an FQDN
    ("localhost", "node-082", "node-082"),                          # torchrun's summary on a loopback hostname
    ("127.0.1.1", "node-080", "node-080"),
    ("172.31.0.80", "node-082", "node-080"),                        # an inventory address names its host
    ("10.10.0.80", "node-082", "node-080"),                         # the master's rendezvous address
    (None, "node-082", "node-082"),
])
def test_a_logs_name_for_a_machine_maps_to_an_inventory_host(inventory, named, log_of, expected):
    assert inventory.host_named_by(named, log_of) == expected


@settings(max_examples=examples(300), deadline=None)
@given(st.one_of(st.none(), st.text()), st.sampled_from(["node-080", "node-082"]))
def test_any_name_in_a_log_maps_to_some_inventory_host(inventory, named, log_of):
    assert inventory.host_named_by(named, log_of) in ("node-080", "node-082")
