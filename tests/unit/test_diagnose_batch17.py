"""Message classes met in the misses of batch 17 (issue 51; its first score, blind, is in docs/diagnosis.md), and
the cause the vocabulary gained from it (slurm_request_invalid): each a class in some program's words, with the
public source of its excerpt; the batch's own logs are not used here."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text
from clusterctl.node import heal_policy

CASES = [
    # UCX's own message when verbs cannot pin memory (ucx src/uct/ib/base: ". Please set max locked memory (ulimit -l)
    # to 'unlimited' (current: %llu kbytes)"), as an Intel MPI run printed it (a public repository's notes)
    ("[1736959004.001121] [bernie:29714:0]        ib_iface.c:1060 UCX  ERROR ibv_create_cq(cqe=4096) failed: Cannot "
     "allocate memory : Please set max locked memory (ulimit -l) to 'unlimited' (current: 64 kbytes)\n"
     "Abort(1614735) on node 0 (rank 0 in comm 0): Fatal error in PMPI_Init_thread: Unknown error class",
     "ib_config"),
    # Slurm refusing the request's GRES: NVIDIA/NeMo-Framework-Launcher#72, facebookresearch/LaViLa#42 (a site that
    # wants typed GRES), snakemake/snakemake-executor-plugin-slurm#104 (a feature the site lacks)
    ("OSError: sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification",
     "slurm_request_invalid"),
    ("submitit.core.utils.FailedJobError: sbatch: error: You must always specify a type when requesting gpu GRES "
     "sbatch: error: Batch job submission failed: Unspecified error", "slurm_request_invalid"),
    ("sbatch: error: Batch job submission failed: Invalid feature specification", "slurm_request_invalid"),
    # MPICH's Hydra (utils/sock/sock.c: "unable to get host address for %s"), with the ssh line a launch echoes
    ("[proxy:0:1@node-a] HYDU_sock_connect (utils/sock/sock.c:113): unable to get host address for node-b\n"
     "Host key verification failed.", "hostname_unresolvable"),
    # apex built without --cuda_ext: its CUDA module is missing at import (NVIDIA/apex issues, e.g. #156's class)
    ("ModuleNotFoundError: No module named 'amp_C'", "extension_build_failed"),
    # CDI: Podman naming a device no spec provides (NVIDIA Container Toolkit's CDI docs quote it)
    ("Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all", "container_start_failed"),
    # Ray's notice for a vanished worker (python/ray/exceptions.py), which lists the OOM killer first
    ("(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the "
     "problem, check the logs for the dead worker.", "oom_killed"),
]


@pytest.mark.parametrize("text,cause", CASES)
def test_each_class_leads_with_its_cause(text, cause):
    findings = diagnose_text(text)
    assert findings and findings[0].cause == cause, [(f.cause, f.confidence) for f in findings]


def test_a_ray_worker_death_keeps_a_kill_by_another_sender_second():
    findings = diagnose_text("Worker unexpectedly exits with a connection error code 2. End of file. There are some "
                             "potential root causes.")
    assert [f.cause for f in findings[:2]] == ["oom_killed", "killed_by_signal"]


def test_a_request_slurm_refuses_is_the_jobs_fault_and_not_healed_by_another_node():
    assert heal_policy.TABLE["slurm_request_invalid"] == "job"


def test_an_extension_build_that_loaded_is_not_a_failure():
    findings = diagnose_text("Building extension module fused_adam...\nLoading extension module fused_adam...\n"
                             "Time to load fused_adam op: 0.05 seconds")
    assert not findings or findings[0].cause != "extension_build_failed"


def test_slurm_refusing_an_allocation_says_what_to_change_in_the_inventory():
    from clusterctl.slurm.allocation import refusal_fix

    fix = refusal_fix(["salloc: error: Job submit/allocate failed: Requested GRES option unsupported by configured "
                       "SelectType plugin"])
    assert fix.startswith("slurm_request_invalid:") and "scheduler.extra_args" in fix
    assert refusal_fix(["salloc: error: Something Slurm says"]).startswith("see Slurm's message")
