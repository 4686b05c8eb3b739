"""Message classes met in the misses of batch 15 (issue 51; its first score, blind, is in docs/diagnosis.md): each a
class of message in some program's words, with the public page its excerpt comes from; the batch's own logs are not
used here, a second source of the same class is."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text

CASES = [
    # https://github.com/stackhpc/ansible-slurm-appliance/issues/287 (fixed by a reboot): the kernel's older wording,
    # as syslog writes it (#012 for the line breaks)
    ("Jun 30 11:07:05 gpu-0 kernel: NVRM: API mismatch: the client has the version 535.54.03, but#012NVRM: this kernel "
     "module has the version 530.30.02.  Please#012NVRM: make sure that this kernel module and all NVIDIA driver#012NVRM: "
     "components have the same version.", "driver_library_mismatch"),
    # https://github.com/Frogging-Family/nvidia-all/issues/394: the newer wording, naming the client process
    ("[    9.424670] NVRM: API mismatch: the client 'kwin_wayland' (pid 1005)\n"
     "               NVRM: has the version 595.84, but this kernel module has\n"
     "               NVRM: the version 595.80.  Please make sure that this", "driver_library_mismatch"),
    # https://github.com/open-mpi/ompi/issues/7312: UCX's shared-memory transport out of segments
    ("[1579192987.880374] [HOSTNAME:440443:0]            sys.c:619  UCX  ERROR shmget(size=4263936 flags=0x7b0) for "
     "mm_recv_desc failed: No space left on device, please check shared memory limits by 'ipcs -l'\n"
     "[1579192987.880437] [HOSTNAME:440443:0]        mm_sysv.c:69   UCX  ERROR failed to allocate 4259952 bytes with mm "
     "for mm_recv_desc", "shm_too_small"),
    # UCX's own error (src/uct/sm/mm/base/mm_iface.c: ucs_error("mm_iface failed to allocate receive FIFO")) and the
    # crash that follows it (openucx/ucx#11683: /dev/shm short, the FIFO falls back to the heap, SIGSEGV in MPI_Init;
    # the crash line as ompi/ucx print it, openucx/ucx#4657): the failed allocation is the cause
    ("UCX  ERROR mm_iface failed to allocate receive FIFO\n"
     "[b1232:77724:0:78357] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x580)",
     "shm_too_small"),
    # pyxis's own words when it cannot run enroot at all (NVIDIA/pyxis enroot.c: "pyxis: couldn't execute enroot
    # command", then enroot's log), with the log line of https://github.com/NVIDIA/pyxis/issues/62 (enroot could not
    # make its runtime directory: enroot.conf not read)
    ("slurmstepd: error: pyxis: couldn't execute enroot command\n"
     "slurmstepd: error: pyxis:     mkdir: cannot create directory '/run/user/1000': Permission denied",
     "container_start_failed"),
]


@pytest.mark.parametrize("text,cause", CASES)
def test_each_class_leads_with_its_cause(text, cause):
    findings = diagnose_text(text)
    assert findings and findings[0].cause == cause, [(f.cause, f.confidence) for f in findings]


def test_a_duplicate_gpu_names_more_ranks_than_gpus_among_the_three():
    # https://github.com/facebookresearch/ViewDiff/issues/24's class: four processes on a one-GPU machine end in
    # NCCL's duplicate-GPU check, which stale ranks and shared GPUs end in too: duplicate_gpu leads, gpu_ordinal follows
    findings = diagnose_text("ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nLast error:\n"
                             "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1000")
    assert [f.cause for f in findings[:3]][:2] == ["duplicate_gpu", "gpu_ordinal"]


def test_a_disk_or_quota_line_in_enroots_log_still_leads_over_the_runtimes_own_failure():
    # the runtime's failure is where the start stopped; a disk quota in what it printed is why (pyxis#91's class;
    # composed of pyxis's message and GNU tar's error format)
    findings = diagnose_text("slurmstepd: error: pyxis: couldn't execute enroot command\n"
                             "slurmstepd: error: pyxis:     tar: ./usr/lib: Cannot mkdir: Disk quota exceeded")
    assert findings[0].cause == "disk_full", [(f.cause, f.confidence) for f in findings]
