"""The health rules' table: what moves a node healthy -> suspect -> quarantined, and the
inventory's `health:` overrides (read with file:line errors like every other section)."""
from __future__ import annotations

import pytest

from clusterctl.errors import InventoryError
from clusterctl.health.events import StoredEvent
from clusterctl.health.rules import QUARANTINED, RULES, SUSPECT, judge, rules_for
from clusterctl.inventory.load import parse_inventory

DAY = 86400.0
HOSTS = "hosts:\n  - {name: n1, address: 10.0.0.1}\n"


def events(*kinds_at):
    return [StoredEvent(seq, "c", "n1", None, at, "run", kind, "", "", f"evidence {seq}", None)
            for seq, (kind, at) in enumerate(kinds_at, start=1)]


@pytest.mark.parametrize("kind", ["xid_fatal", "ecc_uncorrectable", "row_remap_failure", "dcgm_failure",
                                  "nccl_outlier"])
def test_one_hard_event_quarantines_a_node(kind):
    verdict = judge(events((kind, 100.0)), rules_for(None), now=100.0)
    assert verdict.state == QUARANTINED and verdict.since == 100.0 and kind in verdict.reason


@pytest.mark.parametrize("kind", ["node_lost", "run_blamed", "heal_excluded"])
def test_the_second_loss_or_blame_within_a_week_quarantines_and_the_first_makes_it_suspect(kind):
    rules = rules_for(None)
    assert judge(events((kind, 100.0)), rules, now=100.0).state == SUSPECT
    assert judge(events((kind, 100.0), (kind, 100.0 + 6 * DAY)), rules, now=100.0 + 6 * DAY).state == QUARANTINED
    apart = judge(events((kind, 100.0), (kind, 100.0 + 8 * DAY)), rules, now=100.0 + 8 * DAY)
    assert apart.state == SUSPECT  # a week apart: the first has aged out


def test_a_suspect_node_is_healthy_again_once_its_soft_events_age_out_or_a_check_passes():
    rules = rules_for(None)
    assert judge(events(("thermal", 100.0)), rules, now=100.0 + 2 * DAY).state == "healthy"
    assert judge(events(("straggler", 100.0), ("check_passed", 200.0)), rules, now=300.0).state == "healthy"


def test_a_quarantine_stays_through_a_passing_check_until_released():
    rules = rules_for(None)
    held = judge(events(("xid_fatal", 100.0), ("check_passed", 200.0)), rules, now=10 * DAY)
    assert held.state == QUARANTINED and held.last_check_seq == 2 > held.since_seq
    released = judge(events(("xid_fatal", 100.0), ("released", 200.0), ("node_lost", 300.0)), rules, now=300.0)
    assert released.state == SUSPECT  # counting starts over after a release


def test_an_unknown_kind_from_a_newer_clusterctl_is_ignored_not_fatal():
    assert judge(events(("cosmic_ray", 1.0)), rules_for(None)).state == "healthy"


def test_every_rule_can_move_a_node_somewhere_and_hard_rules_say_so():
    for rule in RULES:
        assert rule.suspect_after or rule.quarantine_after
        assert rule.severity == ("hard" if rule.quarantine_after == 1 else "soft")


def test_the_inventory_overrides_a_rule_and_never_turns_quarantine_off():
    inventory = parse_inventory(HOSTS + "health:\n  rules:\n    node_lost: {quarantine_after: 3}\n"
                                "    straggler: {quarantine_after: never, window_days: 2}\n")
    rules = rules_for(inventory.health)
    assert rules["node_lost"].quarantine_after == 3 and rules["node_lost"].window_s == 7 * DAY
    assert rules["straggler"].quarantine_after is None and rules["straggler"].window_s == 2 * DAY
    twice = events(("node_lost", 1.0), ("node_lost", 2.0))
    thrice = events(("node_lost", 1.0), ("node_lost", 2.0), ("node_lost", 3.0))
    assert judge(twice, rules, now=2.0).state == SUSPECT
    assert judge(thrice, rules, now=3.0).state == QUARANTINED


@pytest.mark.parametrize("section, line, words", [
    ("health:\n  rules:\n    node_lots: {quarantine_after: 3}\n", 5, "unknown health rule 'node_lots'"),
    ("health:\n  rules:\n    node_lost: {quarantine_after: 0}\n", 5, "quarantine_after must be"),
    ("health:\n  rules:\n    node_lost: {quarantine_after: '3'}\n", 5, "quarantine_after must be"),
    ("health:\n  rules:\n    node_lost: {quarantine: 3}\n", 5, "unknown key 'quarantine'"),
    ("health:\n  rules: [node_lost]\n", 4, "health.rules must be a mapping"),
    ("health:\n  rulez: {}\n", 4, "unknown key 'rulez'"),
])
def test_a_bad_health_section_is_one_error_with_file_and_line(section, line, words):
    with pytest.raises(InventoryError) as error:
        parse_inventory(HOSTS + section, "inv.yaml")
    assert words in error.value.what and error.value.where.startswith(f"inv.yaml:{line}")


def test_the_readme_shows_the_rules_table_as_it_is():
    from pathlib import Path

    from clusterctl.health.rules import readme_table

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start, end = readme.index("<!-- health-table:start"), readme.index("<!-- health-table:end -->")
    assert readme[start:end].split("\n", 1)[1].strip() == readme_table()


def test_the_health_section_survives_inventory_show_and_back():
    from clusterctl.inventory.load import dump_inventory

    inventory = parse_inventory(HOSTS + "health:\n  rules:\n    straggler: {quarantine_after: never, window_days: 2.5}\n")
    assert parse_inventory(dump_inventory(inventory), "dumped.yaml").health == inventory.health
