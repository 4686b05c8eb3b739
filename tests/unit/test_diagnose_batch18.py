"""Message classes met in the misses of batch 18 (issue 51; its first score, blind, is in docs/diagnosis.md): each a
class in some program's own words (the format string in its source, named), never the batch's logs."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text

CASES = [
    # accelerate/commands/launch.py's own check: "Tried to launch distributed communication on port `{port}`, but
    # another process is utilizing it"
    ("ConnectionError: Tried to launch distributed communication on port 29500, but another process is utilizing it. "
     "Please specify a different port (such as using the `--main_process_port` flag)", "port_in_use"),
    # Open MPI's opal/mca/btl/tcp/btl_tcp_proc.c: "btl: tcp: Match incoming connection from %s %s with locally
    # known IP %s failed (iface %d/%d)!" (Horovod's docs: hangs due to non-routed network interfaces)
    ("[host-a:01234] btl: tcp: Match incoming connection from [[1000,1],1] 172.17.0.2 with locally known IP "
     "10.0.0.5 failed (iface 0/2)!", "nic_mismatch"),
    # torch's c10/cuda/driver_api.cpp: "Can't find " name ": " dlerror(), an NVML function the host driver lacks
    ("RuntimeError: r.nvmlDeviceGetNvLinkRemoteDeviceType_ INTERNAL ASSERT FAILED at \"../c10/cuda/driver_api.cpp\":27, "
     "please report a bug to PyTorch. Can't find nvmlDeviceGetNvLinkRemoteDeviceType: /usr/lib/x86_64-linux-gnu/"
     "libnvidia-ml.so.1: undefined symbol: nvmlDeviceGetNvLinkRemoteDeviceType", "driver_too_old"),
    # torch/utils/cpp_extension.py loading a JIT-built module its build did not leave
    ("  File \"/opt/conda/lib/python3.10/site-packages/torch/utils/cpp_extension.py\", line 1936, in "
     "_import_module_from_library\n    module = importlib.util.module_from_spec(spec)\nImportError: /work/megatron/"
     "fused_kernels/build/fused_mix_prec_layer_norm_cuda.so: cannot open shared object file: No such file or directory",
     "extension_build_failed"),
    # CaffeOnSpark's caffe-distri/src/main/cpp/util/socket.cpp: "ERROR: No peer by name [" name "]"
    ("E0101 10:00:00.000000  1234 socket.cpp:276] ERROR: No peer by name [worker-7]", "hostname_unresolvable"),
    # a site's sbatch filter asking for a typed GRES (job_submit.lua plugins word it so)
    ("sbatch: error: ERROR: Invalid GPU specification. Use --gres=gpu:<type>:<count>.\n"
     "sbatch: error: Batch job submission failed: Unspecified error", "slurm_request_invalid"),
]


@pytest.mark.parametrize("text,cause", CASES)
def test_each_class_leads_with_its_cause(text, cause):
    findings = diagnose_text(text)
    assert findings and findings[0].cause == cause, [(f.cause, f.confidence) for f in findings]


def test_a_jit_build_cut_off_inside_its_compiler_line_names_the_build_among_the_three():
    # torch's ninja build line for a DeepSpeed op, the log cut before its result
    findings = diagnose_text("[1/2] /usr/local/cuda/bin/nvcc  -DTORCH_EXTENSION_NAME=fused_adam "
                             "-DTORCH_API_INCLUDE_EXTENSION_H -c multi_tensor_adam.cu -o multi_tensor_adam.cuda.o")
    assert "extension_build_failed" in [f.cause for f in findings[:3]]
