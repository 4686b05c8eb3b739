"""The clusterctl YAML inventory: the shipped inventories, every validation error, dump round trips.

Pure: no network, no SSH. Error tests read fixture files under fixtures/inventories/bad/.
"""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from clusterctl.errors import InventoryError, PlaybookError
from clusterctl.inventory.load import dump_inventory, format_size, load_inventory, parse_inventory, parse_size
from clusterctl.inventory.yamlsource import MAX_BYTES, YamlError, load_yaml

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventories"
BAD = FIXTURES / "bad"
GOOD = FIXTURES / "good"

HOST = "hosts:\n  - {name: node-01, address: 10.0.0.1}\n"


def parse(text: str, tmp_path: Path, name: str = "inv.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return load_inventory(path)


def error_of(text: str, tmp_path: Path, name: str = "inv.yaml") -> InventoryError:
    with pytest.raises(InventoryError) as caught:
        parse(text, tmp_path, name)
    return caught.value


# ------------------------------------------------------------------ bad inventories

# fixture file, line the error must point at, words the message must contain
BAD_CASES = [
    ("malformed_yaml.yaml", 4, ["malformed YAML", "\\t"]),
    ("top_level_list.yaml", 2, ["must be a mapping"]),
    ("unknown_top_key.yaml", 2, ["unknown key 'hostz'", "did you mean 'hosts'"]),
    ("unknown_host_key.yaml", 6, ["unknown key 'adress'", "did you mean 'address'"]),
    ("unknown_job_key.yaml", 6, ["unknown key 'nproc_per_nod'", "did you mean 'nproc_per_node'"]),
    ("misplaced_key.yaml", 4, ["unknown key 'image'", "container"]),
    ("missing_hosts.yaml", 1, ["no hosts"]),
    ("empty_hosts.yaml", 3, ["hosts is empty"]),
    ("host_missing_address.yaml", 4, ["node-02 has no address"]),
    ("duplicate_host_name.yaml", 5, ["duplicate host name 'node-01'", "line 3"]),
    ("duplicate_address_port.yaml", 5, ["same machine", "10.0.0.1 port 22"]),
    ("local_hosts_share_gpus.yaml", 4, ["same GPUs"]),
    ("port_not_int.yaml", 5, ["port must be a whole number", "22a"]),
    ("port_out_of_range.yaml", 3, ["between 1 and 65535", "70000"]),
    ("rendezvous_port_zero.yaml", 5, ["rendezvous port 0", "launcher_args"]),
    ("gpus_bad.yaml", 6, ["gpus must be all, none, a count or a list"]),
    ("nproc_bad.yaml", 6, ["nproc_per_node must be a whole number or auto", "gpu"]),
    ("shm_size_bad.yaml", 6, ["shm_size", "no unit"]),
    ("unsafe_host_name.yaml", 4, ["not a safe name"]),
    ("container_name_bad.yaml", 6, ["container name", "not valid for docker"]),
    ("host_key_policy_off.yaml", 4, ["host_key_policy", "auto-add", "would accept any host key"]),
    ("master_not_a_host.yaml", 6, ["master '10.0.0.1' is not a host name"]),
    ("outputs_relative.yaml", 6, ["outputs must be an absolute path"]),
    ("outputs_system_dir.yaml", 6, ["/etc is a system directory"]),
    ("volume_bad.yaml", 8, ["volume '/data/output:workspace/output'", "must be absolute"]),
    ("env_not_string.yaml", 8, ["env value of OMP_NUM_THREADS must be text"]),
    ("unknown_placeholder.yaml", 8, ["unknown placeholder {worldsize}", "{world_size}", "{run_id}"]),
    ("world_size_divides_zero.yaml", 6, ["world_size_divides must be at least 1"]),
    ("ib_bad.yaml", 5, ["ib must be one of auto | required | off", "maybe"]),
    ("connection_bad.yaml", 3, ["connection must be one of ssh | local", "winrm"]),
    ("duplicate_key.yaml", 7, ["duplicate key 'port'", "lines 5 and 7"]),
    ("alias_bomb.yaml", 5, ["more than 10000 nodes", "alias"]),
    ("python_tag.yaml", 3, ["unsupported YAML tag", "python/object"]),
    ("address_with_user.yaml", 3, ["contains a user"]),
    ("nproc_exceeds_gpus.yaml", 3, ["gets 4 GPU(s) but job.nproc_per_node is 8"]),
    ("shm_and_ipc.yaml", 7, ["shm_size and ipc: host both set"]),
    ("unquoted_placeholder.yaml", 6, ["{world_size} without quotes is a YAML mapping"]),
    ("loopback_master.yaml", 3, ["127.0.0.1", "remote hosts cannot reach"]),
    ("ansible_bad_port.ini", 8, ["port must be a whole number", "twentytwo"]),
    ("ansible_unknown_var.ini", 2, ["unknown Ansible variable 'ansible_usr'", "did you mean 'ansible_user'"]),
    ("ansible_password.ini", 3, ["SSH keys only"]),
    ("ansible_hosts_list.yaml", 4, ["hosts must be a mapping of host names"]),
    ("ansible_duplicate_address.yaml", 6, ["node-01 and node-02 are the same machine"]),
    ("hostfile_bad_slots", 3, ["slots must be a whole number", "eight"]),
    ("hostfile_duplicate", 3, ["'worker-1' is listed twice", "lines 1 and 3"]),
    ("hostfile_unknown_key", 2, ["unknown hostfile entry 'slot=8'", "did you mean 'slots'"]),
]


def test_every_bad_fixture_has_a_case():
    assert sorted(p.name for p in BAD.iterdir()) == sorted(case[0] for case in BAD_CASES)


@pytest.mark.parametrize("fixture, line, words", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_inventory_is_refused_with_where_what_and_fix(fixture, line, words):
    with pytest.raises(InventoryError) as caught:
        load_inventory(BAD / fixture)
    error = caught.value
    assert f"{fixture}:{line}" in error.where, error.where
    assert error.where.startswith(str(BAD / fixture))
    for word in words:
        assert word in error.what, (word, error.what)
    assert error.fix and error.fix.strip()
    assert str(error).startswith(error.where)  # what cli prints: where, what, fix; no traceback


def test_error_names_the_key_path_after_the_line():
    with pytest.raises(InventoryError) as caught:
        load_inventory(BAD / "host_missing_address.yaml")
    assert caught.value.where.endswith("host_missing_address.yaml:4 hosts[1].address")


def test_missing_file_is_an_inventory_error_with_a_fix(tmp_path):
    with pytest.raises(InventoryError) as caught:
        load_inventory(tmp_path / "nope.yaml")
    assert "not found" in caught.value.what and caught.value.fix


def test_directory_instead_of_file_is_refused(tmp_path):
    with pytest.raises(InventoryError, match="directory"):
        load_inventory(tmp_path)


def test_file_over_one_mib_is_refused_before_parsing(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(HOST + "# " + "x" * MAX_BYTES + "\n")
    with pytest.raises(InventoryError, match="too large"):
        load_inventory(path)


def test_non_utf8_file_is_refused_with_its_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: x\nhosts:\n  - {name: caf\xe9, address: 10.0.0.1}\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert "latin1.yaml:3" in caught.value.where and "UTF-8" in caught.value.what


def test_empty_file_is_refused(tmp_path):
    assert "empty" in error_of("# nothing yet\n", tmp_path).what


@pytest.mark.parametrize("section, text, wrong, right", [
    ("ssh", "ssh: {identityfile: ~/.ssh/id}\n", "identityfile", "identity_file"),
    ("container", "container: {image: x/y:1, shm_sise: 16g}\n", "shm_sise", "shm_size"),
    ("rendezvous", "rendezvous: {prot: 29500}\n", "prot", "port"),
    ("checks", "checks: {shm_mn: 1g}\n", "shm_mn", "shm_min"),
    ("env secret", "job: {env: {HF_TOKEN: {valu: abc, secret: true}}}\n", "valu", "value"),
    ("host alias", "hosts:\n  - {name: n1, ip: 10.0.0.9}\n", "ip", "address"),
])
def test_unknown_keys_at_every_level_suggest_the_right_one(tmp_path, section, text, wrong, right):
    body = text if text.startswith("hosts") else HOST + text
    error = error_of(body, tmp_path)
    assert f"unknown key '{wrong}'" in error.what and f"'{right}'" in error.what


@pytest.mark.parametrize("text, words", [
    ("ssh: {host_key_policy: off}\n", ["would accept any host key"]),  # YAML reads off as false
    ("ssh: {host_key_policy: strikt}\n", ["did you mean 'strict'"]),
    ("ssh: {connect_timeout: -1}\n", ["connect_timeout must be a number greater than 0"]),
    ("ssh: {forward_agent: maybe}\n", ["forward_agent must be true or false"]),
    ("ssh: {proxy_jump: -oProxyCommand=x}\n", ["proxy_jump"]),
    ("container: {image: x/y:1, gpus: [0, 1, 1]}\n", ["GPU 1 is listed twice"]),
    ("container: {image: x/y:1, gpus: 0}\n", ["selects no GPU"]),
    ("container: {image: x/y:1, pull: sometimes}\n", ["pull must be one of"]),
    ("container: {image: x/y:1, volumes: ['~/data:/data']}\n", ["neither absolute nor a volume name"]),
    ("container: {image: x/y:1, volumes: ['/a:/data', '/b:/data/']}\n", ["two volumes mount on /data"]),
    ("container: {image: x/y:1, volumes: ['/a:/b:rx']}\n", ["mode 'rx'"]),
    ("container: {name: wan22}\n", ["container has no image"]),
    ("job: {args: ['{prompt', x]}\n", ["bad braces"]),
    ("job: {args: [--scale, 1.5]}\n", ["items must be text"]),
    ("job: {command: python train.py}\n", ["must be a list (argv)"]),
    ("job: {outputs: /proc/x}\n", ["system directory"]),
    ("job: {outputs: /}\n", ["system directory"]),
    ("job: {nproc_per_node: 0}\n", ["nproc_per_node must be at least 1"]),
    ("job: {env: [A=1]}\n", ["env must be a mapping"]),
    ("job: {env: {1BAD: x}}\n", ["not a valid environment variable name"]),
    ("job: {env: {TOKEN: '***'}}\n", ["masked secret"]),
    ("checks: {disk_min: lots}\n", ["disk_min must be a size"]),
    ("checks: {clock_skew_warn: fast}\n", ["clock_skew_warn must be a number"]),
    ("rendezvous: {port: '29500'}\n", ["port must be a whole number"]),
    ("rendezvous: {join_timeout: 0}\n", ["join_timeout must be at least 1"]),
    ("name: 'my cluster'\n", ["not a safe name"]),
    ("ssh: [root]\n", ["ssh must be a mapping"]),
])
def test_bad_values_are_refused_with_a_fix(tmp_path, text, words):
    error = error_of(HOST + text, tmp_path)
    for word in words:
        assert word in error.what, (word, error.what)
    assert error.fix
    assert "inv.yaml:" in error.where


def test_quoted_port_suggests_removing_the_quotes(tmp_path):
    error = error_of(HOST + "ssh: {port: '22'}\n", tmp_path)
    assert "remove the quotes" in error.fix


def test_host_address_with_port_suggests_the_port_key(tmp_path):
    error = error_of("hosts:\n  - {name: n1, address: '10.0.0.1:2222'}\n", tmp_path)
    assert "contains a port" in error.what and "port: 2222" in error.fix


def test_master_given_as_address_suggests_the_host_name():
    with pytest.raises(InventoryError) as caught:
        load_inventory(BAD / "master_not_a_host.yaml")
    assert "master: node-01" in caught.value.fix


# ------------------------------------------------------------------ the shipped inventories


def test_h20_inventory_mirrors_the_guide():
    inv = load_inventory(REPO / "inventory" / "h20.yaml")
    assert [(h.name, h.address) for h in inv.hosts] == [
        ("bjdb-h20-node-080", "172.31.0.80"), ("bjdb-h20-node-082", "172.31.0.82")]
    assert inv.master.name == "bjdb-h20-node-080"
    assert inv.uses_container
    assert inv.container.image == "172.31.0.182/system_containers/wan2-2:1014"
    assert (inv.container.name, inv.container.gpus, inv.container.shm_size) == ("wan22", "all", "16g")
    assert inv.container.volumes == ("/data/Wan-AI/Wan2.2-T2V-A14B:/Wan2.2-T2V-A14B", "/data/output:/workspace/output")
    assert inv.rendezvous.port == 29500
    assert inv.job.command == ("generate.py",)
    assert inv.job.args == (
        "--task", "t2v-A14B", "--size", "832*480", "--ckpt_dir", "/Wan2.2-T2V-A14B", "--dit_fsdp", "--t5_fsdp",
        "--ulysses_size", "{world_size}", "--sample_guide_scale", "10", "--prompt", "{prompt}",
        "--save_file", "{outputs}/{run_id}.mp4")
    assert (inv.job.nproc_per_node, inv.job.world_size_divides) == ("auto", 40)
    assert (inv.job.workdir, inv.job.outputs) == ("/workspace", "/workspace/output")
    assert inv.ssh.host_key_policy == "strict" and inv.ssh.user == "root"
    assert all(h.ssh.user == "root" and h.ssh.port == 22 for h in inv.hosts)


def test_local_inventory_runs_a_rank_per_gpu_or_two_cpu_ranks_on_this_machine():
    inv = load_inventory(REPO / "inventory" / "local.yaml")
    (host,) = inv.hosts
    assert (host.name, host.connection, host.address) == ("local", "local", "127.0.0.1")
    assert host.is_local and not inv.uses_container and inv.container is None
    assert inv.job.command == ("examples/generate.py",)
    assert inv.job.args == ("--task", "t2v-tiny", "--size", "64*48", "--frame_num", "8", "--ulysses_size",
                            "{world_size}", "--prompt", "{prompt}", "--save_file", "{outputs}/{run_id}.gif")
    assert (inv.job.nproc_per_node, inv.job.world_size_divides, host.slots) == ("auto", 8, 2)
    assert inv.job.outputs.startswith("/tmp/")
    assert inv.checks.ib == "off"  # unquoted `off` is YAML false: read as off


# ------------------------------------------------------------------ semantics


def test_per_host_port_and_user_override_the_ssh_section(tmp_path):
    inv = parse("ssh: {user: root, port: 22, host_key_policy: accept-new}\nhosts:\n"
                "  - {name: a, address: 10.0.0.1}\n  - {name: b, address: 10.0.0.2, port: 2200, user: ops}\n",
                tmp_path)
    a, b = inv.hosts
    assert (a.ssh.user, a.ssh.port) == ("root", 22)
    assert (b.ssh.user, b.ssh.port) == ("ops", 2200)
    assert b.ssh.host_key_policy == "accept-new" and inv.ssh.port == 22


def test_tilde_and_relative_key_paths_are_resolved(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    inv = parse("ssh: {identity_file: ~/.ssh/id_ed25519, known_hosts: kh/known}\nhosts:\n"
                "  - {name: a, address: 10.0.0.1, identity_file: keys/a}\n", tmp_path)
    assert inv.ssh.identity_file == str(tmp_path / "home" / ".ssh" / "id_ed25519")
    assert inv.ssh.known_hosts == str(tmp_path / "kh" / "known")
    assert inv.hosts[0].ssh.identity_file == str(tmp_path / "keys" / "a")


def test_ssh_config_aliases_are_kept_as_written(tmp_path):
    inv = parse("hosts:\n  - {name: a, address: gpu-box-alias}\n", tmp_path)
    assert inv.hosts[0].address == "gpu-box-alias" and inv.hosts[0].ssh.user is None


def test_ssh_options_are_read(tmp_path):
    inv = parse(HOST + "ssh: {connect_timeout: 5, command_timeout: 30.5, proxy_jump: admin@bastion:22, "
                "forward_agent: true}\n", tmp_path)
    assert (inv.ssh.connect_timeout, inv.ssh.command_timeout) == (5.0, 30.5)
    assert inv.ssh.proxy_jump == "admin@bastion:22" and inv.ssh.forward_agent is True
    assert inv.hosts[0].ssh.forward_agent is True


def test_defaults_when_sections_are_absent(tmp_path):
    inv = parse(HOST, tmp_path, "mycluster.yaml")
    assert inv.name == "mycluster" and inv.container is None and not inv.uses_container
    assert inv.ssh.forward_agent is False and inv.ssh.host_key_policy == "strict"
    assert inv.job.nproc_per_node == "auto" and inv.checks.ib == "auto"
    assert inv.source == (tmp_path / "mycluster.yaml").resolve()


def test_local_hosts_with_disjoint_gpus_are_allowed(tmp_path):
    inv = parse("hosts:\n  - {name: a, connection: local, gpus: [0, 1]}\n"
                "  - {name: b, connection: local, gpus: [2, 3]}\n", tmp_path)
    assert [h.gpus for h in inv.hosts] == [(0, 1), (2, 3)]
    assert {h.address for h in inv.hosts} == {"127.0.0.1"}


def test_same_address_on_different_ports_is_two_hosts(tmp_path):
    inv = parse("hosts:\n  - {name: a, address: 10.0.0.1, port: 2201}\n"
                "  - {name: b, address: 10.0.0.1, port: 2202}\n", tmp_path)
    assert len(inv.hosts) == 2


def test_container_runtime_host_runs_ranks_on_the_host(tmp_path):
    inv = parse(HOST + "container: {runtime: host}\n", tmp_path)
    assert inv.container.runtime == "host" and not inv.uses_container


def test_container_fields_are_read(tmp_path):
    inv = parse(HOST + "container:\n  image: reg/img:1\n  ipc: host\n  pull: always\n  gpus: 4\n"
                "  command: [tail, -f, /dev/null]\n  labels: {team: vision}\n"
                "  volumes: [models:/models, '/data:/data:ro']\n", tmp_path)
    c = inv.container
    assert (c.ipc, c.pull, c.gpus, c.command) == ("host", "always", 4, ("tail", "-f", "/dev/null"))
    assert c.labels == (("team", "vision"),) and c.volumes == ("models:/models", "/data:/data:ro")


def test_env_values_and_secret_entries(tmp_path):
    inv = parse(HOST + "job:\n  env:\n    NCCL_DEBUG: INFO\n    HF_TOKEN: abc\n"
                "    DB_URL: {value: 'postgres://u:p@h/db', secret: true}\n", tmp_path)
    env = {v.name: v for v in inv.job.env}
    assert env["NCCL_DEBUG"].shown == "INFO"
    assert env["HF_TOKEN"].is_secret and env["HF_TOKEN"].shown == "***"
    assert env["DB_URL"].secret and env["DB_URL"].value == "postgres://u:p@h/db"


def test_numeric_args_keep_their_exact_text(tmp_path):
    inv = parse(HOST + "job: {args: [--steps, 010, --seed, 42, --x, '{nnodes}x{nproc_per_node}']}\n", tmp_path)
    assert inv.job.args == ("--steps", "010", "--seed", "42", "--x", "{nnodes}x{nproc_per_node}")


def test_sizes_are_read_as_docker_reads_them(tmp_path):
    inv = parse(HOST + "checks: {shm_min: 2Gi, disk_min: 512m, clock_skew_warn: 0.5, ib: required}\n", tmp_path)
    assert inv.checks.shm_min_bytes == 2 << 30 and inv.checks.disk_min_bytes == 512 << 20
    assert (inv.checks.clock_skew_warn_s, inv.checks.ib) == (0.5, "required")
    assert parse_size("1.5GB") == 3 << 29 and parse_size("16g") == 16 << 30 and parse_size("4096b") == 4096
    with pytest.raises(ValueError):
        parse_size("16")
    assert [format_size(n) for n in (1 << 30, 3 << 20, 1000)] == ["1g", "3m", "1000b"]


def test_inventory_text_can_be_parsed_without_a_file():
    inv = parse_inventory("node1 slots=2\nnode2 slots=2\n", "workers", fmt="hostfile")
    assert [(h.name, h.slots) for h in inv.hosts] == [("node1", 2), ("node2", 2)] and inv.name == "workers"


def test_yaml_merge_keys_share_host_settings(tmp_path):
    inv = parse(
        "hosts:\n  - &first {name: a, address: 10.0.0.1, user: ops, port: 2200}\n"
        "  - {<<: *first, name: b, address: 10.0.0.2}\n", tmp_path)
    assert [(h.name, h.ssh.user, h.ssh.port) for h in inv.hosts] == [("a", "ops", 2200), ("b", "ops", 2200)]


# ------------------------------------------------------------------ dump round trips


def _same(a, b) -> bool:
    return replace(a, source=None) == replace(b, source=None)


@pytest.mark.parametrize("path", [REPO / "inventory" / "h20.yaml", REPO / "inventory" / "local.yaml",
                                  GOOD / "cluster.yaml", GOOD / "hosts.ini", GOOD / "hostfile"])
def test_dump_then_load_gives_the_same_inventory(path, tmp_path):
    inv = load_inventory(path)
    again = parse(dump_inventory(inv), tmp_path, "dumped.yaml")
    assert _same(inv, again)


def test_dump_masks_secrets_unless_revealed_and_masked_dumps_do_not_load(tmp_path):
    inv = parse(HOST + "job: {env: {HF_TOKEN: hunter2, MODE: fast, X: {value: v, secret: true}}}\n", tmp_path)
    masked = dump_inventory(inv)
    assert "hunter2" not in masked and "***" in masked and "fast" in masked
    with pytest.raises(InventoryError, match="masked secret"):
        parse(masked, tmp_path, "masked.yaml")
    assert _same(inv, parse(dump_inventory(inv, reveal_secrets=True), tmp_path, "revealed.yaml"))


def test_dump_keeps_every_field(tmp_path):
    text = ("name: full\nssh: {user: root, port: 2222, proxy_jump: j@b, forward_agent: true, connect_timeout: 3}\n"
            "hosts:\n  - {name: a, address: 10.0.0.1, gpus: [0, 1], nic: eth0, slots: 2, groups: [g], "
            "env: {A: x}}\n  - {name: b, connection: local, address: 10.0.0.9, user: me, gpus: none}\n"
            "container: {image: r/i:1, name: c1, shm_size: 1g, env: {B: y}, labels: {k: v}, pull: never}\n"
            "rendezvous: {port: 29400, master: b, join_timeout: 60}\n"
            "job: {command: [t.py], args: [-x, '{run_id}'], workdir: /w, nproc_per_node: 2, "
            "world_size_divides: 4, outputs: /o, env: {C: z}, python: python3.11}\n"
            "checks: {ib: off, shm_min: 3g, disk_min: 5m, clock_skew_warn: 2}\n")
    inv = parse(text, tmp_path)
    assert _same(inv, parse(dump_inventory(inv), tmp_path, "dumped.yaml"))


# ------------------------------------------------------------------ robustness


def _mutations(text: str, rng: random.Random, count: int):
    junk = [":", "-", " ", "\t", "[", "{", "}", "]", "'", '"', "&a", "*a", "!!", "0", "#", "\n", "  ", "~", "=", "%"]
    for _ in range(count):
        chars = list(text)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(chars))
            action = rng.random()
            if action < 0.4:
                chars[pos:pos] = list(rng.choice(junk))
            elif action < 0.8:
                del chars[pos: pos + rng.randint(1, 6)]
            else:
                chars[pos] = rng.choice(junk)
        yield "".join(chars)


@pytest.mark.parametrize("source", ["h20.yaml", "hosts.ini", "hosts_ansible.yaml", "hostfile"])
def test_only_inventory_errors_escape_on_mangled_files(source, tmp_path):
    path = REPO / "inventory" / source if source == "h20.yaml" else GOOD / source
    rng = random.Random(source)
    target = tmp_path / path.name
    for text in _mutations(path.read_text(), rng, 80):
        target.write_text(text)
        try:
            load_inventory(target)
        except InventoryError as error:
            assert error.where and error.fix, (text, error)


# ------------------------------------------------------------------ yamlsource


def test_locator_points_at_keys_items_and_falls_back_to_the_parent():
    data, where = load_yaml("name: x\nhosts:\n  - name: a\n    address: 1.2.3.4\n  - {name: b}\n", "f.yaml")
    assert data["hosts"][1] == {"name": "b"}
    assert where.where(("hosts", 0, "address")) == "f.yaml:4"
    assert where.where(("hosts", 1)) == "f.yaml:5"
    assert where.where(("hosts", 1, "address")) == "f.yaml:5"  # missing key: its parent's line
    assert where.label(("hosts", 1, "address")) == "hosts[1].address"


def test_yaml_errors_use_the_callers_error_class_with_line_and_column():
    with pytest.raises(PlaybookError) as caught:
        load_yaml("tasks:\n  - name: a\n   bad: indent\n", "play.yaml", error_cls=PlaybookError)
    assert caught.value.where.startswith("play.yaml:3:") and caught.value.fix
    assert str(caught.value).startswith("play.yaml:3:")


def test_yaml_refuses_duplicate_keys_recursive_aliases_and_several_documents():
    for text, words in [("a: 1\nb: 2\na: 3\n", "lines 1 and 3"), ("a: &x [*x]\n", "recursive alias"),
                        ("a: 1\n---\nb: 2\n", "single document"), ("a: !!set {x}\n", "unsupported YAML tag")]:
        with pytest.raises(YamlError, match=words):
            load_yaml(text, "t.yaml")


def test_yaml_node_limit_is_a_parameter():
    with pytest.raises(YamlError, match="more than 5 nodes"):
        load_yaml("[1, 2, 3, 4, 5, 6]", max_nodes=5)


def test_yaml_loads_from_a_path(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("a: [1, 2]\n")
    data, where = load_yaml(path)
    assert data == {"a": [1, 2]} and where.where(("a", 1)) == f"{path}:1"
    assert load_yaml(str(path))[0] == data  # a one-line str naming a file is a path
    with pytest.raises(YamlError, match="not found"):
        load_yaml(str(tmp_path / "missing.yaml"))
