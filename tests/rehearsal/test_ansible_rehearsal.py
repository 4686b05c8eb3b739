"""On the rehearsal cluster (issue 25): the DeepOps-shaped layout, an `[all]` section with
ansible_host, a group and an `[all:vars]` bastion in ansible_ssh_common_args (a ProxyCommand
through node1), the key in group_vars/, the port in host_vars/ (group_vars/all names a wrong one),
reaches every other node through the bastion, as real Ansible (`ansible -m raw`) does."""
from __future__ import annotations

import json
import shutil
import sys
import subprocess

import pytest

from clusterctl_helpers import Cli

pytestmark = pytest.mark.sandbox


def _layout(tmp_path, sandbox):
    bastion, nodes = sandbox.nodes[0], sandbox.nodes[1:]
    ssh = (f"ssh -i {sandbox.identity_file} -o UserKnownHostsFile={sandbox.known_hosts} -o StrictHostKeyChecking=yes "
           f"-o BatchMode=yes -W %h:%p -q root@{bastion.address}")
    root = tmp_path / "config"
    (root / "group_vars").mkdir(parents=True)
    (root / "host_vars").mkdir()
    lines = ["[all]"] + [f"{n.name} ansible_host={n.listen_address}" for n in nodes]  # node3: fabric only
    lines += ["", "[gpu-servers]"] + [n.name for n in nodes]
    lines += ["", "[all:vars]", "ansible_user=root",
              f"ansible_ssh_common_args='-o ProxyCommand=\"{ssh}\" -o UserKnownHostsFile={sandbox.known_hosts} "
              "-o StrictHostKeyChecking=yes'"]
    (root / "inventory").write_text("\n".join(lines) + "\n")
    (root / "group_vars" / "all.yml").write_text("ansible_port: 2226  # wrong: host_vars must win\n")
    (root / "group_vars" / "gpu-servers.yml").write_text(f"ansible_ssh_private_key_file: {sandbox.identity_file}\n")
    for node in nodes:  # a sudo user's node: its own user and port in host_vars, as [all:vars] says root
        user = f"ansible_user: {node.ssh_user}\n" if node.ssh_user != "root" else ""
        (root / "host_vars" / f"{node.name}.yml").write_text(f"ansible_port: {node.ssh_port}\n{user}")
    return root, bastion, nodes


def test_the_deepops_layout_reaches_every_node_through_its_bastion(sandbox, tmp_path):
    root, bastion, nodes = _layout(tmp_path, sandbox)
    cli = Cli(tmp_path / "state")
    env = {k: v for k, v in cli.env.items() if k != "SSH_AUTH_SOCK"}
    proc = subprocess.run([sys.executable, "-m", "clusterctl", "exec", "--json", "-i", str(root / "inventory"),
                           "--", "sh", "-c", 'echo "$SSH_CONNECTION"'], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    for node in nodes:
        client_address = document["hosts"][node.name]["stdout"].split()[0]
        # the node was reached from the bastion (over the fabric network for the node only there)
        assert client_address in (bastion.address, bastion.fabric_address)
    if shutil.which("ansible"):
        ansible = subprocess.run(["ansible", "-i", str(root / "inventory"), "gpu-servers", "-m", "raw", "-a",
                                  'echo "$SSH_CONNECTION"'], env={**env, "ANSIBLE_HOST_KEY_CHECKING": "True",
                                                                "ANSIBLE_HOME": str(tmp_path / "ansible")},
                                 capture_output=True, text=True, timeout=180)
        assert ansible.returncode == 0, ansible.stdout + ansible.stderr
        assert ansible.stdout.count(bastion.address) + ansible.stdout.count(bastion.fabric_address) >= len(nodes)
