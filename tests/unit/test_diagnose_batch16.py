"""Message classes met in the misses of batch 16 (issue 51; its first score, blind, is in docs/diagnosis.md): each a
class in some program's words, with the public source of its excerpt; the batch's own logs are not used here."""
from __future__ import annotations

import pytest

from clusterctl.diagnose import diagnose_text


def _traceback(source_line: str) -> str:
    """A Python traceback ending in an assertion, as the interpreter prints it, around a real source line."""
    return ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n    main()\n"
            "  File \"train.py\", line 41, in main\n    " + source_line + "\nAssertionError")


CASES = [
    # source lines from public training code (found with the corpus tools' exact-string search): a batch split
    # over the world, a divisor of a fixed count, a tensor's first dimension over the ranks
    (_traceback("assert config.total_bs % world_size == 0"), "config_divisibility"),
    (_traceback('assert 8 % world_size == 0, "world_size must be a divisor of 8"'), "config_divisibility"),
    (_traceback("assert input_tensor.shape[0] % world_size == 0"), "config_divisibility"),
    # Paddle's loader (dynload/dynamic_loader.cc) when a library is not on the node: PaddlePaddle/PaddleNLP#2980
    # (libcublas; the class's libnccl form is in PaddlePaddle/PaddleNLP#1646)
    ("RuntimeError: (PreconditionNotMet) The third-party dynamic library (libcublas.so) that Paddle depends on is not "
     "configured correctly. (error code is libcublas.so: cannot open shared object file: No such file or directory)",
     "import_error"),
]


@pytest.mark.parametrize("text,cause", CASES)
def test_each_class_leads_with_its_cause(text, cause):
    findings = diagnose_text(text)
    assert findings and findings[0].cause == cause, [(f.cause, f.confidence) for f in findings]


def test_nccls_optional_plugin_not_found_is_not_a_missing_library():
    # NCCL's INFO line on every node without a network plugin (NVIDIA/nccl issues quote it by the hundred)
    findings = diagnose_text("node1:2748:2748 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : "
                             "libnccl-net.so: cannot open shared object file: No such file or directory")
    assert not findings or findings[0].cause != "import_error"


def test_an_assertion_without_a_modulo_is_not_divisibility():
    findings = diagnose_text(_traceback("assert torch.cuda.is_available()"))
    assert not findings or findings[0].cause != "config_divisibility"
