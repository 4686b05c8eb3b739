"""Message classes met in the misses of batch 24 (issue 51; its first score, blind, is in docs/diagnosis.md), in
programs' own words (the format string's source named), never the batch's logs."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text

CASES = [
    # Slurm's slurmctld (src/slurmctld/ping_nodes.c: error("Nodes %s not responding", ...), and "..., setting DOWN")
    ("[2026-03-02T10:14:05.112] error: Nodes gpu[003-004] not responding", "node_unreachable"),
    ("[2026-03-02T10:19:05.200] error: Nodes gpu004 not responding, setting DOWN", "node_unreachable"),
    # EC2's InsufficientInstanceCapacity message (docs.aws.amazon.com, "Troubleshoot instance launch issues")
    ("An error occurred (InsufficientInstanceCapacity) when calling the RunInstances operation: We currently do "
     "not have sufficient p4d.24xlarge capacity in the Availability Zone you requested (us-east-1a).",
     "insufficient_resources"),
    ("We currently do not have sufficient p5.48xlarge capacity in the Availability Zone you requested (us-east-2b).",
     "insufficient_resources"),
    # GCP's ZONE_RESOURCE_POOL_EXHAUSTED message (cloud.google.com, "Troubleshooting resource availability errors")
    ("The zone 'projects/p/zones/us-central1-a' does not have enough resources available to fulfill the request. "
     "Try a different zone, or try again later.", "insufficient_resources"),
    # Python's os.environ (os.py: raise KeyError(key) from None): a script that reads torchrun's variables, started
    # without it
    ("  File \"train.py\", line 27, in init_dist\n    rank = int(os.environ['RANK'])\n"
     "  File \"/usr/lib/python3.10/os.py\", line 680, in __getitem__\n    raise KeyError(key) from None\n"
     "KeyError: 'RANK'", "launcher_args"),
    ("KeyError: 'LOCAL_RANK'", "launcher_args"),
    # coreutils' mkdir (mkdir.c: "cannot create directory %s"), as enroot's shell scripts run it under pyxis
    ("slurmd[5363]: spank-epilog: error: pyxis: couldn't execute enroot command\n"
     "slurmd[5363]: spank-epilog: error: pyxis:     mkdir: cannot create directory '/scratch/enroot/data': "
     "Permission denied\nslurmd[5363]: spank-epilog: error: pyxis: couldn't get list of existing containers",
     "permission_denied"),
]


@pytest.mark.parametrize("text,cause", CASES)
def test_each_class_leads_with_its_cause(text, cause):
    findings = diagnose_text(text)
    assert findings and findings[0].cause == cause, [(f.cause, f.confidence) for f in findings]


def test_a_node_that_answers_again_is_not_a_failure_on_its_own():
    assert not any(f.cause == "node_unreachable" for f in diagnose_text("Node gpu004 now responding"))


def test_a_missing_key_of_the_jobs_own_is_not_a_launcher_misuse():
    assert not any(f.cause == "launcher_args" for f in diagnose_text("KeyError: 'RANKING_SCORE'"))
