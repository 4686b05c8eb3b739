"""A restart policy that never loops (issue 50): an attempt without progress counts double against
job.restarts, two in a row end the run with the reason, a job fault never relaunches; each attempt
says what it resumed from and whether it made progress."""
from __future__ import annotations

from clusterctl.node import heal_policy

RULES = {"restarts": 5, "nproc": {"a": 1, "b": 1, "c": 1}}
LOST = [{"host": "b", "lost": True, "at": 1.0}]
RDZV = [{"host": "a", "at": 1.0, "exit_code": 1, "tail": "torch.distributed.DistStoreError: Timed out after 30s"}]


def _first(host, cause, evidence):
    return {"host": host, "diagnosis": [{"cause": cause, "evidence": evidence}]}


def test_progress_is_a_newer_complete_checkpoint_or_without_checkpoints_another_failure():
    assert heal_policy.progress_of(True, "/c/step-9", "/c/step-10", None, None) is True  # natural order
    assert heal_policy.progress_of(True, "/c/step-10", "/c/step-10", None, None) is False
    assert heal_policy.progress_of(True, None, None, None, None) is False  # nothing saved at all
    assert heal_policy.progress_of(True, None, "/c/step-1", None, None) is True
    same = _first("a", "rdzv_unreachable", "DistStoreError at step 3")
    assert heal_policy.progress_of(False, None, None, same, None) is None  # the first attempt: nothing to compare
    assert heal_policy.progress_of(False, None, None, same, dict(same)) is False
    assert heal_policy.progress_of(False, None, None, same, _first("a", "rdzv_unreachable", "at step 4")) is True


def test_an_attempt_without_progress_counts_double_and_two_in_a_row_end_the_run():
    first = heal_policy.decide("failed", RDZV, 1, RULES, ["a", "b"], ["c"], progress=[False])
    assert first.relaunch  # 2 of 5 counted
    second = heal_policy.decide("failed", RDZV, 2, RULES, ["a", "b"], ["c"], progress=[False, False])
    assert not second.relaunch and "attempts 1 and 2 in a row made no progress" in second.why
    assert heal_policy.decide("failed", LOST, 2, RULES, ["a", "b"], ["c"], progress=[False, True]).relaunch
    spent = heal_policy.decide("failed", LOST, 3, {**RULES, "restarts": 3}, ["a", "b"], ["c"],
                               progress=[False, True, True])
    assert not spent.relaunch and "counts double" in spent.why  # 2 + 1 + 1 > 3


def test_a_job_fault_never_relaunches_whatever_the_progress():
    fault = [{"host": "a", "at": 1.0, "exit_code": 1, "tail": "ModuleNotFoundError: No module named 'x'"}]
    decision = heal_policy.decide("failed", fault, 1, RULES, ["a", "b"], ["c"], progress=[True])
    assert not decision.relaunch and decision.why.endswith("not retried")


def test_the_old_callers_default_is_todays_policy():
    assert heal_policy.decide("failed", LOST, 1, {**RULES, "restarts": 1}, ["a", "b"], ["c"]).relaunch
    assert not heal_policy.decide("failed", LOST, 2, {**RULES, "restarts": 1}, ["a", "c"], []).relaunch
