"""A cause's fix fits the shape of it that the log shows (issue 51; the class found running hf_trainer.py with
`--width 66`: config_divisibility's fix told a model whose width its heads do not divide to change the world size).
Signals whose shape needs another fix carry their own (`S(..., fix=...)`); each test is a real excerpt, its page in
the `# source` comment."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import corpus, diagnose_text

ENTRIES = {entry.path: entry for entry in corpus.load()}

# source: https://github.com/NVIDIA/nvidia-docker/issues/1138: the SSH user outside the docker group
DOCKER_SOCKET = ("docker: Got permission denied while trying to connect to the Docker daemon socket at "
                 "unix:///var/run/docker.sock: Post http://%2Fvar%2Frun%2Fdocker.sock/v1.40/containers/create?name="
                 "supervisely-agent-nvIRrxReD45ZBGxFQzVTlI1vV1ALy1H4: dial unix /var/run/docker.sock: connect: "
                 "permission denied.\nSee 'docker run --help'.\n")

# source: https://github.com/european-dynamics-rnd/OneNet/issues/4: a plain-HTTP private registry
PLAIN_HTTP_REGISTRY = """\
Pulling be-dataapp-provider ... error
ERROR: for be-dataapp-provider  Get "https://109.232.32.194:5000/v2/": http: server gave HTTP response to HTTPS client
ERROR: Get "https://109.232.32.194:5000/v2/": http: server gave HTTP response to HTTPS client
"""

# source: https://github.com/easydiffusion/easydiffusion/issues/1093: no CUDA build of that torch for aarch64
NO_DISTRIBUTION = """\
ERROR: Could not find a version that satisfies the requirement torch==1.13.1+cu116 (from versions: 1.8.0, 1.8.1, 1.9.0, 1.10.0, 1.10.1, 1.10.2, 1.11.0, 1.12.0, 1.12.1, 1.13.0, 1.13.1, 2.0.0)
ERROR: No matching distribution found for torch==1.13.1+cu116
"""

# source: https://github.com/jiaw-z/CoR-GS/issues/23: the script's CUDA_VISIBLE_DEVICES named a GPU the machine lacks
# (the fix that worked: CUDA_VISIBLE_DEVICES=0); most threads of this message end the same way
NO_GPU_VISIBLE = """\
  File "./.local/lib/python3.8/site-packages/torch/cuda/__init__.py", line 293, in _lazy_init
    torch._C._cuda_init()
RuntimeError: No CUDA GPUs are available
"""


@pytest.mark.parametrize("text, cause, words", [
    (DOCKER_SOCKET, "permission_denied", "docker group"),
    (PLAIN_HTTP_REGISTRY, "image_pull_failed", "insecure-registries"),
    (NO_DISTRIBUTION, "import_error", "torch==1.13.1+cu116"),
    (NO_GPU_VISIBLE, "docker_no_gpu_runtime", "CUDA_VISIBLE_DEVICES"),
])
def test_the_fix_names_what_this_shape_of_the_cause_needs(text, cause, words):
    first = diagnose_text(text)[0]
    assert first.cause == cause, first
    assert words in first.fix, first.fix


@pytest.mark.parametrize("path, cause, words", [
    ("launcher_args/b3-horovod-978.log", "launcher_args", "--oversubscribe"),
    ("ib_config/b31-ompi-openib-ib-port-disabled.log", "ib_config", "btl_openib_allow_ib"),
    # enroot's GPU hook finding no nvidia-container-cli: the node's package, not Docker's runtime configuration
    ("docker_no_gpu_runtime/b11-pyxis-110.log", "docker_no_gpu_runtime", "libnvidia-container-tools"),
])
def test_corpus_logs_of_those_shapes_get_their_fix(path, cause, words):
    first = diagnose_text(ENTRIES[path].text)[0]
    assert first.cause == cause, first
    assert words in first.fix, first.fix


def test_the_plain_shapes_keep_their_causes_fix():
    # the image's own name wrong keeps image_pull_failed's general fix; a path the rank cannot write keeps
    # permission_denied's
    assert "docker login" in diagnose_text("Error response from daemon: pull access denied for foo/bar")[0].fix
    first = diagnose_text("PermissionError: [Errno 13] Permission denied: '/data/ckpt'")[0]
    assert first.cause == "permission_denied" and "writable volume" in first.fix


# source: https://github.com/Esri/arcgis-python-api/issues/743: a DataLoader worker's collate, out of host memory
CPU_ALLOCATOR = """\
RuntimeError: Caught RuntimeError in DataLoader worker process 0.
Original Traceback (most recent call last):
  File "/home/lino/anaconda3/envs/arcgis181/lib/python3.7/site-packages/torch/utils/data/_utils/worker.py", line 178, in _worker_loop
    data = fetcher.fetch(index)
RuntimeError: [enforce fail at CPUAllocator.cpp:64] . DefaultCPUAllocator: can't allocate memory: you tried to allocate 402653184 bytes. Error code 12 (Cannot allocate memory).
"""
# source: https://github.com/MIC-DKFZ/nnUNet/issues/2213: numpy's subclass of MemoryError
NUMPY_ARRAY = ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 1.61 GiB for an array with shape "
               "(753, 536, 536) and data type float64")


@pytest.mark.parametrize("text", [CPU_ALLOCATOR, NUMPY_ARRAY])
def test_host_memory_short_with_no_kill_is_named_so_not_as_an_oom_kill(text):
    first = diagnose_text(text)[0]
    assert first.cause == "oom_killed", first
    assert first.fix.startswith("the host ran short of memory") and "records no kill" in first.fix, first.fix


def test_a_kill_recorded_keeps_the_oom_killers_fix():
    first = diagnose_text("[12345.678] Out of memory: Killed process 4242 (python) total-vm:123kB")[0]
    assert first.cause == "oom_killed" and "killed by the OOM killer" in first.fix


# source: https://github.com/pytorch/pytorch/issues/37577: libtorch_cpu's AVX2 code on a CPU without AVX
SIGILL_AVX = """\
Program received signal SIGILL, Illegal instruction.
0x00007fffe9076f17 in _GLOBAL__sub_I_BinaryOpsKernel.cpp.AVX2.cpp ()
   from /home/j/src/pytorch/torch/lib/libtorch_cpu.so
"""


def test_an_illegal_instruction_names_the_cpu_a_build_was_made_for():
    # evidence families may carry their own fix too (families.FAMILY_FIXES): SIGILL's causes speak of GPUs and
    # system libraries, the fix of the CPU the binary needs
    first = diagnose_text(SIGILL_AVX)[0]
    assert "illegal instruction (SIGILL)" in first.fix and "AVX-512" in first.fix, first


# source: https://github.com/NVIDIA/nvidia-container-runtime/issues/16: dockerd not starting after the NVIDIA runtime
# was added to its configuration
DOCKER_DAEMON_DOWN = """\
Job for docker.service failed because the control process exited with error code. See "systemctl status docker.service" and "journalctl -xe" for details.
Mar 05 17:55:44 svstation systemd[1]: Failed to start Docker Application Container Engine.
Mar 05 17:55:44 svstation systemd[1]: docker.service: Unit entered failed state.
Mar 05 17:55:44 svstation systemd[1]: docker.service: Failed with result 'exit-code'.
"""


def test_the_container_daemon_down_is_told_to_look_at_the_daemon_not_to_add_a_runtime():
    first = diagnose_text(DOCKER_DAEMON_DOWN)[0]
    assert first.cause == "docker_no_gpu_runtime", first
    assert "daemon.json" in first.fix and "journalctl -u docker" in first.fix, first.fix
