"""Ansible inventories as Ansible reads them, differentially: for every inventory in the table
(NVIDIA DeepOps' and kubespray's samples as their users fill them in, group_vars/host_vars files
and directories, inventory directories, precedence between every layer, ranges, children, INI
and YAML), clusterctl's own reader must give, host by host and value by value, what it gives
reading `ansible-inventory --list`'s answer (the `ansible:` mode), and the hosts and groups
Ansible lists."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from clusterctl.inventory.load import load_inventory

from unit.test_ansible_inventory import PRECEDENCE, _tree

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ansible"
pytestmark = pytest.mark.skipif(shutil.which("ansible-inventory") is None,
                                reason="needs ansible-core (the reference): pip install -e .[test]")


def uncomment(text: str) -> str:
    """What a user does with a sample: the example host lines and [all:vars] settings switched on."""
    out = []
    for line in text.splitlines():
        if re.match(r"^#[A-Za-z]", line) or re.match(r"^# [\w-]+\d ansible_host=", line):
            line = line.lstrip("#").lstrip()
        out.append(line)
    return "\n".join(out) + "\n"


def listing(source: Path) -> dict:
    proc = subprocess.run(["ansible-inventory", "-i", str(source), "--list"], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def ansible_groups(data: dict) -> dict:
    """host -> every group Ansible puts it in (parents included), but all/ungrouped."""
    parents: dict = {}
    for group, body in data.items():
        for child in body.get("children", []) if isinstance(body, dict) else []:
            parents.setdefault(child, set()).add(group)
    result: dict = {}
    for group, body in data.items():
        for host in body.get("hosts", []) if isinstance(body, dict) else []:
            todo, found = [group], set()
            while todo:
                current = todo.pop()
                if current not in found:
                    found.add(current)
                    todo.extend(parents.get(current, ()))
            result.setdefault(host, set()).update(found - {"all", "ungrouped"})
    for host in data.get("_meta", {}).get("hostvars", {}):
        result.setdefault(host, set())
    return result


def host_view(host) -> tuple:
    return (host.name, host.address, host.ssh.port, host.ssh.user, host.ssh.identity_file, host.ssh.options,
            host.ssh.config_file, host.ssh.forward_agent, host.connection, host.gpus, host.nic, host.slots,
            tuple(sorted(host.groups)), host.become, host.become_user, host.become_method)


def assert_reads_like_ansible(source: Path) -> list:
    ours = load_inventory(source)
    theirs = load_inventory(f"ansible:{source}")
    assert [host_view(h) for h in ours.hosts if True] == [host_view(theirs.host(h.name)) for h in ours.hosts]
    assert {h.name for h in ours.hosts} == {h.name for h in theirs.hosts}
    expected = ansible_groups(listing(source))
    assert {h.name: set(h.groups) for h in ours.hosts} == expected
    return ours.hosts


def test_deepops_layout_with_a_bastion_group_vars_key_and_host_vars_port(tmp_path):
    root = tmp_path / "deepops"
    shutil.copytree(FIXTURES / "deepops", root)
    inventory = root / "inventory"
    inventory.write_text(uncomment(inventory.read_text()))
    (root / "group_vars" / "slurm-node.yml").write_text("ansible_ssh_private_key_file: ~/.ssh/gpu_key\n")
    (root / "host_vars" / "gpu02.yml").write_text("---\nansible_port: 2226\n")
    hosts = {h.name: h for h in assert_reads_like_ansible(inventory)}
    assert set(hosts) == {"mgmt01", "mgmt02", "mgmt03", "login01", "gpu01", "gpu02"}
    gpu02 = hosts["gpu02"]
    assert (gpu02.address, gpu02.ssh.port, gpu02.ssh.user) == ("10.0.2.2", 2226, "ubuntu")
    assert gpu02.ssh.identity_file == os.path.expanduser("~/.ssh/gpu_key")
    assert dict(gpu02.ssh.options) == {"ProxyCommand": "ssh -W %h:%p -q ubuntu@10.0.0.1"}
    assert hosts["mgmt01"].ssh.identity_file == os.path.expanduser("~/.ssh/id_rsa")  # [all:vars]
    assert {"slurm-node", "slurm-cluster", "slurm-nfs-client"} <= set(gpu02.groups)


def test_kubespray_sample_read_as_an_inventory_directory(tmp_path):
    root = tmp_path / "mycluster"
    shutil.copytree(FIXTURES / "kubespray", root)
    (root / "inventory.ini").write_text(uncomment((root / "inventory.ini").read_text()))
    hosts = {h.name: h for h in assert_reads_like_ansible(root)}
    assert hosts["node1"].address == "95.54.0.12" and {"kube_control_plane", "etcd"} <= set(hosts["node1"].groups)
    assert "kube_node" in hosts["node6"].groups


def test_every_layer_of_variables_wins_where_ansible_says(tmp_path):
    root = _tree(tmp_path / "prec", PRECEDENCE)
    hosts = {h.name: h for h in assert_reads_like_ansible(root / "hosts.yml")}
    assert hosts["n1"].ssh.port == 2200  # host_vars/ over every group layer
    assert hosts["n2"].ssh.port == 2003  # the inventory's host var over group_vars/
    assert hosts["n3"].ssh.port == 9999  # group_vars/child.yml: the first of child, child.yml, .yaml, .json
    assert hosts["n3"].ssh.user == "from-group-vars-all"  # group_vars/all over any inventory group var
    assert hosts["n3"].slots == 8 and hosts["n1"].slots == 4  # `other` (priority 10) after `parent` (same depth)
    assert dict(hosts["n3"].ssh.options) == {"StrictHostKeyChecking": "accept-new", "ProxyJump": "jump@bastion:2222"}
    assert hosts["n1"].ssh.user == "from-group-vars-all"  # group_vars/all over the inventory's group vars
    assert hosts["n1"].nic == "eth2"  # a directory's files in order, the later winning
    assert (hosts["n2"].become, hosts["n2"].become_user, hosts["n2"].become_method) == (True, "root", "sudo")


def test_an_inventory_directory_of_several_files_skips_what_ansible_skips(tmp_path):
    root = _tree(tmp_path / "inv", {
        "01-hosts.ini": "[gpu]\nnode[01:03] ansible_user=ops\n[gpu:vars]\nansible_port=2222\n",
        "02-more.yml": "all:\n  children:\n    gpu:\n      hosts:\n        node03: {ansible_host: 10.1.0.3}\n"
                       "        node04:\n    cpu:\n      hosts: {login: {ansible_host: 10.1.0.9}}\n",
        "sub/03-sub": "[cpu]\nlogin2 ansible_host=10.1.0.10\n",
        "README.md": "# notes: not an inventory\n",
        "hosts.bak": "[gpu]\nstale\n",
        ".hidden": "[gpu]\nhidden\n",
        "group_vars/gpu.yml": "gpus: all\n",
        "host_vars/node04": "ansible_host: 10.1.0.4\n",
    })
    hosts = {h.name: h for h in assert_reads_like_ansible(root)}
    assert set(hosts) == {"node01", "node02", "node03", "node04", "login", "login2"}
    assert hosts["node03"].address == "10.1.0.3" and hosts["node04"].address == "10.1.0.4"
    assert hosts["node01"].ssh.port == 2222 and hosts["node01"].gpus == "all"


SSH_ARGS = {
    "hosts": """
[nodes]
a ansible_ssh_common_args='-o ProxyCommand="ssh -W %h:%p -q ubuntu@10.0.0.1"'
b ansible_ssh_common_args="-J ops@bastion:2200 -p 2201 -l bob -i ~/.ssh/b_key -o UserKnownHostsFile=/tmp/kh"
c ansible_ssh_extra_args="-o Port=2300 -o User=carol -F /tmp/ssh_config -A" ansible_port=2299
d ansible_host_key_checking=False ansible_timeout=7 ansible_ssh_common_args="-C -o ControlMaster=auto -o ControlPersist=60s"
""",
}


def test_ssh_common_and_extra_args_become_ssh_options(tmp_path):
    root = _tree(tmp_path / "args", SSH_ARGS)
    hosts = {h.name: h for h in assert_reads_like_ansible(root / "hosts")}
    assert dict(hosts["a"].ssh.options) == {"ProxyCommand": "ssh -W %h:%p -q ubuntu@10.0.0.1"}
    assert dict(hosts["b"].ssh.options) == {"ProxyJump": "ops@bastion:2200", "Port": "2201", "User": "bob",
                                            "IdentityFile": "~/.ssh/b_key", "UserKnownHostsFile": "/tmp/kh"}
    c = hosts["c"]
    assert (c.ssh.port, c.ssh.config_file, c.ssh.forward_agent) == (2299, "/tmp/ssh_config", True)
    assert dict(hosts["d"].ssh.options) == {"StrictHostKeyChecking": "no", "ConnectTimeout": "7",
                                            "ControlMaster": "auto", "ControlPersist": "60s"}


def test_an_ansible_source_remembered_as_an_absolute_path_is_still_read_by_ansible(tmp_path, monkeypatch):
    root = _tree(tmp_path / "args", SSH_ARGS)
    monkeypatch.chdir(tmp_path)
    remembered = Path("ansible:args/hosts").resolve()  # what `up` stores for `-i ansible:args/hosts`
    assert [h.name for h in load_inventory(remembered).hosts] == [h.name for h in load_inventory(root / "hosts").hosts]
    assert load_inventory(Path("ansible:/" + str(root / "hosts")[1:]).resolve()).hosts[0].name == "a"


def test_inventory_show_lists_each_host_where_each_value_came_from_and_where_ssh_goes(tmp_path, capsys):
    from clusterctl import cli

    root = _tree(tmp_path / "inv", {
        "hosts": "[gpu-servers]\ngpu01 ansible_host=10.0.2.1\ngpu02 ansible_host=10.0.2.2\n\n[all:vars]\n"
                 "ansible_user=ubuntu\nansible_ssh_common_args='-o ProxyCommand=\"ssh -W %h:%p -q ubuntu@10.0.0.1\"'\n",
        "group_vars/gpu-servers.yml": "ansible_ssh_private_key_file: ~/.ssh/gpu_key\n",
        "host_vars/gpu02.yml": "---\nansible_port: 2226\n",
    })
    env = {**os.environ, "CLUSTERCTL_STATE": str(tmp_path / "state"), "CLUSTERCTL_CACHE_DIR": str(tmp_path / "cache")}
    for source in (str(root / "hosts"), f"ansible:{root / 'hosts'}"):
        capsys.readouterr()
        assert cli.main(["inventory", "show", "--json", "-i", source], env) == 0
        document = json.loads(capsys.readouterr().out)
        gpu02 = next(h for h in document["hosts"] if h["name"] == "gpu02")
        assert (gpu02["address"], gpu02["port"], gpu02["user"]) == ("10.0.2.2", 2226, "ubuntu")
        assert gpu02["ssh"]["proxy_command"] == "ssh -W 10.0.2.2:2226 -q ubuntu@10.0.0.1"
        assert (gpu02["ssh"]["hostname"], gpu02["ssh"]["port"], gpu02["ssh"]["user"]) == ("10.0.2.2", 2226, "ubuntu")
        if not source.startswith("ansible:"):
            assert gpu02["from"]["port"] == f"{root}/host_vars/gpu02.yml:2"
            assert gpu02["from"]["identity_file"] == f"{root}/group_vars/gpu-servers.yml:1"
            assert gpu02["from"]["ssh_options"] == f"{root}/hosts:7"
        else:
            assert gpu02["from"]["port"].startswith("ansible-inventory -i")
