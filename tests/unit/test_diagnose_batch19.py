"""Message classes met in the misses of batch 19 (issue 51; its first score, blind, is in docs/diagnosis.md), in
programs' own words (the format string's source named), never the batch's logs; and the pre-filter bug its misses
exposed: a `{m,n}` quantifier's digits were taken for text a line must hold, so four signals never fired."""
from __future__ import annotations

import re

import pytest

from clusterctl.diagnose import diagnose_text
from clusterctl.diagnose.rules import RULES
from clusterctl.diagnose.textmatch import required_literals

CASES = [
    # Kokkos' core/src/Cuda/Kokkos_Cuda_Instance.cpp: built for another arch than the GPU's
    ("Kokkos::Cuda::initialize ERROR: likely mismatch of architecture", "gpu_arch_unsupported"),
    # Open MPI's opal/mca/btl/smcuda: "The call to cuIpcGetMemHandle failed. This means the GPU RDMA protocol cannot
    # be used." (its help text, show_help's cuIpcOpenMemHandle twin alike)
    ("The call to cuIpcOpenMemHandle failed. This is an unrecoverable error and will cause the program to abort.",
     "p2p_unsupported"),
    # CUDA's error 46 by number (cudaErrorDevicesUnavailable) in NAMD's cuda_check format "Return value %d from '%s'"
    ("Fatal CUDA Error at ComputeNonbondedCUDA.C:100.\nReturn value 46 from 'cudaSetDevice(dev)'.  Exiting.",
     "duplicate_gpu"),
    # Slurm's own words for a node of the job that failed (sacct/scontrol: NODE_FAIL; the job's end line)
    ("slurmstepd: error: *** JOB 123456 ON gpu-17 CANCELLED AT 2024-01-01T10:00:00 DUE TO NODE FAILURE ***",
     "node_unreachable"),
    # detectron2/engine/launch.py's assertion (nerfstudio copies it): an automatic rendezvous across machines
    ('AssertionError: dist_url=auto not supported in multi-machine jobs.', "launcher_args"),
    # torch's device parser given several GPUs in one string (c10/core/Device.cpp: "Invalid device string: '...'")
    ("RuntimeError: Invalid device string: 'cuda:0,1,2,3'", "launcher_args"),
    # srun's own check of contradictory options (src/srun/libsrun/opt.c)
    ("srun: fatal: --ntasks-per-gpu is mutually exclusive with --ntasks-per-tres", "slurm_request_invalid"),
]


@pytest.mark.parametrize("text,cause", CASES)
def test_each_class_leads_with_its_cause(text, cause):
    findings = diagnose_text(text)
    assert findings and findings[0].cause == cause, [(f.cause, f.confidence) for f in findings]


def test_a_quantifier_is_no_text_a_line_must_hold():
    assert required_literals(r"bind\(\).{0,80}Cannot assign requested address") == ("cannot assign requested address",)
    assert required_literals(r"\d{1,3}\.\d{1,3} link") == (" link",)


def test_no_signal_waits_for_a_quantifiers_digits():
    for rule in RULES:
        for signal in rule.signals:
            for literal in required_literals(signal.pattern) or ():
                assert not re.fullmatch(r"\d*,\d*", literal), (rule.cause, signal.pattern)


def test_the_four_signals_the_bug_kept_silent_fire():
    assert diagnose_text("NCCL WARN Call to bind failed : Cannot assign requested address")[0].cause == "nic_mismatch"
    assert diagnose_text("NCCL_TOPO_FILE /opt/topo.xml : No such file or directory")[0].cause == "nccl_topo_file"
