"""The pieces behind the benchmark fixes: known_hosts parsed once, keys read once, ProxyJump specs, the chunk
buffers of SSH channels, streamed tar extraction with hashes, and collect-logs' one-round survey."""
from __future__ import annotations

import os

from clusterctl import transport
from clusterctl.collect import fetch as collect
from clusterctl.transport import known_hosts, openssh_config, ssh_files, ssh_keys
from clusterctl.models import Command, Host, SSHSettings


def _keygen(path, passphrase: str = "") -> None:
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(path)], check=True)


def test_a_private_key_is_read_once_per_process_and_again_when_it_changes(tmp_path):
    from clusterctl.transport.openssh_config import SSHTarget

    plain, locked = tmp_path / "plain", tmp_path / "locked"
    _keygen(plain)
    _keygen(locked, "a passphrase")
    target = SSHTarget("n", "n", 22, "root", batch_mode=True)
    key = ssh_keys.load_key(str(plain), target, [])
    assert key.get_name() == "ssh-ed25519"
    assert ssh_keys.load_key(str(plain), target, []) is key  # not read again
    plain.unlink()
    _keygen(plain)
    assert ssh_keys.load_key(str(plain), target, []).get_base64() != key.get_base64()
    notes: list = []
    assert ssh_keys.load_key(str(locked), target, notes) is None and "passphrase-protected" in notes[0]
    assert ssh_keys.load_key(str(tmp_path / "missing"), target, []) is None


def test_an_inventory_proxy_jump_becomes_hops_in_order(monkeypatch, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host node7\n  HostName 10.0.0.7\n  User ops\n  IdentityFile ~/.ssh/n7\n")
    monkeypatch.setenv("CLUSTERCTL_SSH_CONFIG", str(config))
    monkeypatch.setenv("CLUSTERCTL_CACHE_DIR", str(tmp_path / "cache"))
    target = ssh_files.target_for(Host("n7", "node7", ssh=SSHSettings(proxy_jump="a@jump1:2200,jump2")))
    assert (target.hostname, target.port, target.user) == ("10.0.0.7", 22, "ops")
    assert target.identity_files == (os.path.join(openssh_config._home(), ".ssh/n7"),)
    assert [(j.hostname, j.port, j.user) for j in target.hops][0] == ("jump1", 2200, "a")
    assert [j.hostname for j in target.hops] == ["jump1", "jump2"]
    assert target.known_hosts_name == "10.0.0.7"
    other = ssh_files.target_for(Host("n8", "10.0.0.8", ssh=SSHSettings(user="root", port=2222)))
    assert other.known_hosts_name == "[10.0.0.8]:2222"


def test_run_reading_hands_a_local_commands_output_to_the_consumer(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f.txt").write_bytes(b"hello")
    local = transport.LocalTransport(Host("me", "127.0.0.1", connection="local"))
    command = collect.archive_command(str(tmp_path / "src"), ["."], None, "python3", "", {}, compress=False)
    command = Command(command.argv, stdin=command.stdin, timeout=command.timeout)  # not through sudo here
    result, (written, refused) = local.run_reading(command, lambda s: collect.extract_stream(s, tmp_path / "d", set()))
    assert result.ok and not refused and (tmp_path / "d" / "f.txt").read_bytes() == b"hello"
    assert [f.path for f in collect.parse_report(result.stderr).sent] == ["f.txt"]
    failed, value = local.run_reading(Command(("sh", "-c", "exit 3")), lambda s: s.read())
    assert failed.exit_code == 3 and value is None
