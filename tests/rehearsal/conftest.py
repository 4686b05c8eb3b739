"""The rehearsal tier: tests on the rehearsal cluster (Docker Engines, sshd, network namespaces; root, Linux;
see README's "The rehearsal cluster"). `sandbox`: one cluster of 3 nodes for the whole session, torn down at
its end. Tests marked `sandbox_teardown` change or remove that cluster, so they run after every other test.
Only one session may hold the rehearsal cluster on a machine: its addresses and paths are machine-wide."""
from __future__ import annotations

import pytest
from clusterctl_helpers import sandbox_skip_reason, wait_for_leases_to_lapse


def pytest_collection_modifyitems(config, items):
    last = [item for item in items if item.get_closest_marker("sandbox_teardown")]
    if last:
        items[:] = [item for item in items if not item.get_closest_marker("sandbox_teardown")] + last


@pytest.fixture(scope="session")
def sandbox():
    """A 3-node sandbox with a Docker Engine per node (clusterctl.sandbox.Sandbox)."""
    reason = sandbox_skip_reason()
    if reason:
        pytest.skip(reason)
    from clusterctl.sandbox import down, up

    handle = up(3, docker=True)
    try:
        yield handle
    finally:
        down(handle.state_dir)


@pytest.fixture(autouse=True)
def leases_of_cut_off_nodes(request):
    """After a test that cut a node off, wait until no run holds a GPU lease on the cluster's nodes
    (node/leases.py): a run whose node was cut off as it ended leaves that node's leases to lapse (nobody
    could release them). Every other run releases its leases as it ends (before `run` returns, before
    `status` says ended): no wait after those, so a lease that outlives its run fails the next test."""
    if "sandbox" not in request.fixturenames:
        yield
        return
    sandbox, cut = request.getfixturevalue("sandbox"), []
    cut_network = sandbox.cut_network
    sandbox.cut_network = lambda name: (cut.append(name), cut_network(name))[-1]
    try:
        yield
    finally:
        del sandbox.cut_network
    if cut:
        wait_for_leases_to_lapse(sandbox)


class _Impersonations:
    """variant name -> the node showing it; the node is made to impersonate the variant when asked
    (Sandbox.impersonate: its sessions' PATH and env, its /sys/class), and keeps it until another
    variant takes the node."""

    NODES = {"h100x8_nvlink_8ib": "node1", "ib_all_down": "node2", "ibpanic": "node3", "zh_cn_shm64": "node1",
             "xid79_dmesg": "node3", "h100x4_metrics": "node3"}  # node3: reached as root (a sudo node's dmesg is the real one)

    def __init__(self, sandbox, root):
        self.sandbox, self.root, self.current = sandbox, root, {}

    def __getitem__(self, variant: str) -> str:
        node = self.NODES[variant]
        if self.current.get(node) != variant:
            self.sandbox.impersonate(node, self.root / variant)
            self._shows(node, self.root / variant)
            self.current[node] = variant
        return node

    def _shows(self, node: str, variant) -> None:
        """A new session on the node sees the variant (its bin/ on PATH, and within the session user's reach): the
        harness's own check, so that a stand-in out of reach fails here, saying so, not as a wrong verdict."""
        from clusterctl_helpers import node_ssh_run

        import warnings

        for attempt in range(2):
            code, out = node_ssh_run(self.sandbox, node, f'echo "$PATH"; [ -x "{variant}/bin" ] && ls "{variant}/bin"')
            if str(variant / "bin") in out and code == 0:  # on PATH, and within the session user's reach
                if attempt:
                    warnings.warn(f"{node} showed {variant.name} only after a second impersonation (first: {seen!r})")
                return
            seen = out
            self.sandbox.impersonate(node, variant)  # once more, then give up saying what was seen
        log = self.sandbox.node(node).sshd_log
        raise AssertionError(f"{node} does not show {variant.name} after impersonating it: a session saw "
                             f"{seen!r}; {log}: {log.read_text(errors='replace')[-2000:] if log.exists() else 'absent'}")

    def restore(self) -> None:
        for node in list(self.current):
            self.sandbox.impersonate(node, None)
        self.current.clear()


@pytest.fixture(scope="module")
def hardware_sandbox(sandbox):
    """The session sandbox, whose `node_of[variant]` names a node impersonating that stand-in variant
    of tests/fixtures/hardware/ (set up on first use, undone at the end of the module)."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    # The stand-ins run as each node's SSH user, node2's a non-root one: a checkout under a 0700 directory
    # (`mktemp -d`, a home) is out of its reach, and its PATH lookup then fell through to the real ibstat (CI
    # saw node2 read "no InfiniBand"). So they run from a copy anyone may read, removed at the end.
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    copy = Path(tempfile.mkdtemp(prefix="clusterctl-hardware-", dir="/var/tmp"))
    os.chmod(copy, 0o755)
    for name in ("hardware", "tools", "health"):  # the stand-ins, and the captured outputs they print
        shutil.copytree(fixtures / name, copy / name)
    impersonations = _Impersonations(sandbox, copy / "hardware")
    sandbox.node_of = impersonations
    try:
        yield sandbox
    finally:
        impersonations.restore()
        del sandbox.node_of
        shutil.rmtree(copy, ignore_errors=True)
