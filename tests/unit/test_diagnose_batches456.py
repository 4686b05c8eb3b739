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
    # the fabric plugin (aws-ofi-nccl) and its libfabric do not fit NCCL: registration fails, invalid argument
    "net_plugin_incompatible/b6-aws-ofi-nccl-584.log",
    "net_plugin_incompatible/b6-awsome-distributed-ai-278.log",
    "net_plugin_incompatible/awslabs-awsome-distributed-ai-203.log",
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


def test_the_fabric_plugin_out_of_locked_memory_is_the_fabric_setup():
    # https://github.com/NVIDIA/nccl/issues/563: the same registration, but out of memory (the memlock limit)
    text = ("10.0.87.143: 10.0.87.143: ip-10-0-87-143:149:298 [5] register_mr_buffers:465 NCCL WARN NET/OFI Unable to "
            "register memory (type = 1) for device 0. RC: 12, Error: Cannot allocate memory")
    assert diagnose_text(text)[0].cause == "ib_config"


def test_the_new_cause_has_a_fix_a_heal_class_and_an_alias():
    import importlib.util
    from clusterctl.diagnose.rules import RULE_OF
    from clusterctl.node import heal_policy
    spec = importlib.util.spec_from_file_location("score_batch", Path(__file__).resolve().parents[2] / "bench"
                                                  / "score_batch.py")
    score_batch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(score_batch)
    assert len(RULE_OF["net_plugin_incompatible"].fix) > 60 and heal_policy.TABLE["net_plugin_incompatible"] == "job"
    assert score_batch.label_of("other:nccl_libfabric_incompat") == "net_plugin_incompatible"
    assert score_batch.label_of("other:efa_installer_too_old") == "net_plugin_incompatible"


def test_a_jobs_own_exception_that_no_rule_explains_keeps_the_lead_over_a_resembling_case():
    """The rehearsal's Slurm job raises `RuntimeError: injected failure on rank 3` (tests/fixtures/jobs/faults.py):
    the lone `unknown` quoting it stays first; the nearest known cases follow as runner-ups."""
    from clusterctl.diagnose import diagnose_text

    log = ('Traceback (most recent call last):\n  File "/workspace/output/test-jobs/faults.py", line 33, in main\n'
           '    raise RuntimeError(f"injected failure on rank {rank}")\nRuntimeError: injected failure on rank 3\n')
    findings = diagnose_text(log)
    assert findings[0].cause == "unknown" and "injected failure on rank 3" in findings[0].evidence
