"""Ansible inventories as Ansible reads them, differentially: for every inventory in the table
(NVIDIA DeepOps' and kubespray's samples as their users fill them in, group_vars/host_vars files
and directories, inventory directories, precedence between every layer, ranges, children, INI
and YAML), clusterctl's own reader must give, host by host and value by value, what it gives
reading `ansible-inventory --list`'s answer (the `ansible:` mode), and the hosts and groups
Ansible lists."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterctl.errors import InventoryError
from clusterctl.inventory.load import load_inventory, load_inventory_located


def _tree(root: Path, files: dict) -> Path:
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    return root


PRECEDENCE = {
    "hosts.yml": """
all:
  vars: {ansible_user: from-all-inventory, ansible_port: 2000, nic: eth0}
  children:
    parent:
      vars: {ansible_user: from-parent-inventory, ansible_port: 2001, slots: 4}
      children:
        child:
          vars: {ansible_port: 2002}
          hosts:
            n1: {}
            n2: {ansible_port: 2003}
            n3: {}
    other:
      vars: {ansible_group_priority: 10, ansible_user: from-other-priority, slots: 8}
      hosts:
        n3:
""",
    "group_vars/all/10-base.yml": "ansible_user: from-group-vars-all\nnic: eth1\n",
    "group_vars/all/20-more.yaml": "nic: eth2\n",
    "group_vars/parent": "ansible_port: 2100\n",
    "group_vars/child.yml": "ansible_port: 9999\n",
    "group_vars/child.json": '{"ansible_port": 1111}',  # never read: child.yml comes first
    "group_vars/other.json": '{"ansible_ssh_common_args": "-o StrictHostKeyChecking=accept-new -J jump@bastion:2222"}',
    "host_vars/n1/main.yml": "ansible_port: 2200\n",
    "host_vars/n1/.hidden.yml": "ansible_port: 1\n",
    "host_vars/n1/old.yml~": "ansible_port: 2\n",
    "host_vars/n2.yml": "ansible_become: yes\nansible_become_user: root\nansible_become_method: sudo\n",
}


def test_an_ssh_option_clusterctl_does_not_act_on_is_a_warning_with_variable_option_and_line(tmp_path):
    path = _tree(tmp_path, {"hosts": "[n]\nx ansible_ssh_extra_args='-o Ciphers=aes128-ctr -L 80:localhost:80'\n"})
    inventory = load_inventory(path / "hosts")
    assert any("hosts:2" in w and "ansible_ssh_extra_args" in w and "Ciphers" in w for w in inventory.warnings)
    assert any("-L 80:localhost:80" in w for w in inventory.warnings)


def test_a_broken_quote_in_ssh_args_is_one_error_naming_the_line(tmp_path):
    path = _tree(tmp_path, {"hosts": "[n]\nx\n[n:vars]\nansible_ssh_common_args=-o ProxyCommand=\"ssh -W\n"})
    with pytest.raises(InventoryError) as caught:
        load_inventory(path / "hosts")
    assert caught.value.where.endswith("hosts:4") and "ansible_ssh_common_args" in caught.value.what


def test_a_jinja_template_in_a_value_clusterctl_reads_names_its_file_and_line(tmp_path):
    path = _tree(tmp_path, {"hosts": "[n]\nx\n", "group_vars/n.yml": "a: 1\nansible_user: '{{ lookup(\"env\", \"U\") }}'\n"})
    with pytest.raises(InventoryError) as caught:
        load_inventory(path / "hosts")
    assert caught.value.where.startswith(str(path / "group_vars" / "n.yml") + ":2")


def test_every_value_says_which_file_and_line_set_it(tmp_path):
    root = _tree(tmp_path / "prec", PRECEDENCE)
    inventory, locator = load_inventory_located(root / "hosts.yml")
    index = [h.name for h in inventory.hosts].index("n1")
    assert locator.where(("hosts", index, "port")) == f"{root}/host_vars/n1/main.yml:1"
    assert locator.where(("hosts", index, "user")) == f"{root}/group_vars/all/10-base.yml:1"
    assert locator.where(("hosts", index, "address")) == f"{root}/hosts.yml:11"


def test_a_dynamic_inventory_script_needs_ansible_and_says_so(tmp_path):
    script = tmp_path / "inv" / "ec2.py"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho '{}'\n")
    script.chmod(0o755)
    with pytest.raises(InventoryError, match="dynamic inventory script") as caught:
        load_inventory(script.parent)
    assert "ansible:" in caught.value.fix


def test_clusterctl_yaml_takes_the_same_keys_with_their_errors(tmp_path):
    from clusterctl.inventory.load import parse_inventory

    good = parse_inventory("ssh: {options: {ServerAliveInterval: 30}, config_file: ssh_config}\nhosts:\n"
                           "  - {name: a, address: 10.0.0.1, ssh_options: {ProxyCommand: 'ssh -W %h:%p b'},\n"
                           "     become: true, become_user: root, become_method: sudo}\n", base_dir=tmp_path)
    host = good.hosts[0]
    assert host.ssh.options == (("ProxyCommand", "ssh -W %h:%p b"), ("ServerAliveInterval", "30"))
    assert host.ssh.config_file == str(tmp_path / "ssh_config") and (host.become, host.become_method) == (True, "sudo")
    for text, words in (("ssh_options: {'Proxy Command': x}", "not an ssh_config keyword"),
                        ("become_method: su", "must be one of sudo"), ("ssh_options: [a]", "must be a mapping")):
        with pytest.raises(InventoryError, match=words):
            parse_inventory(f"hosts:\n  - {{name: a, address: 10.0.0.1, {text}}}\n", base_dir=tmp_path)


def test_become_vars_are_read_and_a_become_password_is_a_warning(tmp_path):
    path = _tree(tmp_path, {"hosts": "[n]\nx ansible_user=ops ansible_become=true ansible_become_pass=s3cret\n"})
    inventory = load_inventory(path / "hosts")
    assert inventory.hosts[0].become is True
    assert any("ansible_become_pass is not used" in w and "s3cret" not in w for w in inventory.warnings)
    with pytest.raises(InventoryError, match="sudo only"):
        load_inventory(_tree(tmp_path / "su", {"hosts": "[n]\nx ansible_become_method=su\n"}) / "hosts")
