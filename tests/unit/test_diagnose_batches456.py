"""Message classes met in the misses of issue 51's batches 4-6 after their first scores (real public logs, now
training entries of the corpus with their `# source:`): each test names the class, not the thread. The first
scores themselves are in docs/diagnosis.md and bench/first_scores/."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from clusterctl.diagnose import corpus, diagnose_text

ENTRIES = {entry.path: entry for entry in corpus.load()}


@pytest.mark.parametrize("path", [
    # HCCL's own consistency checks between the two ends of a link, in its words
    "version_mismatch/b6-ascend-hccl-cann-version-mismatch.log",  # CANN versions are inconsistent
    "collective_mismatch/b6-ascend-hccl-ei0005-param-inconsistent.log",  # collective arguments inconsistent
    "nic_mismatch/b6-ascend-hccl-socket-ifname.log",  # the IFNAME named is not on this host
    "duplicate_gpu/b6-ascend-hccl-port-bind-device.log",  # the device's own port taken: two processes, one device
    # a library's refusal to run without P2P on consumer GPUs (Accelerate's check)
    "p2p_unsupported/b6-ChatGLM3-536.log",
    "p2p_unsupported/b6-MiniCPM-V-325.log",
    "p2p_unsupported/b6-peft-1927.log",
    # a store connect whose stated reason is a name that does not resolve, or an invalid address after one
    "hostname_unresolvable/b5-ai-on-eks-pr241.log",
    "hostname_unresolvable/b4-monarch-pr1571.log",
    # NCCL on a link-local address (fe80::%iface): an interface that routes nowhere beyond its link
    "nic_mismatch/b4-nccl-529.log",
    "nic_mismatch/b5-skypilot-4448.log",
    # pdsh running the launching node's interpreter path on a node that lacks it
    "launcher_missing/b5-megatron-deepspeed-125.log",
    # a checkpoint sharded for another model-parallel size than the ranks started
    "config_divisibility/b5-llama-551.log",
    # NCCL's NVLS multicast bind failing: the fabric manager, not a port
    "fabricmanager/b6-pytorch-177472.log",
    # NCCL rings that ranks built differently: the nodes' NCCL or NCCL_* settings differ
    "version_mismatch/b5-gitcode-21ee89b4.log",
    # NCCL's sysfs topology detection failing on a PCI path: an NCCL too old for the machine
    "nccl_too_old/b6-marian-dev-998.log",
])
def test_a_batch_4_to_6_class_is_named_first(path):
    findings = diagnose_text(ENTRIES[path].text)
    assert findings[0].cause == ENTRIES[path].cause, [(f.cause, f.evidence[:80]) for f in findings]


def test_a_virtual_interfaces_real_path_is_no_topology_failure():
    # NCCL's INFO about /sys/class/net/lo has no PCI device: routine on every host (batch 1, horovod-584)
    text = "paigcr-b-gpu-1011:4289:4343 [0] NCCL INFO Could not find real path of /sys/class/net/lo/device\n"
    assert "nccl_too_old" not in [f.cause for f in diagnose_text(text)]


def test_a_lone_unknown_is_led_by_the_nearest_known_case():
    # https://github.com/zai-org/ChatGLM2-6B/issues/262 (batch 4): no rule has the wording; the nearest case has
    text = ENTRIES["sighup_session_closed/b4-ChatGLM2-6B-262.log"].text
    from clusterctl.diagnose.engine import with_similar_causes
    from clusterctl.diagnose.similar import similar_cases
    findings = with_similar_causes(diagnose_text(text), similar_cases(text, 3, exclude_sources=[
        ENTRIES["sighup_session_closed/b4-ChatGLM2-6B-262.log"].source]))
    assert findings[0].cause != "unknown" and "unknown" in [f.cause for f in findings]
    assert findings[0].confidence < 0.5


def test_other_words_has_one_entry_per_cause():
    # a dict literal keeps the last of two equal keys silently: every cause once
    tree = ast.parse((Path(corpus.__file__).parent / "rules_words.py").read_text())
    keys = [k.value for node in ast.walk(tree) if isinstance(node, ast.Dict) for k in node.keys
            if isinstance(k, ast.Constant)]
    assert len(keys) == len(set(keys))
