"""Message classes met in the misses of batches 10-12 read again after batch 12's changes (issue 51; their first
scores are in docs/diagnosis.md): each case is a class of message in some program's words, with the public page its
excerpt comes from; where another thread than the batch's own shows the class, that thread's excerpt is here too."""
from __future__ import annotations

from clusterctl.diagnose import corpus, diagnose_text
from clusterctl.diagnose.engine import with_similar_causes
from clusterctl.diagnose.similar import similar_cases

ENTRIES = {entry.path: entry for entry in corpus.load()}

# https://developer.metax-tech.com/forum/u/avaarg/430: torchrun running `-m llamafactory.cli`, which starts torchrun
# again: every worker starts its own rendezvous store on MASTER_PORT and all but one fail to bind it
NESTED_TORCHRUN = (
    "torchrun --nproc_per_node=8 --master_port=29500 \\\n-m llamafactory.cli train /tmp/train_config.yaml\n\n"
    "RuntimeError: The server socket has failed to listen on any local network address.\nport: 29500\nuseIpv6: 0\n"
    "code: -98\nname: EADDRINUSE\nmessage: address already in use\n\nTraceback (most recent call last):\n"
    'File "/opt/conda/lib/python3.12/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", '
    "line 79, in _create_tcp_store\nstore = TCPStore(\n...\n"
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\nllamafactory.cli FAILED\n"
    "Root Cause (first observed failure):\nrank: 5 (local_rank: 5)\nexitcode: 1")


def test_a_launcher_running_another_launcher_is_the_launch_command_not_a_taken_port():
    findings = diagnose_text(NESTED_TORCHRUN)
    assert [f.cause for f in findings][:2] == ["launcher_args", "port_in_use"]
    assert "a launcher runs another launcher" in findings[0].fix


def test_a_plain_torchrun_whose_port_is_taken_is_still_the_port():
    # https://github.com/meta-llama/llama-cookbook/issues/186: one torchrun, its port held by another run
    text = ("torchrun --nnodes 1 --nproc_per_node 4  examples/finetuning.py --enable_fsdp --model_name "
            "/home/xhuang/llama-recipes-main/model_hf/7B/ --use_peft --peft_method lora\n"
            "[W socket.cpp:426] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already "
            "in use).\n[W socket.cpp:426] [c10d] The server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - "
            "Address already in use).\n[E socket.cpp:462] [c10d] The server socket has failed to listen on any local "
            "network address.")
    assert diagnose_text(text)[0].cause == "port_in_use"


def test_an_old_nccl_failing_bare_at_setup_is_named_among_the_three():
    # https://github.com/coreweave/ml-containers/pull/10: NCCL 2.7.8 failing on A100 NVLink nodes, fixed by a newer image
    text = "NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8"
    causes = [f.cause for f in diagnose_text(text)]
    assert "nccl_too_old" in causes[:3] and causes[0] != "nccl_too_old"  # a runner-up: the transports lead
    # a current NCCL's bare system error names no age
    newer = "NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error, NCCL version 2.21.5"
    assert "nccl_too_old" not in [f.cause for f in diagnose_text(newer)]


def test_host_slots_handed_to_ssh_says_so_in_the_fix():
    # https://github.com/athena-team/athena/issues/139: fixed by a newer Open MPI (horovodrun -H localhost:4)
    finding = diagnose_text("ssh: Could not resolve hostname localhost:4: Temporary failure in name resolution")[0]
    assert finding.cause == "launcher_args" and "`localhost:4` is a host list's host:slots form" in finding.fix


def test_a_path_of_the_launching_host_missing_on_a_node_is_named_in_the_fix():
    # https://github.com/deepspeedai/Megatron-DeepSpeed/issues/126: pdsh replays the launch host's paths on the node
    text = ("172.16.220.18: bash: line 0: cd: /data/asc23/src_zero3: No such file or directory 172.16.220.18: bash: "
            "/home/lxw/anaconda3/envs/sys_py37/bin/python: No such file or directory pdsh@wo")
    finding = diagnose_text(text)[0]
    assert finding.cause == "launcher_missing"
    assert "/bin/python` exists on the launching host, not there" in finding.fix


def test_a_remote_daemon_without_its_libraries_names_the_non_interactive_environment():
    # https://docs.open-mpi.org/en/main/launching-apps/troubleshooting.html#errors-about-missing-libraries
    text = ("shell$ mpirun -n 1 --host node1.example.com mpi_hello\n"
            "prted: error while loading shared libraries: libimf.so: cannot open shared object file: No such file or "
            "directory\n------\nA daemon (pid 11893) died unexpectedly with status 127 while\n"
            "attempting to launch so we are aborting.")
    finding = diagnose_text(text)[0]
    assert finding.cause == "launcher_missing" and "cannot load `libimf.so` in a non-interactive login" in finding.fix


def test_interfaces_listed_by_a_one_host_run_stalled_in_nccl_do_not_outrank_the_peer_to_peer_hang():
    # https://github.com/NVIDIA/nccl-tests/issues/115 (corpus copy): two GPUs of one host stop in NCCL's setup while
    # NCCL lists veth interfaces; the IOMMU was the cause (amd_iommu=off fixed it)
    causes = [f.cause for f in diagnose_text(ENTRIES["p2p_unsupported/b12-nccl-tests-115.log"].text)]
    assert causes[:2] == ["p2p_unsupported", "nic_mismatch"]


def test_a_one_host_stall_where_nccl_uses_or_expects_infiniband_keeps_infiniband_first():
    # https://github.com/NVIDIA/nccl/issues/941 (corpus copy): an IB plugin loaded in a container without the devices
    assert diagnose_text(ENTRIES["ib_config/NVIDIA-nccl-941-no-ib-device-container.log"].text)[0].cause == "ib_config"


def test_a_launcher_stopped_from_outside_leads_as_unknown_with_the_sender_as_next_step():
    # https://github.com/PrimeIntellect-ai/prime-rl/issues/1360: the rl launcher stopped torchrun because the
    # orchestrator or the inference server crashed; nothing in the trainer's log names it
    text = ("[default0]:12:13:46    INFO Waiting for training batch to arrive\n"
            "W1130 12:13:49.388000 124326 torch/distributed/elastic/agent/server/api.py:723] Received 15 death signal, "
            "shutting down workers\n"
            "W1130 12:13:49.389000 124326 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 124533 "
            "closing signal SIGTERM")
    findings = with_similar_causes(diagnose_text(text), similar_cases(text, 3))
    assert findings[0].cause == "unknown"
    assert "the launcher itself received signal 15" in findings[0].fix


def test_the_launcher_receiving_sighup_is_still_the_closed_session():
    # https://github.com/OpenMOSS/MOSS/issues/237: the same notice for signal 1 under nohup
    text = "Message: 'Received 1 death signal, shutting down workers'"
    assert diagnose_text(text)[0].cause == "sighup_session_closed"


def test_a_bare_nccl_system_error_names_the_three_transports_it_most_often_is():
    # https://github.com/Oneflow-Inc/libai/issues/415: fixed with NCCL_SOCKET_IFNAME=bond0 (NCCL had picked docker/veth)
    text = ("F20221031 10:52:42.193126 106986 eager_nccl_comm_manager.cpp:75] Check failed: ncclCommInitRank(comm, "
            "device_vec.size(), nccl_unique_id, rank) : unhandled system error (2). To see more detail, please run "
            "OneFlow with system variable NCCL_DEBUG=INFO\n*** Check failure stack trace: ***")
    assert {f.cause for f in diagnose_text(text)[:3]} == {"shm_too_small", "nccl_socket_error", "nic_mismatch"}
