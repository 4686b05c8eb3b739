"""Ansible INI, Ansible YAML and MPI hostfiles load into the same Inventory as clusterctl YAML.

Pure: no network. Equivalent files live under fixtures/inventories/good/.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from clusterctl.errors import InventoryError
from clusterctl.inventory.load import dump_inventory, load_inventory
from clusterctl.inventory.ansible import expand_host_pattern, looks_like_ansible_yaml
from clusterctl.inventory.formats import sniff_format

GOOD = Path(__file__).resolve().parents[1] / "fixtures" / "inventories" / "good"


def host_facts(inventory):
    """What the formats can all express, per host."""
    return [(h.name, h.address, h.ssh.port, h.ssh.user, h.ssh.identity_file, h.groups, h.slots, h.connection)
            for h in inventory.hosts]


def load_text(tmp_path: Path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return load_inventory(path)


def error_of(tmp_path: Path, name: str, text: str) -> InventoryError:
    with pytest.raises(InventoryError) as caught:
        load_text(tmp_path, name, text)
    return caught.value


# ------------------------------------------------------------------ equivalence


@pytest.mark.parametrize("other", ["hosts.ini", "hosts_ansible.yaml"])
def test_ansible_inventories_load_like_the_clusterctl_yaml(other):
    expected = host_facts(load_inventory(GOOD / "cluster.yaml"))
    assert host_facts(load_inventory(GOOD / other)) == expected
    assert expected[1][:4] == ("gpu-02", "10.0.0.2", 2222, "root")
    assert expected[2][3:5] == ("ubuntu", str(GOOD / "keys" / "id_cpu"))
    assert expected[0][5] == ("gpu", "train")  # parent groups count: --limit train selects gpu hosts


@pytest.mark.parametrize("other", ["hostfile", "workers.ini"])
def test_hostfile_loads_like_the_clusterctl_yaml(other):
    expected = host_facts(load_inventory(GOOD / "workers.yaml"))
    assert host_facts(load_inventory(GOOD / other)) == expected
    assert [h[6] for h in expected] == [8, 8, 4]


@pytest.mark.parametrize("name", ["hosts.ini", "hosts_ansible.yaml", "hostfile"])
def test_foreign_formats_get_clusterctl_defaults(name):
    inv = load_inventory(GOOD / name)
    assert inv.container is None and inv.job.nproc_per_node == "auto"
    assert inv.ssh.user is None and inv.ssh.host_key_policy == "strict"
    assert inv.name == Path(name).stem


@pytest.mark.parametrize("name", ["hosts.ini", "hosts_ansible.yaml", "hostfile"])
def test_foreign_formats_convert_to_clusterctl_yaml(name, tmp_path):
    inv = load_inventory(GOOD / name)
    converted = load_text(tmp_path, "converted.yaml", dump_inventory(inv))
    assert host_facts(converted) == host_facts(inv)


def test_limit_by_an_ansible_parent_group():
    inv = load_inventory(GOOD / "hosts_ansible.yaml")
    assert [h.name for h in inv.limited(["train"]).hosts] == ["gpu-01", "gpu-02"]


# ------------------------------------------------------------------ detection


@pytest.mark.parametrize("text, name, expected", [
    ("hosts:\n  - {name: a, address: b}\n", "inv", "yaml"),
    ("[gpu]\nnode1\n", "inv", "ini"),
    ("# c\nnode1 ansible_host=10.0.0.1\n", "inv", "ini"),
    ("node1 slots=8\nnode2 slots=8\n", "inv", "hostfile"),
    ("node1:4\nnode2\n", "hosts", "hostfile"),
    ("node1 slots=8\n", "x.yaml", "yaml"),
    ("[gpu]\n", "x.ini", "ini"),
    ("", "inv", "yaml"),
])
def test_format_is_detected_by_extension_then_content(text, name, expected):
    assert sniff_format(text, Path(name)) == expected


def test_ansible_yaml_is_told_apart_from_clusterctl_yaml():
    assert looks_like_ansible_yaml({"all": {"hosts": {"a": None}}})
    assert looks_like_ansible_yaml({"gpu": {"hosts": {"a": {}}}})
    assert not looks_like_ansible_yaml({"hosts": [{"name": "a"}]})
    assert not looks_like_ansible_yaml({"name": "x", "hostz": [{"name": "a"}]})


# ------------------------------------------------------------------ Ansible semantics


def test_ini_variable_precedence_host_then_child_group_then_parent_then_all(tmp_path):
    inv = load_text(tmp_path, "prec.ini", (
        "[all:vars]\nansible_user=alluser\nansible_port=2000\nnic=eth9\n"
        "[parent:children]\nchild\n"
        "[parent:vars]\nansible_user=parentuser\nansible_port=3000\n"
        "[child]\nc1 ansible_host=10.0.0.1\nc2 ansible_host=10.0.0.2 ansible_port=5000\n"
        "[child:vars]\nansible_port=4000\n"))
    assert [(h.ssh.user, h.ssh.port, h.nic) for h in inv.hosts] == [
        ("parentuser", 4000, "eth9"), ("parentuser", 5000, "eth9")]
    assert inv.hosts[0].groups == ("child", "parent")


def test_host_ranges_expand_with_zero_padding(tmp_path):
    inv = load_text(tmp_path, "r.ini", "[gpu]\nnode[08:10] ansible_user=root\nbox-[a:b]\n")
    assert [h.name for h in inv.hosts] == ["node08", "node09", "node10", "box-a", "box-b"]
    assert [h.address for h in inv.hosts][:2] == ["node08", "node09"]
    assert expand_host_pattern("n[1:5:2]x[0:1]", "w") == ["n1x0", "n1x1", "n3x0", "n3x1", "n5x0", "n5x1"]


def test_ini_host_port_suffix_and_quoted_values(tmp_path):
    inv = load_text(tmp_path, "p.ini", '[gpu]\nnode1:2222 ansible_host=10.0.0.1 nic="eth0"\n'
                                       "[gpu:vars]\nansible_user = 'ops'\n")
    host = inv.hosts[0]
    assert (host.name, host.ssh.port, host.nic, host.ssh.user) == ("node1", 2222, "eth0", "ops")


def test_ansible_local_connection_and_gpu_lists(tmp_path):
    inv = load_text(tmp_path, "l.ini", "remote ansible_host=10.0.0.5 ansible_connection=ssh gpus=[2,3]\n"
                                       "[here]\nlocalhost ansible_connection=local gpus=0,1\n")
    remote, local = inv.hosts
    assert local.is_local and local.gpus == (0, 1) and not remote.is_local and remote.gpus == (2, 3)


def test_ansible_yaml_host_vars_merge_across_groups(tmp_path):
    inv = load_text(tmp_path, "m.yaml", "all:\n  hosts:\n    n1: {ansible_host: 10.0.0.1}\n"
                                        "  children:\n    gpu:\n      hosts:\n        n1: {ansible_user: ops}\n"
                                        "      vars: {slots: 8}\n")
    (host,) = inv.hosts
    assert (host.address, host.ssh.user, host.slots, host.groups) == ("10.0.0.1", "ops", 8, ("gpu",))


def test_ungrouped_hosts_before_the_first_section(tmp_path):
    inv = load_text(tmp_path, "u.ini", "solo ansible_host=10.0.0.7\n[gpu]\nnode1 ansible_host=10.0.0.1\n")
    assert [(h.name, h.groups) for h in inv.hosts] == [("solo", ()), ("node1", ("gpu",))]


def test_ignored_ansible_variables_are_accepted(tmp_path):
    inv = load_text(tmp_path, "i.ini", "[gpu]\nn1 ansible_host=10.0.0.1 ansible_become=true "
                                       "ansible_python_interpreter=/usr/bin/python3 rack=r12\n")
    assert inv.hosts[0].address == "10.0.0.1"


# ------------------------------------------------------------------ foreign-format errors


@pytest.mark.parametrize("name, text, line, words", [
    ("cycle.ini", "[a:children]\nb\n[b:children]\na\n[a]\nn1\n", 1, ["groups contain each other"]),
    ("jinja.ini", "[gpu]\nn1 ansible_host='{{ node_ip }}'\n", 2, ["Jinja template"]),
    ("typo.ini", "[gpu]\nn1 ansible_host=10.0.0.1 gpu=0,1\n", 2, ["unknown variable 'gpu'", "did you mean 'gpus'"]),
    ("section.ini", "[gpu:varz]\nx=1\n", 1, ["unknown section kind ':varz'", "did you mean 'vars'"]),
    ("noeq.ini", "[gpu]\nn1 ansible_host 10.0.0.1\n", 2, ["expected key=value"]),
    ("varline.ini", "[gpu:vars]\nansible_user root\n[gpu]\nn1\n", 2, ["expected key=value"]),
    ("range.ini", "[gpu]\nnode[5:1]\n", 2, ["empty host range"]),
    ("huge.ini", "[gpu]\nn[1:100]x[1:100]\n", 2, ["expands to 10000 hosts"]),
    ("conn.ini", "[gpu]\nn1 ansible_connection=docker\n", 2, ["connection must be one of ssh | local"]),
    ("badname.ini", "[gpu]\nn1 ansible_host=10.0.0.1\n[gpu:vars]\nansible_user=ro ot\n", 4, ["not a valid login"]),
    ("nohosts.ini", "[gpu:vars]\nansible_user=root\n", 1, ["lists no hosts"]),
    ("quote.ini", "[gpu]\nn1 ansible_user='root\n", 2, ["cannot split the line"]),
    ("group.yaml", "all:\n  children:\n    gpu:\n      hostz: {n1: }\n", 4, ["unknown key 'hostz'", "'hosts'"]),
    ("empty.yaml", "all:\n  children:\n    gpu: {}\n", 1, ["lists no hosts"]),
    ("vars.yaml", "all:\n  hosts:\n    n1: [10.0.0.1]\n", 3, ["variables must be a mapping"]),
    ("emptyhostfile", "# only comments\n\n", 1, ["the inventory is empty"]),
])
def test_foreign_format_errors_point_at_the_line(tmp_path, name, text, line, words):
    error = error_of(tmp_path, name, text)
    assert f"{name}:{line}" in error.where, error.where
    for word in words:
        assert word in error.what, (word, error.what)
    assert error.fix


def test_ini_errors_name_the_variable_and_where_it_was_set(tmp_path):
    error = error_of(tmp_path, "v.ini", "[gpu]\nn1 ansible_host=10.0.0.1\n[gpu:vars]\nansible_port=abc\n")
    assert error.where.endswith("v.ini:4 [gpu:vars] ansible_port")
