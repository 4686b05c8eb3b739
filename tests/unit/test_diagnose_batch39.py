"""Message classes met in the misses of issue 51's batch 39 after its first score (bench/first_scores/batch-39.md):
each test names the class, with the real lines that met it (their pages in `# source` comments), and what the
class must not take."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from clusterctl.diagnose import diagnose_text
from clusterctl.diagnose.rules_code import UNBRACKETED_IPV6_URL
from clusterctl.diagnose.textmatch import compiled

# source: https://github.com/open-mpi/ompi/issues/13523 (batch-39a/06): Open MPI 5 under srun --mpi=pmi2
OMPI5_SINGLETONS = """\
No PMIx server was reachable, but a PMI1/2 was detected.
If srun is being used to launch application, 4 singletons will be started.
Hello from proc 0 of 1
Hello from proc 0 of 1
Hello from proc 0 of 1
Hello from proc 0 of 1
"""
# source: https://github.com/flashlight/wav2letter/issues/138 (batch-39e/01): mpirun in a container without ssh
NO_RSH_AGENT = """\
The value of the MCA parameter "plm_rsh_agent" was set to a path
that could not be found:

  plm_rsh_agent: ssh : rsh

Please either unset the parameter, or check that the path is correct
[4665-asr-w2l-1547109629:219410] [[INVALID],INVALID] FORCE-TERMINATE AT Not found:-13 - error plm_rsh_component.c(327)
[4665-asr-w2l-1547109629:219410] *** Process received signal ***
[4665-asr-w2l-1547109629:219410] Signal: Segmentation fault (11)
[4665-asr-w2l-1547109629:219410] Signal code: Address not mapped (1)
[4665-asr-w2l-1547109629:219410] Failing at address: (nil)
"""
# source: https://github.com/kubeflow/mpi-operator/issues/642 (batch-39e/03): an MPIJob's worker on OpenShift
SSHD_NO_CHROOT = """\
oc logs tensorflow-benchmarks-worker-0
Server listening on 0.0.0.0 port 22.
Server listening on :: port 22.
chroot("/run/sshd"): Operation not permitted [preauth]
chroot("/run/sshd"): Operation not permitted [preauth]
chroot("/run/sshd"): Operation not permitted [preauth]
"""
# source: https://github.com/mpi4py/shmem4py/pull/28 (batch-39f/06): MPICH over libfabric picking PSM3 in a container
PSM3_NO_NIC = """\
28463ef361be:rank0: PSM3 can't open nic unit: 0 (err=23)
Abort(673306767): Fatal error in internal_Init_thread: Other MPI error, error stack:
internal_Init_thread(67).: MPI_Init_thread(argc=(nil), argv=(nil), required=0, provided=0x7ffcc61dcfac) failed
MPID_Init(513)...........:
MPIDI_OFI_init_local(604):
create_vni_context(982)..: OFI endpoint open failed (ofi_init.c:982:create_vni_context:Cannot allocate memory)
"""
# source: https://github.com/triton-inference-server/fastertransformer_backend/issues/111 (batch-39h/04)
DOCKER_RUN_NO_GPUS = """\
docker run -it \\
    --shm-size=1g --ulimit memlock=-1 \\
    -v ${WORKSPACE}:/workspace \\
    --name ft_backend_builder \\
    ${TRITON_DOCKER_IMAGE} bash
/workspace/build/fastertransformer_backend/build/bin/gpt_gemm 8 1 32 16 64 4096 50257 1 1 1
[FT][INFO] Arguments:
[FT][INFO]   batch_size: 8

terminate called after throwing an instance of 'std::runtime_error'
  what():  [FT][ERROR] CUDA runtime error: CUDA driver version is insufficient for CUDA runtime version /workspace/build/fastertransformer_backend/build/_deps/repo-ft-src/src/fastertransformer/models/multi_gpu_gpt/gpt_gemm.cc:74

Aborted (core dumped)
"""
# source: https://github.com/vllm-project/vllm/issues/7815 (batch-39h/05): vLLM's Ray executor on multi-NIC nodes
RAY_NODE_IP = """\
(autoscaler +7s) Error: No available node types can fulfill resource request {'node:<IP>': 0.001, 'GPU': 1.0}. Add suitable node types to this cluster to resolve this issue.
INFO 08-23 10:16:22 ray_utils.py:174] Waiting for creating a placement group of specs for 10 seconds. specs=[{'node:<IP>': 0.001, 'GPU': 1.0}, {'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status` to see if you have enough resources.
"""
# source: https://github.com/deepspeedai/DeepSpeed/issues/6497 (batch-39c/02): DeepSpeed's `hostname -I` on Arch
HOSTNAME_I = """\
[2024-09-05 04:11:37,288] [INFO] [comm.py:667:init_distributed] Not using the DeepSpeed or dist launchers, attempting to detect MPI environment...
hostname: invalid option -- 'I'
Try 'hostname --help' or 'hostname --usage' for more information.
Traceback (most recent call last):
  File "/code/git/learnable-activations/mflow.py", line 429, in <module>
    run_experiment(args)
"""
# source: https://github.com/deepspeedai/DeepSpeed/issues/826 (batch-39c/05): the same call, its exit status only
HOSTNAME_I_STATUS = """\
Traceback (most recent call last):
  File "/home/me/projectsds/ai/venv/lib/python3.8/site-packages/deepspeed/utils/distributed.py", line 67, in mpi_discovery
    result = subprocess.check_output(hostname_cmd, shell=True)
  File "/usr/lib/python3.8/subprocess.py", line 512, in run
    raise CalledProcessError(retcode, process.args,
subprocess.CalledProcessError: Command '['hostname -I']' returned non-zero exit status 64.
"""
# source: https://github.com/vllm-project/vllm/issues/42149 (batch-39h/03): vLLM's P2P NCCL connector binding IPv6
ZMQ_IPV6 = """\
(Worker_TP0 pid=27101) ERROR 05-09 16:34:35 [multiproc_executor.py:815] WorkerProc hit an exception.
(Worker_TP0 pid=27101) ERROR 05-09 16:34:35 [multiproc_executor.py:815] Traceback (most recent call last):
(Worker_TP0 pid=27101) ERROR 05-09 16:34:35 [multiproc_executor.py:815]   File "zmq/backend/cython/_zmq.py", line 1009, in zmq.backend.cython._zmq.Socket.bind
(Worker_TP0 pid=27101) ERROR 05-09 16:34:35 [multiproc_executor.py:815] zmq.error.ZMQError: No such device (addr='tcp://2605:340:cd51:4900:d73:4aba:b23d:2190:21001')
(EngineCore_DP0 pid=27036) ERROR 05-09 16:34:35 [core.py:842] EngineCore failed to start.
"""


def _first(log: str):
    return diagnose_text(log)[0]


def test_open_mpi_5_starting_singletons_under_srun_is_the_missing_pmi():
    first = _first(OMPI5_SINGLETONS)
    assert first.cause == "mpi_pmi_missing" and "srun --mpi=pmix" in first.fix, first


def test_mpirun_without_an_ssh_client_is_the_missing_launcher_not_its_segfault():
    first = _first(NO_RSH_AGENT)
    assert first.cause == "launcher_missing" and "openssh-client" in first.fix, first
    assert first.confidence > 0.6


def test_an_sshd_that_cannot_chroot_in_its_container_is_ssh_failing_with_the_capability_to_add():
    first = _first(SSHD_NO_CHROOT)
    assert first.cause == "ssh_failed" and "SYS_CHROOT" in first.fix, first


def test_a_fabric_provider_finding_no_nic_is_named_with_fi_provider_not_host_memory():
    findings = diagnose_text(PSM3_NO_NIC)
    assert findings[0].cause == "net_plugin_incompatible" and "FI_PROVIDER" in findings[0].fix, findings
    assert all(f.cause != "oom_killed" for f in findings[:1])


def test_cuda_finding_no_driver_in_a_container_started_without_gpus_is_the_missing_gpu_request():
    first = _first(DOCKER_RUN_NO_GPUS)
    assert first.cause == "docker_no_gpu_runtime" and "--gpus all" in first.fix, first


def test_the_same_error_in_a_container_given_its_gpus_stays_a_driver_too_old():
    given_gpus = DOCKER_RUN_NO_GPUS.replace("docker run -it", "docker run --gpus all -it")
    assert _first(given_gpus).cause == "driver_too_old"
    no_docker = DOCKER_RUN_NO_GPUS.split("/workspace/build/fastertransformer_backend/build/bin/gpt_gemm", 1)[1]
    assert _first(no_docker).cause == "driver_too_old"


def test_a_ray_placement_on_an_address_no_node_has_is_the_nic_the_driver_took():
    first = _first(RAY_NODE_IP)
    assert first.cause == "nic_mismatch" and "--node-ip-address" in first.fix and "VLLM_HOST_IP" in first.fix, first


def test_a_library_running_a_host_command_with_an_option_this_host_lacks_is_its_bug():
    for log in (HOSTNAME_I, HOSTNAME_I_STATUS):
        first = _first(log)
        assert first.cause == "library_bug" and "hostname" in first.fix, (log, first)


def test_an_ipv6_address_in_an_endpoint_without_brackets_is_the_librarys_formatting():
    first = _first(ZMQ_IPV6)
    assert first.cause == "library_bug" and "VLLM_HOST_IP" in first.fix, first


_IPV6_URL = compiled(UNBRACKETED_IPV6_URL)


@given(st.lists(st.integers(0, 0xFFFF), min_size=8, max_size=8), st.integers(1, 65535))
def test_only_an_unbracketed_ipv6_endpoint_is_taken_for_the_formatting_bug(groups, port):
    address = ":".join(f"{g:x}" for g in groups)
    assert _IPV6_URL.search(f"bind failed (addr='tcp://{address}:{port}')")
    assert not _IPV6_URL.search(f"connecting to tcp://[{address}]:{port}")
    ipv4 = ".".join(str(g % 256) for g in groups[:4])
    assert not _IPV6_URL.search(f"connecting to tcp://{ipv4}:{port} and http://node-{groups[0]}:{port}/x")


# source: https://github.com/kubeflow/trainer/pull/2716 (batch-39e/04): a TrainJob's MPI runtime, the key mounted 0644
SSH_KEY_TOO_OPEN = """\
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@         WARNING: UNPROTECTED PRIVATE KEY FILE!          @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
Permissions 0644 for '/root/.ssh/id_rsa' are too open.
It is required that your private key files are NOT accessible by others.
This private key will be ignored.
Unable to load host key "/root/.ssh/id_rsa": bad permissions
Unable to load host key: /root/.ssh/id_rsa
sshd: no hostkeys available -- exiting.
"""


def test_a_key_others_can_read_is_ssh_failing_with_the_mode_to_give_it():
    first = _first(SSH_KEY_TOO_OPEN)
    assert first.cause == "ssh_failed" and "0600" in first.fix, first
