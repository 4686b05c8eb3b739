"""Message classes met in the misses of issue 51's batch 33 after its first score (bench/first_scores/batch-33.md):
each test names the class, with the real lines that met it (their pages in `# source` comments)."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text

# source: https://github.com/openucx/ucx/issues/9383 (Open MPI over UCX under srun: batch-33h/04). UCX connecting to
# 172.17.0.1, the docker0 address every node has: the peer published the wrong interface's address
UCX_TO_DOCKER0 = """\
[1695332443.361791] [histamine0:1224050:0]            sock.c:323  UCX  ERROR   connect(fd=42, dest_addr=172.17.0.1:54351) failed: Connection refused
[histamine0:1224050] pml_ucx.c:424  Error: ucp_ep_create(proc=1) failed: Destination is unreachable
[histamine0:1224050] pml_ucx.c:477  Error: Failed to resolve UCX endpoint for rank 1
[histamine0:1224050] *** An error occurred in MPI_Bcast
[histamine0:1224050] *** MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,
slurmstepd: error: *** STEP 1484.0 ON histamine0 CANCELLED AT 2023-09-21T21:40:43 ***
srun: Job step aborted: Waiting up to 32 seconds for job step to finish.
srun: error: histamine0: task 0: Exited with exit code 16
srun: error: histamine1: task 1: Killed
"""

# source: https://github.com/OpenRLHF/OpenRLHF/issues/265 (vLLM workers joining the actor's weight broadcast:
# batch-33b/01); the page wraps the line after the address
C10D_TO_CONTAINER_BRIDGE = """\
(RayWorkerVllm pid=207931, ip=10.0.1.75) [E socket.cpp:922] [c10d] The client socket has timed out after 1800s while trying to connect to (172.17.0.2
, 44737).
(ActorModelRayActor pid=207260, ip=10.0.1.75) [E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3856, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800268 milliseconds before timing out.
"""

# source: https://github.com/huggingface/accelerate/issues/2249 (DeepSpeed's pdsh launcher: batch-33b/07)
MASTER_ADDR_IS_A_PATH = """\
; export ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE=none; export ACCELERATE_DEEPSPEED_ZERO3_INIT=false;  cd /xxx; /data/miniconda3/bin/python -u -m deepspeed.launcher.launch --world_info=eyI5LjkxLjQuMjUx
IjogWzAsIDEsIDIsIDMsIDQsIDUsIDYsIDddLCAiOS4yMDYuNjMuNTkiOiBbMCwgMSwgMiwgMywgNCwgNSwgNiwgN119 --node_rank=%n --master_addr=/root/cuda11.8.bashrc --master_port=45459 --argsxxx --save_steps=5000 --logging_dir=log --report_to=tensorboard
9.206.63.59: /root/cuda11.8.bashrc
9.91.4.251: /root/cuda11.8.bashrc
9.206.63.59: [2023-12-14 11:07:51,172] [INFO] [comm.py:594:init_distributed] cdb=None
"""

# source: https://github.com/CSCfi/pytorch-ddp-examples/issues/1 (a site's pytorch module without torchrun: batch-33h/01)
STEP_PROGRAM_ABSENT = """\
slurmstepd: error: execve(): torchrun: No such file or directory
srun: error: g1301: task 0: Exited with exit code 2
srun: launch/slurm: _step_signal: Terminating StepId=3022331.0
"""

# source: https://github.com/intel/ipex-llm/issues/11877 (vLLM on Intel GPUs over oneCCL: batch-33f/05)
CCL_SHM_PROVIDER = """\
2024:08:21-10:24:26:( 4456) |CCL_ERROR| atl_ofi_helper.cpp:867 atl_ofi_get_prov_list: fi_getinfo error: ret -61, providers 0
2024:08:21-10:24:26:( 4456) |CCL_ERROR| atl_ofi_helper.cpp:907 atl_ofi_get_prov_list: can't create providers for name shm
2024:08:21-10:24:26:( 4456) |CCL_ERROR| atl_ofi.cpp:243 init: can't find suitable provider
failed to initialize ATL
"""

# source: https://github.com/hiyouga/ChatGLM-Efficient-Tuning/issues/137 (rank 1 waiting while rank 0 tokenized for
# 30 minutes: batch-33b/03)
WAITING_IN_MAIN_PROCESS_FIRST = """\
Running tokenizer on dataset: 47%|███████████████▊ | 3169000/6811963 [30:11<38:27, 1578.58 examples/s]Traceback (most recent call last):
File "/mnt/data/smart_health_02/fanyongqi/workspace/ChatMedNorm/src/train_sft.py", line 94, in
main()
File "/mnt/data/smart_health_02/fanyongqi/workspace/ChatMedNorm/src/train_sft.py", line 25, in main
dataset = preprocess_data(dataset, tokenizer, data_args, training_args, stage="sft")
File "/mnt/data/smart_health_02/fanyongqi/workspace/ChatMedNorm/src/utils/common.py", line 506, in preprocess_data
with training_args.main_process_first(desc="dataset map pre-processing"):
File "/mnt/data/smart_health_02/fanyongqi/anaconda3/envs/chatglm_etuning/lib/python3.9/contextlib.py", line 119, in enter
return next(self.gen)
File "/mnt/data/smart_health_02/fanyongqi/anaconda3/envs/chatglm_etuning/lib/python3.9/site-packages/transformers/training_args.py", line 1891, in main_process_first
torch.distributed.barrier()
File "/mnt/data/smart_health_02/fanyongqi/anaconda3/envs/chatglm_etuning/lib/python3.9/site-packages/torch/distributed/distributed_c10d.py", line 3328, in barrier
work = default_pg.barrier(opts=opts)
"""


@pytest.mark.parametrize("text, cause", [
    (UCX_TO_DOCKER0, "nic_mismatch"), (C10D_TO_CONTAINER_BRIDGE, "nic_mismatch"),
    (MASTER_ADDR_IS_A_PATH, "hostname_unresolvable"), (STEP_PROGRAM_ABSENT, "launcher_missing"),
    (CCL_SHM_PROVIDER, "shm_too_small"), (WAITING_IN_MAIN_PROCESS_FIRST, "nccl_timeout_slow_rank"),
])
def test_each_class_names_its_cause_first(text, cause):
    assert diagnose_text(text)[0].cause == cause, [f.cause for f in diagnose_text(text)]


def test_a_step_cancelled_with_no_task_failing_first_is_still_the_kill():
    text = "slurmstepd: error: *** STEP 1484.0 ON histamine0 CANCELLED AT 2023-09-21T21:40:43 ***\n"
    assert diagnose_text(text)[0].cause == "killed_by_signal"


def test_a_rendezvous_on_an_address_that_routes_is_still_the_rendezvous():
    text = C10D_TO_CONTAINER_BRIDGE.replace("(172.17.0.2\n, 44737)", "(10.0.1.20, 44737)")
    assert diagnose_text(text)[0].cause == "rdzv_unreachable", [f.cause for f in diagnose_text(text)]


def test_a_master_address_that_is_a_host_is_not_read_as_a_path():
    text = MASTER_ADDR_IS_A_PATH.replace("--master_addr=/root/cuda11.8.bashrc", "--master_addr=9.91.4.251")
    assert all(f.cause != "hostname_unresolvable" for f in diagnose_text(text))
