"""SSH trust on the rehearsal cluster: no agent forwarding unless asked for, and a key the node
does not accept (or one locked by a passphrase) fails fast as `unreachable` with the fix, without
ever prompting, even with no terminal and stdin closed. Each records its row of docs/reliability.md."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from clusterctl_helpers import Cli, host_entry, variant

pytestmark = pytest.mark.sandbox

CONNECT_TIMEOUT = 3


def _exec(cli: Cli, inventory, *argv: str, env: dict, timeout: float = 60) -> tuple[int, dict, float]:
    """`clusterctl exec` in its own session (no controlling terminal) with stdin closed: a prompt
    could not be answered, so one would show as a timeout."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "clusterctl", "exec", "--json", "-i", str(inventory), "--", *argv],
                          env=env, cwd=str(cli.state_dir.parent), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, start_new_session=True)
    return proc.returncode, json.loads(proc.stdout), time.monotonic() - started


def test_agent_forwarding_is_off_unless_the_inventory_asks_for_it(sandbox, tmp_path, reliability):
    from clusterctl.inventory.load import load_inventory

    row = reliability("SSH agent forwarding, with an ssh-agent running on the controller",
                      "off by default: no SSH_AUTH_SOCK on any node (ssh.forward_agent defaults to false)")
    cli = Cli(tmp_path / "state")
    assert all(h.ssh.forward_agent is False for h in load_inventory(sandbox.inventory_path).hosts)
    socket_path = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket_path)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not socket_path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        subprocess.run(["ssh-add", str(sandbox.identity_file)], env={**os.environ, "SSH_AUTH_SOCK": str(socket_path)},
                       check=True, capture_output=True, timeout=10)
        env = {**cli.env, "SSH_AUTH_SOCK": str(socket_path)}
        code, doc, seconds = _exec(cli, sandbox.inventory_path, "sh", "-c", 'echo "${SSH_AUTH_SOCK:-none}"', env=env)
    finally:
        agent.kill()
        agent.wait(timeout=10)
    assert code == 0, doc
    assert {name: entry["stdout"] for name, entry in doc["hosts"].items()} == {n: "none\n" for n in doc["hosts"]}
    row.observe(f"exit 0 in {seconds:.1f} s; SSH_AUTH_SOCK unset on node1..3 while the controller's agent held "
                "the cluster key", seconds=None)


def test_a_key_the_node_refuses_fails_fast_as_unreachable_and_never_prompts(sandbox, tmp_path, reliability):
    row = reliability("a node whose authorized_keys lacks our key; another given a passphrase-locked key "
                      "(no terminal, stdin closed)", "both `unreachable` with 'authentication failed' and the fix, "
                      "within ssh.connect_timeout; no prompt; the others answer")
    stranger, locked = tmp_path / "stranger", tmp_path / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True, timeout=30)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "a passphrase", "-f", str(locked)], check=True,
                   timeout=30)

    def change(doc):
        doc["ssh"]["connect_timeout"] = CONNECT_TIMEOUT
        host_entry(doc, "node2")["identity_file"] = str(stranger)
        host_entry(doc, "node3")["identity_file"] = str(locked)

    inventory = variant(sandbox, tmp_path / "keys.yaml", change)
    cli = Cli(tmp_path / "state")
    env = {k: v for k, v in cli.env.items() if k != "SSH_AUTH_SOCK"}
    code, doc, seconds = _exec(cli, inventory, "hostname", env=env, timeout=CONNECT_TIMEOUT + 30)
    assert code == 3, doc
    assert doc["hosts"]["node1"]["stdout"] == sandbox.node("node1").hostname + "\n"
    for node in ("node2", "node3"):
        entry = doc["hosts"][node]
        user = sandbox.node(node).ssh_user
        assert entry["status"] == "unreachable" and f"authentication failed as {user}" in entry["detail"], entry
        assert "ssh.identity_file" in entry["detail"]  # the fix
        assert entry["duration_s"] <= CONNECT_TIMEOUT + 1
    assert seconds < CONNECT_TIMEOUT + 10
    row.observe(f"exit 3 in {seconds:.1f} s; node2: {doc['hosts']['node2']['detail'][:120]}; node3 (locked key) "
                f"`unreachable` in {doc['hosts']['node3']['duration_s']:.1f} s; node1 answered",
                seconds=max(doc["hosts"][n]["duration_s"] for n in ("node2", "node3")))
