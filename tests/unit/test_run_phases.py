"""`run --json` and the run record say when each phase of the run was reached (issue 40): the
facts, the launch, the first rank, the last rank's last line, the last torchrun's exit, the return,
in seconds since the command started, in that order."""
from __future__ import annotations

import json

from clusterctl.run.phases import NAMES, Phases


def test_phases_count_from_the_command_start_and_keep_their_order_whatever_order_they_were_reached_in():
    phases = Phases(started=0.0)
    for name in reversed(NAMES):
        phases.reach(name)
    assert list(phases.to_json()) == list(NAMES)
    assert all(value > 0 for value in phases.to_json().values())


def test_a_phase_reached_again_keeps_its_first_time_and_again_keeps_the_latest():
    phases = Phases(started=0.0)
    phases.reach("first_rank")
    phases.again("last_rank_done")
    first, last = phases.to_json()["first_rank"], phases.to_json()["last_rank_done"]
    phases.reach("first_rank")
    phases.again("last_rank_done")
    assert phases.to_json()["first_rank"] == first and phases.to_json()["last_rank_done"] >= last


def test_each_phase_carries_the_cpu_spent_so_far_which_only_grows_in_the_order_the_phases_were_reached():
    phases = Phases(started=0.0)
    phases.reach("probe")
    sum(i * i for i in range(200_000))  # some CPU between two phases
    phases.reach("launch")
    cpu = phases.cpu_json()
    assert list(cpu) == ["probe", "launch"] == list(phases.to_json())
    assert 0 < cpu["probe"] <= cpu["launch"]
    phases.reach("probe")
    assert phases.cpu_json()["probe"] == cpu["probe"]  # reach keeps the first
