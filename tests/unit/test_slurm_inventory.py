"""The inventory's `scheduler:` section and Slurm's time limits (issue #20). Pure."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from clusterctl.errors import InventoryError
from clusterctl.inventory.load import dump_inventory, load_inventory, parse_inventory
from clusterctl.models import SchedulerSpec
from clusterctl.inventory import timelimit

JOB = "job: {command: [train.py], nproc_per_node: 2}\n"


def load(text: str, tmp_path: Path):
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    return load_inventory(path)


def error_of(text: str, tmp_path: Path) -> InventoryError:
    with pytest.raises(InventoryError) as caught:
        load(text, tmp_path)
    return caught.value


def test_a_scheduler_inventory_needs_no_hosts_and_keeps_every_key(tmp_path):
    inv = load("name: gpu\nscheduler:\n  type: slurm\n  partition: debug\n  nodes: 2\n  time: \"02:00:00\"\n"
               "  account: proj-1\n  gpus_per_node: 8\n  extra_args: [--qos=high, --exclusive]\n" + JOB, tmp_path)
    assert inv.hosts == ()
    assert inv.scheduler == SchedulerSpec("slurm", "debug", 2, "02:00:00", "proj-1", 8, ("--qos=high", "--exclusive"))


def test_only_type_is_required(tmp_path):
    assert load("scheduler: {type: slurm}\n" + JOB, tmp_path).scheduler == SchedulerSpec()


def test_a_scheduler_inventory_round_trips_through_dump(tmp_path):
    inv = load("name: s\nscheduler: {type: slurm, partition: debug, time: \"1-00:00:00\"}\n" + JOB, tmp_path)
    assert parse_inventory(dump_inventory(inv), "inv.yaml", base_dir=tmp_path, source=inv.source) == inv


def test_without_a_scheduler_hosts_are_still_required(tmp_path):
    assert "no hosts" in error_of("name: s\n" + JOB, tmp_path).what


# section (\n for a line break) | the line the error names | words of the error | words of the fix
BAD_SECTIONS = r"""
scheduler: {partition: debug}                                | 1 | scheduler has no type  | type: slurm
scheduler: {type: pbs}                                       | 1 | must be one of slurm   | type: slurm
scheduler:\n  type: slurm\n  time: "1:99"                     | 3 | not a Slurm time limit | HH:MM:SS
scheduler:\n  type: slurm\n  time: "0"                        | 3 | time is 0              | HH:MM:SS
scheduler:\n  type: slurm\n  nodes: 0                         | 3 | at least 1             | value
scheduler:\n  type: slurm\n  partition: "gpu; rm -rf /"       | 3 | not a Slurm name       | partition: gpu
scheduler:\n  type: slurm\n  extra_args: [--qos=high, -N2]    | 3 | sets -N                | scheduler.nodes
scheduler:\n  type: slurm\n  extra_args: [--time=10]          | 3 | sets --time            | scheduler.time
scheduler:\n  type: slurm\n  extra_args: [--job-name=x]       | 3 | sets --job-name        | clusterctl sets it
scheduler:\n  type: slurm\n  extra_args: [qos=high]           | 3 | is not an option       | --qos=high
scheduler: {type: slurm}\nrendezvous: {master: node1}        | 2 | lists none             | remove rendezvous.master
partition: debug\nscheduler: {type: slurm}                   | 1 | belongs under scheduler | move 'partition'
scheduler: {type: slurm, nodes: 3}\nhosts: [{name: a, address: 10.0.0.1}] | 1 | 1 host(s) are listed | remove scheduler.nodes
"""


def bad_sections():
    for row in BAD_SECTIONS.strip().splitlines():
        section, line, words, fix = (cell.strip() for cell in row.split(" | "))
        yield section.replace("\\n", "\n"), int(line), words, fix


@pytest.mark.parametrize("section, line, words, fix", list(bad_sections()))
def test_bad_scheduler_sections_name_file_line_and_fix(tmp_path, section, line, words, fix):
    error = error_of(section + "\n" + JOB, tmp_path)
    assert f"inv.yaml:{line}" in error.where
    assert words in error.what
    assert fix in error.fix


def test_listed_hosts_with_a_scheduler_are_kept(tmp_path):
    inv = load("scheduler: {type: slurm}\nhosts:\n  - {name: node1, address: 10.0.0.1}\n" + JOB, tmp_path)
    assert [h.name for h in inv.hosts] == ["node1"]


@pytest.mark.parametrize("text, secs", [
    ("10", 600), ("10:30", 630), ("02:00:00", 7200), ("1-0", 86400), ("1-02", 93600), ("1-02:03", 93780),
    ("2-00:00:01", 172801), ("infinite", None), ("UNLIMITED", None), (" 1:00:00 ", 3600),
])
def test_slurm_time_limits_read_as_slurm_reads_them(text, secs):
    assert timelimit.seconds(text) == secs


@pytest.mark.parametrize("text", ["", "1:2:3:4", "1:60", "1-24", "abc", "-5", "1:00:60", "1.5"])
def test_what_slurm_refuses_is_not_a_time_limit(text):
    with pytest.raises(timelimit.TimeLimitError):
        timelimit.seconds(text)


@given(st.integers(min_value=0, max_value=10**7))
def test_time_text_reads_back_to_the_same_seconds(secs):
    assert timelimit.seconds(timelimit.text(secs)) == secs


@given(st.text(max_size=40))
def test_the_time_reader_raises_only_its_own_error(text):
    try:
        timelimit.seconds(text)
    except timelimit.TimeLimitError:
        pass


@pytest.mark.parametrize("argv", [["up", "{inv}"], ["down", "-i", "{inv}"], ["exec", "-i", "{inv}", "--", "true"],
                                  ["nccl-test", "-i", "{inv}"]])
def test_commands_that_act_on_hosts_refuse_an_inventory_of_none_with_the_way_out(tmp_path, capsys, argv):
    from clusterctl.cli import main

    path = tmp_path / "inv.yaml"
    path.write_text("scheduler: {type: slurm}\n" + JOB)
    code = main([a.replace("{inv}", str(path)) for a in argv], env={**os.environ, "CLUSTERCTL_STATE": str(tmp_path)})
    err = capsys.readouterr().err
    assert code == 2 and "lists no hosts" in err and "hosts:" in err and "`run`" in err
