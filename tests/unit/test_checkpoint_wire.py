"""The parsers of what a peer sends the checkpoint replicas' listener (issue 50): a request line and a
manifest are remote text; whatever arrives, the answer is a document, None or one Failed, never a crash,
and nothing unsigned is believed."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from clusterctl.node import checkpoint_copies, checkpoint_wire as wire

KEY = "k" * 64


@given(st.binary(max_size=400))
def test_any_line_unsigned_is_refused_without_a_crash(line):
    assert wire.unframe(KEY, line) is None


@given(st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=20), st.none()), max_size=5))
def test_a_signed_document_comes_back_as_it_was_and_a_changed_one_never(document):
    line = wire.frame(KEY, document)
    assert wire.unframe(KEY, line) == document
    assert wire.unframe("other" * 10, line) is None
    assert wire.unframe(KEY, line.replace(b"}", b" }", 1)) is None


@given(st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=30), st.booleans()),
                    lambda inner: st.lists(inner, max_size=4), max_leaves=20))
def test_a_manifest_is_checked_or_refused_never_a_crash(files):
    try:
        checked, total = wire.manifest_ok(files)
    except wire.Failed as failed:
        assert failed.kind == "refused"
        return
    assert all(wire.FILE_NAME.match(name) and size >= 0 and len(digest) == 64 for name, size, digest in checked)


@pytest.mark.parametrize("name", ["../x", "a/b", ".", "..", "x\ny", "", "a" * 256])
def test_a_file_name_that_is_not_plain_is_refused(name):
    with pytest.raises(wire.Failed):
        wire.manifest_ok([[name, 1, "0" * 64]])


def test_the_newest_step_complete_for_every_owner_is_chosen_and_a_refused_one_passed_over():
    holdings = {"a": {"own": ["step-8", "step-9", "step-10"], "held": {"b": ["step-9", "step-10"]}},
                "c": {"own": [], "held": {"b": ["step-8"], "a": ["step-9"]}}}
    assert checkpoint_copies.choose(holdings, ["a", "b"], ["a", "c"]) == ("step-10", {"a": ["a"], "b": ["a"]})
    assert checkpoint_copies.choose(holdings, ["a", "b"], ["c"]) == (None, {})  # a's copy of step-8 is gone with it
    assert checkpoint_copies.choose(holdings, ["a", "b"], ["a", "c"], refused={"step-10"})[0] == "step-9"
    assert checkpoint_copies.choose({"a": {"own": ["step-1\nX=1"]}}, ["a"], ["a"]) == (None, {})


@given(st.binary(max_size=400))
def test_the_sender_a_line_names_is_a_string_or_none_never_a_crash(line):
    assert wire.sender(line) is None or isinstance(wire.sender(line), str)


def test_pair_keys_are_one_per_pair_and_differ_between_pairs_and_runs():
    assert wire.pair_key("s", "a", "b") == wire.pair_key("s", "b", "a") != wire.pair_key("s", "a", "c")
    assert wire.pair_key("s", "a", "b") != wire.pair_key("t", "a", "b")
    assert wire.sender(wire.frame("k", {"from": "n1", "op": "put"})) == "n1"
    assert wire.same_address("::ffff:10.0.0.1", "10.0.0.1") and not wire.same_address("10.0.0.2", "10.0.0.1")
@given(st.text(alphabet=st.sampled_from("own held step-1 node2 \n\t$=;./\x00é"), max_size=300))
def test_what_a_node_lists_of_its_checkpoints_is_read_as_plain_names_or_passed_over(text):
    """heal/replicas.parse_holdings: the `checkpoints` operation's output is remote text (an attached run's
    restore order and CLUSTERCTL_CHECKPOINT come from it): only plain names survive, nothing raises."""
    from clusterctl.heal.replicas import parse_holdings
    from clusterctl.node.heal_policy import checkpoint_name_ok

    found = parse_holdings(text)
    names = found["own"] + list(found["held"]) + [s for steps in found["held"].values() for s in steps]
    assert all(checkpoint_name_ok(n) for n in names)


def test_the_listing_of_a_node_is_read_back_as_a_keepers_report():
    from clusterctl.heal.replicas import parse_holdings

    text = "own step-1\nown step-10\nheld node2 step-9\nheld node2 step-10\nheld node3 bad name\nown step-11\nX=1\n"
    assert parse_holdings(text) == {"own": ["step-1", "step-10", "step-11"], "held": {"node2": ["step-9", "step-10"]}}


def test_an_attached_attempts_replica_config_is_what_the_keepers_replicator_reads(tmp_path):
    """heal/replicas.configs: each host's keys with every host of the attempt and of the ones before (one per
    pair: the two ends hold the same, no node a key of a pair it is not in), the hosts in use in the plan's
    order, a lost host of the attempt before still known by its address (its replicas are served under its name)."""
    import json
    from types import SimpleNamespace

    from clusterctl.heal.replicas import configs
    from clusterctl.node.checkpoint_replica import Replicator

    spec = SimpleNamespace(dir="/ckpt", complete="COMPLETE", replicas=1, keep=2, bandwidth=None)
    inventory = SimpleNamespace(job=SimpleNamespace(healing=SimpleNamespace(checkpoint=spec, enabled=True)))
    topology = SimpleNamespace(port=29500, nodes=[SimpleNamespace(host=SimpleNamespace(name=n), local_addr=a)
                                                  for n, a in (("node1", "10.0.0.1"), ("node3", "10.0.0.3"))])
    order = {"step": "step-7", "sources": {"node1": ["node1"], "node2": ["node1"]}}
    made = {h: json.loads(b) for h, b in configs(inventory, topology, "R1", 2, order,
                                                   {"node1": "10.0.0.1", "node2": "10.0.0.2"}).items()}
    assert sorted(made) == ["node1", "node3"]
    assert made["node1"]["replica_keys"]["node3"] == made["node3"]["replica_keys"]["node1"]
    assert set(made["node3"]["replica_keys"]) == {"node1", "node2", "node3"}
    assert made["node3"]["replica_keys"]["node2"] not in made["node1"]["replica_keys"].values()
    replica = Replicator(str(tmp_path), made["node3"])
    assert replica.port == 29500 + wire.PORT_OFFSET and replica.known == {"node1", "node2", "node3"}
    assert replica.peers() == ["node1"] and made["node3"]["restore"] == order and made["node3"]["attempt"] == 2
