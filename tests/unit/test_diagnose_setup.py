"""Causes and classes added after batches 1-3's first scores (issue 51): a launcher's failed SSH session, an
NVIDIA kernel module of another version than its libraries, NCCL topology files for another machine, a launch
that started ranks twice or too few. Fixtures are real public
logs (corpus entries with their `# source:`, or lines quoted from the named public thread)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from clusterctl.diagnose import corpus, diagnose_text
from clusterctl.diagnose.rules import RULE_OF
from clusterctl.node import heal_policy

REPO = Path(__file__).resolve().parents[2]
ENTRIES = {entry.path: entry for entry in corpus.load()}
SPEC = importlib.util.spec_from_file_location("score_batch", REPO / "bench" / "score_batch.py")
score_batch = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(score_batch)

# https://github.com/NVIDIA/nccl/issues/1240 (batch 3): an Azure image's NCCL_GRAPH_FILE for another VM size
TOPO_FILE_LOG = """\
Spotllm:73025:73112 [0] NCCL INFO comm 0x2012b5e0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 100000 commId 0x151ada46fe52b960 - Init START
Spotllm:73025:73112 [0] NCCL INFO NCCL_TOPO_FILE set by environment to /opt/microsoft/ncv4/topo.xml
Spotllm:73025:73112 [0] NCCL INFO Setting affinity for GPU 0 to ffffff
Spotllm:73025:73112 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /opt/microsoft/ncv4/graph.xml

Spotllm:73025:73112 [0] graph/search.cc:719 NCCL WARN XML Import Channel : dev 1 not found.
Spotllm:73025:73112 [0] NCCL INFO graph/search.cc:749 -> 2
"""


@pytest.mark.parametrize("path, cause", [
    ("ssh_failed/b2-deepspeed-4907.log", "ssh_failed"),  # DeepSpeed's ssh check exits 255
    ("ssh_failed/b3-hpcac-apac-1.log", "ssh_failed"),  # ... and its `not reachable via ssh` error
    ("ssh_failed/deepspeedai-DeepSpeed-5709.log", "ssh_failed"),  # pdsh: Permission denied (publickey,password)
    ("driver_library_mismatch/b2-shine-cluster-30.log", "driver_library_mismatch"),
    ("driver_library_mismatch/yahoo-TensorFlowOnSpark-108.log", "driver_library_mismatch"),
    ("launcher_args/b1-lightning-4389.log", "launcher_args"),  # every GLOBAL_RANK started twice (Slurm tasks)
    ("launcher_args/b3-lightning-8707.log", "launcher_args"),  # ranks 0-3 of MEMBER n/8 only (no srun)
])
def test_a_class_added_after_the_first_scores_is_named_first(path, cause):
    findings = diagnose_text(ENTRIES[path].text)
    assert findings[0].cause == cause, [(f.cause, f.evidence) for f in findings]


def test_ssh_refusals_are_not_a_file_permission_and_name_the_unreachable_node():
    findings = diagnose_text(ENTRIES["ssh_failed/b3-hpcac-apac-1.log"].text)
    assert findings[0].cause == "ssh_failed" and "gadi-gpu-v100-0011" in findings[0].fix
    assert diagnose_text(ENTRIES["ssh_failed/deepspeedai-DeepSpeed-5709.log"].text)[0].cause == "ssh_failed"


def test_a_topology_file_for_another_machine_is_named_with_the_file():
    finding = diagnose_text(TOPO_FILE_LOG)[0]
    assert finding.cause == "nccl_topo_file" and "/opt/microsoft/ncv4/" in finding.fix


def test_the_new_causes_have_a_fix_and_a_heal_class():
    for cause in ("ssh_failed", "driver_library_mismatch", "nccl_topo_file"):
        assert len(RULE_OF[cause].fix) > 60 and heal_policy.TABLE[cause] == "node"


def test_a_normal_roll_call_is_no_launch_error():
    lines = "\n".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4" for r in range(4))
    causes = [f.cause for f in diagnose_text(lines + "\nRuntimeError: CUDA out of memory. Tried to allocate 2 GiB")]
    assert causes[0] == "cuda_oom" and "launcher_args" not in causes


@pytest.mark.parametrize("label, cause", [
    ("other:passwordless_ssh_missing", "ssh_failed"),
    ("other:driver_library_mismatch_after_unattended_upgrade", "driver_library_mismatch"),
    ("other:nccl_graph_file_for_wrong_vm_size", "nccl_topo_file"),
    ("other:rdma_retransmit_exceeded_link_fault", "ib_config"),
    ("other:ib_mtu_mismatch_between_nodes", "ib_config"),
    ("other:docker_bridge_network_isolation", "nic_mismatch"),
    ("other:slurm_ntasks_per_node_mismatch_duplicate_ranks", "launcher_args"),
    ("other:slurm_job_launched_without_srun", "launcher_args"),
    ("other:uneven_data_length_across_ranks", "collective_mismatch"),
    ("other:ssh_session_closed_sighup", "sighup_session_closed"),
    ("other:rank0_preprocessing_exceeds_nccl_timeout", "nccl_timeout_slow_rank"),
    ("other:hostname_resolves_to_127_0_1_1", "nic_mismatch"),
    ("other:torch_versions_differ_across_nodes", "version_mismatch"),
    ("other:master_port_in_use", "port_in_use"),
    ("other:stale_processes_holding_gpu", "duplicate_gpu"),  # "processes" holds "roce": words, not letters
    ("other:roce_gid_index_wrong", "ib_config"),
    # names whose meaning is no vocabulary cause stay misses
    ("other:jax_slurm_local_rank_used_as_device_id_with_per_task_gpus",
     "other:jax_slurm_local_rank_used_as_device_id_with_per_task_gpus"),
    ("other:nccl_release_bug_fixed_by_upgrade", "other:nccl_release_bug_fixed_by_upgrade"),
    ("other:mpi4py_imported_after_torch_breaks_mpich_init", "other:mpi4py_imported_after_torch_breaks_mpich_init"),
    ("other:library_mismatch_in_image", "other:library_mismatch_in_image"),
    ("other:firewall_blocks_ports", "other:firewall_blocks_ports"),
    ("other:nccl_too_new_for_framework", "other:nccl_too_new_for_framework"),
])
def test_the_aliases_written_before_batches_4_to_6(label, cause):
    assert score_batch.label_of(label) == cause


@pytest.mark.parametrize("path", ["p2p_unsupported/b1-ml-engineering-issue1.log",
                                  "p2p_unsupported/b3-pytorch-73790.log"])
def test_one_host_stopping_inside_nccls_setup_without_an_error_is_the_peer_to_peer_hang(path):
    # both threads: IOMMU off in the BIOS (or NCCL_P2P_DISABLE=1) ended the hang
    causes = [f.cause for f in diagnose_text(ENTRIES[path].text)]
    assert causes[0] == "p2p_unsupported" and "rank_hang" in causes


def test_a_stop_inside_nccl_with_an_error_or_on_two_hosts_is_no_peer_to_peer_hang():
    one_host = ENTRIES["p2p_unsupported/b1-ml-engineering-issue1.log"].text
    failed = one_host + "\nRuntimeError: CUDA error: an illegal memory access was encountered\n" + \
        "DeepWhite:21288:21288 [0] NCCL INFO NET/IB : No device found.\n"
    assert diagnose_text(failed)[0].cause != "p2p_unsupported"
    two_hosts = one_host + "\nOtherBox:1:1 [0] NCCL INFO Bootstrap : Using enp1s0:192.168.50.22<0>\n"
    assert "p2p_unsupported" not in [f.cause for f in diagnose_text(two_hosts)]


@pytest.mark.parametrize("text, cause", [
    # https://github.com/NVIDIA/nvidia-container-toolkit/issues/1269: a program's own "name: " is no pdsh host prefix
    ("nvidia-container-cli: initialization error: nvml error: driver not loaded", "docker_no_gpu_runtime"),
    # https://github.com/hiyouga/LlamaFactory/issues/5216: any launcher missing from PATH, in sh's words
    ("08/20/2024 19:04:44 - INFO - llamafactory.cli - Initializing distributed tasks at: 10.188.240.13:2951\n"
     "/bin/sh: 1: torchrun: not found", "launcher_missing"),
    # https://github.com/pytorch/pytorch/issues/100691: a GPU another process holds (exclusive-process mode)
    ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\nCUDA kernel errors might be "
     "asynchronously reported at some other API call, so the stacktrace below might be incorrect.", "duplicate_gpu"),
])
def test_message_classes_in_other_programs_words(text, cause):
    assert diagnose_text(text)[0].cause == cause


def test_a_dashed_host_prefix_is_still_a_host():
    from clusterctl.diagnose.logformat import parse_lines
    lines, _ = parse_lines("gpu-node-1: RuntimeError: CUDA error: out of memory\n"
                           "nvidia-container-cli: initialization error: nvml error: driver not loaded\n")
    assert [line.host for line in lines] == ["gpu-node-1", None]
    assert lines[1].text.startswith("nvidia-container-cli: ")


@pytest.mark.parametrize("text, cause", [
    # https://github.com/google-deepmind/alphafold/issues/1023: XLA's accelerator allocator (JAX)
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7406166528 "
     "bytes.", "cuda_oom"),
    # https://github.com/AILab-CVC/GPT4Tools/issues/18 (its title): python-fire refusing the launcher's --local_rank
    ("Could not consume arg: --local_rank", "launcher_args"),
])
def test_other_frameworks_words_for_a_known_family(text, cause):
    assert diagnose_text(text)[0].cause == cause


def test_cuda_803_reads_as_a_module_library_mismatch_first_and_an_old_driver_next():
    # https://github.com/CompVis/stable-diffusion/issues/439 (CUDA: a display driver / CUDA driver version mismatch)
    text = ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
            "NumCudaDevices() that might have already set an error? Error 803: system has unsupported display driver "
            "/ cuda driver combination")
    causes = [f.cause for f in diagnose_text(text)]
    assert causes[:2] == ["driver_library_mismatch", "driver_too_old"]


@pytest.mark.parametrize("text, cause", [
    # https://github.com/open-mpi/ompi/issues/12103: Open MPI's TCP transport refused between the nodes
    ("------------------------------------------------------------\nA process or daemon was unable to complete a TCP "
     "connection\nto another process:\n  Local host:    3eed81735a60\n  Remote host:   0cdbe1810ec3\nThis is usually "
     "caused by a firewall on the remote host. Please\ncheck that any firewall (e.g., iptables) has been disabled and\n"
     "try again.\n------------------------------------------------------------\n"
     "--------------------------------------------------------------------------\n"
     "ORTE was unable to reliably start one or more daemons.", "nccl_socket_error"),
    # https://github.com/deepspeedai/DeepSpeed/issues/6914: DeepSpeed's batch arithmetic over the world size
    ("[rank0]: AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu "
     "* gradient_acc_step * world_size 8 != 2 * 1 * 1", "config_divisibility"),
    # https://github.com/NJU-PCALab/STAR/issues/44: DDP's cross-rank check of the model's parameters
    ("RuntimeError: DDP expects same model across all ranks, but Rank 3 has 2247 params, while rank 0 has "
     "inconsistent 0 params.", "collective_mismatch"),
    # https://github.com/VITA-MLLM/VITA/issues/42: vLLM's Ray placement group has fewer GPUs than asked for
    ("ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement group.",
     "insufficient_resources"),
    # NCCL's allocator (src/include/alloc.h: WARN("Failed to CUDA calloc %ld bytes", ...)), and its async form
    ("ncclUnhandledCudaError: Failed to CUDA calloc async 2432 bytes", "cuda_oom"),
])
def test_launchers_and_libraries_words_for_a_known_family(text, cause):
    assert diagnose_text(text)[0].cause == cause


@pytest.mark.parametrize("text, cause", [
    # https://github.com/EleutherAI/gpt-neox/issues/757: a parallel degree that does not divide the GPUs
    ("AssertionError: NeoXArgs.calculate_derived() (global_num_gpus / pp_size) / mp_size [(4 / 4) / 2] must be a "
     "whole number", "config_divisibility"),
    # https://github.com/NVIDIA/TensorRT-LLM/issues/108: an engine built for 2 ranks started as 1 (launcher_args
    # until batch 29, whose collectors labelled two such logs config_divisibility: the layout against the world size)
    ("AssertionError: Engine world size (2) != Runtime world size (1)", "config_divisibility"),
    # https://huggingface.co/internlm/internlm-xcomposer2-vl-7b/discussions/9: bf16 asked of a V100
    ("Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0",
     "gpu_arch_unsupported"),
    # https://github.com/aws/aws-ofi-nccl/issues/785: a static topology XML lacking this machine's attributes
    ("2a8874e7d1e6:2196:2275 [1] graph/xml.h:101 NCCL WARN Attribute arch of node cpu not found\n"
     "2a8874e7d1e6:2196:2275 [1] NCCL INFO graph/topo.cc:493 -> 3", "nccl_topo_file"),
    # https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/2824: the OFI plugin loading another libibverbs
    ("NCCL INFO NET/Plugin: libnccl-net-ofi.so: /opt/rdma-core/build/lib/libibverbs.so.1: version "
     "`IBVERBS_PRIVATE_34' not found (required by /usr/lib/x86_64-linux-gnu/libefa.so.1)\n"
     "NCCL INFO NET/Plugin: Could not find: ofi", "net_plugin_incompatible"),
    # https://www.hiascend.com/document/caselibrary/detail/ptacase_0041: gloo on the wrong NIC of a multi-NIC host
    ("[E ProcessGroupGloo.cpp:138] Gloo connectFullMesh failed with [...] no error\n"
     "RuntimeError: Gloo connectFullMesh failed with [...] no error", "nic_mismatch"),
    # https://github.com/awslabs/awsome-distributed-ai/issues/292: the net plugin against another libfabric
    ("[0] NCCL INFO NET/Plugin : dlerror=/opt/amazon/efa/lib/libfabric.so.1: version `FABRIC_1.7' not found "
     "(required by /fsx/lib/libnccl-net.so) No plugin found (libnccl-net.so), using internal implementation",
     "net_plugin_incompatible"),
    # https://github.com/jax-ml/jax/issues/18391: XLA without an NCCL library to load
    ("external/xla/xla/service/gpu/nccl_utils.cc:133: NCCL operation ncclGetUniqueId(&id) failed: Unable to load NCCL "
     "library. Multi-GPU collectives will not work.;", "import_error"),
    # https://github.com/mindspore-lab/mindcv/issues/480: started without the launcher that sets its environment
    ("RuntimeError: Role name '' is invalid. Maybe you are trying to call 'mindspore.communication.init()' without "
     "using 'mpirun', which will make MindSpore load several environment variables and check their validation.",
     "launcher_args"),
    # https://github.com/Lightning-AI/pytorch-lightning/issues/6169: more GPUs asked than the allocation shows
    ("pytorch_lightning.utilities.exceptions.MisconfigurationException: \n                You requested GPUs: [0, 1]\n"
     "                But your machine only has: [0]\n", "gpu_ordinal"),
    # https://github.com/lzx1413/PytorchSSD/issues/50: DataParallel over more device ids than GPUs (torch's old check)
    ("    raise AssertionError(\"Invalid device id\")\nAssertionError: Invalid device id", "gpu_ordinal"),
    # https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/main/docs/slurm-troubleshooting.md: the cloud refusing nodes
    ("srun: error: Job allocation 2 has been revoked\nresume.py ERROR: ... \"Quota 'C2_CPUS' exceeded. Limit: 300.0 in "
     "region europe-west4.\"", "insufficient_resources"),
    # https://docs.olcf.ornl.gov/systems/crusher_quick_start_guide.html: ROCm without a code object for the device's mode
    ("\"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!\"\nsrun: error: crusher129: task 0: "
     "Aborted", "gpu_arch_unsupported"),
])
def test_classes_from_batches_7_to_9s_misses_in_any_programs_words(text, cause):
    assert diagnose_text(text)[0].cause == cause


def test_a_log_pasted_through_a_blog_reads_as_the_program_printed_it():
    # https://blog.csdn.net/huang1024rui/article/details/127900544: the page typeset the apostrophe
    assert diagnose_text("RuntimeError: Distributed package doesn\u2019t have NCCL built in")[0].cause == \
        "platform_backend_unsupported"
    # the same for quotes and a full-width colon (CJK pages)
    assert diagnose_text("RuntimeError\uff1a Distributed package doesn\u2019t have NCCL built in")[0].cause == \
        "platform_backend_unsupported"


@pytest.mark.parametrize("text, extension", [
    # the rehearsal's own (2026-11-29): DeepSpeed's CPU accelerator compiling its shm op where `c++` did not resolve
    ("RuntimeError: Error building extension 'deepspeed_shm_comm': [1/3] c++ -MMD -MF shm_interface.o.d "
     "-DTORCH_EXTENSION_NAME=deepspeed_shm_comm\nsubprocess.CalledProcessError: Command '['ninja', '-v']' returned "
     "non-zero exit status 127.", "deepspeed_shm_comm"),
    # https://github.com/databrickslabs/dolly/issues/156 (corpus: extension_build_failed/dolly-156.log)
    ("RuntimeError: Error building extension 'fused_adam'\n[2023-05-11 20:12:52,931] [INFO] "
     "[launch.py:318:sigkill_handler] Killing subprocess 62415", "fused_adam"),
])
def test_an_extension_that_fails_to_compile_at_run_time_is_named_with_it_not_as_a_missing_launcher(text, extension):
    first = diagnose_text(text)[0]
    assert first.cause == "extension_build_failed" and f"({extension})" in first.fix
    assert heal_policy.TABLE["extension_build_failed"] == "job"
