"""Message classes met in the misses of batches 20 to 25 (issue 51; their first scores, blind, are in
docs/diagnosis.md), in programs' own words (the format string's source named), never the batches' logs."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text

CASES = [
    # the TPU compiler's HBM check (as torch-xla and JAX raise it) and TensorFlow's BFC allocator: device memory
    ("RuntimeError: Resource exhausted: Ran out of memory in memory space hbm. Used 18.74G of 8.00G hbm. "
     "Exceeded hbm capacity by 10.74G.", "cuda_oom"),
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
     "shape[64,1024,1024] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
     "cuda_oom"),
    # Triton's libcuda_dirs() assertion (triton/common/build.py: msg = 'libcuda.so cannot found!'), and the loader's
    ("  File \"/opt/conda/lib/python3.10/site-packages/triton/common/build.py\", line 30, in libcuda_dirs\n"
     "AssertionError: libcuda.so cannot found!", "docker_no_gpu_runtime"),
    ("ImportError: libcuda.so.1: cannot open shared object file: No such file or directory", "docker_no_gpu_runtime"),
    # Open MPI's errmgr help text (orte/mca/errmgr/help-errmgr-base.txt, "lost-connection") for a daemon lost mid-job
    ("ORTE has lost communication with a remote daemon.\n\n  HNP daemon   : [[1,0],0] on node launcher\n"
     "  Remote daemon: [[1,0],3] on node worker-3\n\nThis is usually due to either a failure of the TCP network\n"
     "connection to the node, or possibly an internal failure of\nthe daemon itself.", "node_unreachable"),
    # enroot's bin/enroot-mount.c (err: "failed to mount: %s at %s") under pyxis, the mount refused
    ("slurmstepd: error: pyxis: container start failed with error code: 1\n"
     "slurmstepd: error: pyxis:     enroot-mount: failed to mount: /home/u/data at /tmp/enroot-data/user-0/c/data: "
     "Permission denied\nslurmstepd: error: pyxis: couldn't start container", "permission_denied"),
    # pyxis' slurmd-side setup (pyxis_slurmd.c: "couldn't mkdir %s"), then Slurm's spank.c for the failed plugin
    ("error: pyxis: couldn't mkdir /run/pyxis/100005: No such file or directory\n"
     "error: spank: required plugin spank_pyxis.so: init_post_opt() failed with rc=-1", "container_start_failed"),
    # Open MPI's TCP BTL (opal/mca/btl/tcp/btl_tcp_endpoint.c, BTL_ERROR: "received unexpected process identifier %s",
    # "connect() to %s failed: %s (%d)"): hosts sharing docker0's address reach themselves
    ("[node-a][[4711,1],0][btl_tcp_endpoint.c:640:mca_btl_tcp_endpoint_recv_connect_ack] received unexpected "
     "process identifier [[4711,1],1]", "nic_mismatch"),
    ("[node-b][[4711,1],1][btl_tcp_endpoint.c:800:mca_btl_tcp_endpoint_complete_connect] connect() to 172.17.0.1 "
     "failed: Connection refused (111)", "nic_mismatch"),
    # NCCL's return-code trace (NCCLCHECK's INFO "%s:%d -> %d") through its bootstrap's socket calls, nothing else
    ("node-a:301:412 [0] NCCL INFO misc/socket.cc:567 -> 2\nnode-a:301:412 [0] NCCL INFO misc/socket.cc:618 -> 2\n"
     "node-a:301:412 [0] NCCL INFO bootstrap.cc:270 -> 2", "nic_mismatch"),
    # verl's ray_trainer.py _check_resource_available (f"Total available GPUs {total_available_gpus} is less than
    # total desired GPUs {total_required_gpus}"): the job sees fewer GPUs than it asks for
    ("ValueError: Total available GPUs 8.0 is less than total desired GPUs 16", "insufficient_resources"),
    # --- after batch 24
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
    # --- after batch 25
    # Slurm's slurm_errno.c (ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE, ESLURM_ACCOUNTING_POLICY): a request no node
    # can ever fit, a QOS refusing it: the request to change (its FAQ), not capacity to wait for
    ("sbatch: error: Batch job submission failed: Requested node configuration is not available",
     "slurm_request_invalid"),
    ("salloc: error: Job submit/allocate failed: Job violates accounting/QOS policy (job submit limit, user's size "
     "and/or time limits)", "slurm_request_invalid"),
    # ...while a reason of capacity (ESLURM_NODES_BUSY) stays what it was
    ("srun: error: Unable to allocate resources: Requested nodes are busy", "insufficient_resources"),
    # dash's and bash's words for a program path that is not there: an image without an SSH server
    ("/bin/sh: 1: /usr/sbin/sshd: not found", "ssh_failed"),
    ("bash: /usr/sbin/sshd: No such file or directory", "ssh_failed"),
    # NCCL's enqueue check (INFO "ncclMaxSharedMem %d exceeds device/fn maxSharedMem %zu"): kernels built for less
    # (after batch 32: the NCCL build older than the GPU's arch, two labellers of three: gpu_arch_unsupported)
    ("gpu-a:4766:4780 [0] NCCL INFO ncclMaxSharedMem 99328 exceeds device/fn maxSharedMem 98304", "gpu_arch_unsupported"),
    # libnvidia-container's errors from enroot's NVIDIA hook under pyxis: the container's start failed
    ("error: pyxis:     nvidia-container-cli: initialization error: nvml error: driver not loaded\n"
     "error: pyxis:     [ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1\n"
     "error: pyxis: couldn't start container", "container_start_failed"),
    # ...and the same library's error under Docker: the GPU runtime cannot give the container its GPUs
    ("docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI "
     "runtime create failed: runc create failed: unable to start container process: error during container init: "
     "error running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n"
     "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown.", "docker_no_gpu_runtime"),
    # the banner of the native signal handler PyTorch-based programs print (vLLM, TensorRT-LLM, Megatron logs)
    ("!!!!!!! Segfault encountered !!!!!!!\n  File \"<unknown>\", line 0, in ncclCommInitRank", "segfault"),
]


@pytest.mark.parametrize("text,cause", CASES)
def test_each_class_leads_with_its_cause(text, cause):
    findings = diagnose_text(text)
    assert findings and findings[0].cause == cause, [(f.cause, f.confidence) for f in findings]


def test_a_daemon_ssh_never_started_is_still_ssh_not_a_lost_node():
    text = ("ssh: connect to host worker-3 port 22: Connection refused\n"
            "PRTE has lost communication with a remote daemon.")
    assert diagnose_text(text)[0].cause == "ssh_failed"


# after batch 21 (its first score, blind, is in docs/diagnosis.md): a site's job_submit filter retiring an option form
# (Slurm's job_submit/lua plugin prints the site's own text as `sbatch: error: <text>`)
@pytest.mark.parametrize("text", [
    "sbatch: error: Parameter --gres=gpu:1 no longer acceptable, please switch to --gpus=1",
    "srun: error: Option --gpus-per-task is no longer supported on this cluster",
])
def test_a_site_filter_retiring_an_option_form_is_the_request(text):
    assert diagnose_text(text)[0].cause == "slurm_request_invalid"


def test_a_node_that_answers_again_is_not_a_failure_on_its_own():
    assert not any(f.cause == "node_unreachable" for f in diagnose_text("Node gpu004 now responding"))


def test_a_missing_key_of_the_jobs_own_is_not_a_launcher_misuse():
    assert not any(f.cause == "launcher_args" for f in diagnose_text("KeyError: 'RANKING_SCORE'"))
