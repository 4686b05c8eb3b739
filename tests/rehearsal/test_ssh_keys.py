"""Keys as OpenSSH uses them, against real sshds and a real ssh-agent, with OpenSSH's verdict as
the reference: a passphrase-protected identity_file is signed by the agent's copy; without one it
fails at once with the fix (never a prompt without a terminal); on a terminal the passphrase is
asked once; IdentitiesOnly keeps the agent's other keys back; user certificates (beside the key,
or CertificateFile) authenticate; FIDO key files, PKCS#11 and GSSAPI are named in the failure."""
from __future__ import annotations

import base64
import os
import select
import struct
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from ssh_testbed import Servers, have_openssh, keygen, openssh_accepts

from clusterctl.errors import UnreachableError
from clusterctl.models import Host, SSHSettings
from clusterctl.transport import SSHTransport, openssh_config, ssh_g_cache, ssh_keys
from clusterctl.transport.openssh_config import SSHTarget

pytestmark = pytest.mark.skipif(not have_openssh(), reason="needs root and OpenSSH (sshd, ssh, ssh-keygen, ssh-agent)")
PASSPHRASE = "correct horse battery"


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    directory = tmp_path_factory.mktemp("keys")
    servers = Servers(directory)
    try:
        locked = keygen(directory / "locked", PASSPHRASE)
        user_ca = keygen(directory / "user_ca")
        servers.locked = locked
        servers.user_ca = user_ca
        servers.open = servers.sshd("open", authorized=(locked,))
        servers.certs_only = servers.sshd("certs", options=f"TrustedUserCAKeys {user_ca}.pub")
        servers.gssapi = servers.sshd("gssapi", options="GSSAPIAuthentication yes")
        yield servers
    finally:
        servers.stop()


@pytest.fixture(autouse=True)
def _clean(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTERCTL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    ssh_g_cache.clear_memory()
    openssh_config._answers.clear()


def config_for(tmp_path: Path, server, extra: str = "") -> Path:
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{server.port} {server.host_pub}\n")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host node\n  HostName 127.0.0.1\n  Port {server.port}\n  User root\n"
                      f"  UserKnownHostsFile {known}\n  GlobalKnownHostsFile /dev/null\n{extra}")
    return config


def connect(config: Path, **ssh) -> SSHTransport:
    settings = SSHSettings(config_file=str(config), connect_timeout=5, **ssh)
    return SSHTransport(Host("node", "node", ssh=settings)).open()


def test_a_passphrase_protected_identity_file_is_signed_by_the_agents_copy(tmp_path, servers, monkeypatch):
    agent = servers.agent(servers.locked, passphrase=PASSPHRASE)
    config = config_for(tmp_path, servers.open, f"  IdentityFile {servers.locked}\n  IdentitiesOnly yes\n")
    assert openssh_accepts(config, "node", env={**os.environ, "SSH_AUTH_SOCK": agent})[0]
    monkeypatch.setenv("SSH_AUTH_SOCK", agent)
    transport = connect(config, identity_file=str(servers.locked))
    try:
        assert transport.alive
    finally:
        transport.close()


def test_a_locked_key_the_agent_lacks_fails_at_once_with_the_fix_and_no_prompt(tmp_path, servers, monkeypatch):
    agent = servers.agent(servers.client_key)  # another key: the node does not accept it
    config = config_for(tmp_path, servers.open, f"  IdentityFile {servers.locked}\n  IdentitiesOnly yes\n")
    assert not openssh_accepts(config, "node", env={**os.environ, "SSH_AUTH_SOCK": agent})[0]
    monkeypatch.setenv("SSH_AUTH_SOCK", agent)
    started = time.monotonic()
    with pytest.raises(UnreachableError) as caught:
        connect(config)
    assert time.monotonic() - started < 5
    assert "authentication failed as root@127.0.0.1" in caught.value.what
    assert f"{servers.locked} is passphrase-protected" in caught.value.what and f"ssh-add {servers.locked}" in caught.value.what


def test_identities_only_keeps_the_agents_other_keys_back(tmp_path, servers, monkeypatch):
    other = keygen(tmp_path / "other")
    monkeypatch.setenv("SSH_AUTH_SOCK", servers.agent(servers.client_key, other))
    base = SSHTarget("n", "n", 22, "root", identity_files=(str(servers.client_key),))
    both = ssh_keys.plan_keys(base)
    only = ssh_keys.plan_keys(replace(base, identities_only=True))
    try:
        assert [name for name, _ in both.offered] == [f"{servers.client_key} (the agent's copy)", "agent key test"]
        assert [name for name, _ in only.offered] == [f"{servers.client_key} (the agent's copy)"]
        assert only.offered[0][1].asbytes() == base64.b64decode(Path(f"{servers.client_key}.pub").read_text().split()[1])
    finally:
        both.close()
        only.close()


def test_the_inventorys_key_is_offered_before_the_agents_many_others(tmp_path, servers, monkeypatch):
    """ssh offers the agent's keys before a key file and runs into MaxAuthTries; clusterctl offers
    the key the inventory names first (a deliberate difference)."""
    strict = servers.sshd("few-tries", options="MaxAuthTries 2")
    strangers = [keygen(tmp_path / f"stranger{i}") for i in range(3)]
    agent = servers.agent(*strangers)
    config = config_for(tmp_path, strict, f"  IdentityFile {servers.client_key}\n")  # as `ssh -i KEY`
    env = {**os.environ, "SSH_AUTH_SOCK": agent}
    theirs = openssh_accepts(config, "node", env=env)
    assert not theirs[0] and "Too many authentication failures" in theirs[1]
    monkeypatch.setenv("SSH_AUTH_SOCK", agent)
    connect(config, identity_file=str(servers.client_key)).close()


def test_a_user_certificate_beside_the_key_authenticates(tmp_path, servers):
    key = keygen(tmp_path / "certified")
    subprocess.run(["ssh-keygen", "-q", "-s", str(servers.user_ca), "-I", "u", "-n", "root", f"{key}.pub"], check=True)
    config = config_for(tmp_path, servers.certs_only, f"  IdentityFile {key}\n  IdentitiesOnly yes\n")
    assert openssh_accepts(config, "node")[0]
    connect(config).close()


def test_a_certificate_file_pairs_with_its_agent_key(tmp_path, servers, monkeypatch):
    key = keygen(tmp_path / "agentkey")
    subprocess.run(["ssh-keygen", "-q", "-s", str(servers.user_ca), "-I", "u", "-n", "root", f"{key}.pub"], check=True)
    cert = tmp_path / "elsewhere-cert.pub"
    Path(f"{key}-cert.pub").rename(cert)
    agent = servers.agent(key)
    config = config_for(tmp_path, servers.certs_only, f"  CertificateFile {cert}\n  IdentityFile {key}\n")
    assert openssh_accepts(config, "node", env={**os.environ, "SSH_AUTH_SOCK": agent})[0]
    monkeypatch.setenv("SSH_AUTH_SOCK", agent)
    connect(config).close()


def test_an_unauthorized_key_is_refused_like_openssh_refuses_it(tmp_path, servers):
    stranger = keygen(tmp_path / "stranger")
    config = config_for(tmp_path, servers.open, f"  IdentityFile {stranger}\n  IdentitiesOnly yes\n")
    assert not openssh_accepts(config, "node")[0]
    with pytest.raises(UnreachableError, match=f"offered 1 key\\(s\\): {stranger}"):
        connect(config)


def test_gssapi_and_pkcs11_from_ssh_config_are_named_when_keys_fail(tmp_path, servers):
    stranger = keygen(tmp_path / "stranger")
    config = config_for(tmp_path, servers.gssapi, f"  IdentityFile {stranger}\n  IdentitiesOnly yes\n"
                        "  GSSAPIAuthentication yes\n  PKCS11Provider /usr/lib/no-such-pkcs11.so\n")
    with pytest.raises(UnreachableError) as caught:
        connect(config)
    assert "GSSAPI (Kerberos), which ssh_config enables, is not used by clusterctl" in caught.value.what
    assert "ssh-add -s /usr/lib/no-such-pkcs11.so" in caught.value.what


def _fido_key_file(path: Path) -> Path:
    """An OpenSSH private key file whose key is a FIDO sk-ssh-ed25519 key (no token needed to
    read its public half; paramiko cannot use it)."""
    def string(data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + data

    public = string(b"sk-ssh-ed25519@openssh.com") + string(os.urandom(32)) + string(b"ssh:")
    body = (b"openssh-key-v1\0" + string(b"none") + string(b"none") + string(b"") + struct.pack(">I", 1) +
            string(public) + string(b"\0" * 16))
    text = base64.encodebytes(body).decode().replace("\n", "")
    path.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(text[i:i + 70] for i in range(0, len(text), 70))
                    + "\n-----END OPENSSH PRIVATE KEY-----\n")
    return path


def test_a_fido_key_file_is_one_clear_error(tmp_path):
    path = _fido_key_file(tmp_path / "id_ed25519_sk")
    notes: list = []
    target = SSHTarget("n", "n", 22, "root", identity_files=(str(path),))
    assert ssh_keys.public_half(str(path))[4:30] == b"sk-ssh-ed25519@openssh.com"
    assert ssh_keys.load_key(str(path), target, notes) is None
    assert notes and "FIDO security key (sk-ssh-ed25519@openssh.com)" in notes[0] and "ssh-agent" in notes[0]


def test_no_prompt_without_a_terminal_under_json_in_ci_or_in_batch_mode(monkeypatch):
    target = SSHTarget("n", "n", 22, "root")
    assert not ssh_keys.can_prompt(target)  # pytest's stdin is no terminal
    monkeypatch.setattr(sys, "stdin", _Tty())
    monkeypatch.setattr(sys, "stdout", _Tty())
    monkeypatch.setattr(sys, "stderr", _Tty())
    monkeypatch.delenv("CI", raising=False)
    can_open_tty = os.path.exists("/dev/tty") and _opens("/dev/tty")
    assert ssh_keys.can_prompt(target) == can_open_tty
    assert not ssh_keys.can_prompt(replace(target, batch_mode=True))
    monkeypatch.setenv("CI", "true")
    assert not ssh_keys.can_prompt(target)
    monkeypatch.delenv("CI")
    ssh_keys.allow_prompts(False)
    try:
        assert not ssh_keys.can_prompt(target)
    finally:
        ssh_keys.allow_prompts(True)


class _Tty:
    def isatty(self):
        return True


def _opens(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_RDWR))
        return True
    except OSError:
        return False


_CHILD = """
import sys
from clusterctl.models import Host, SSHSettings
from clusterctl.transport import SSHTransport
t = SSHTransport(Host("node", "node", ssh=SSHSettings(config_file=sys.argv[1], identity_file=sys.argv[2]))).open()
print("CONNECTED", t.alive, flush=True)
t.close()
"""


def test_on_a_terminal_the_passphrase_is_asked_once_and_the_key_used(tmp_path, servers):
    """A real pseudo-terminal: the prompt appears, the passphrase typed is used."""
    import pty

    config = config_for(tmp_path, servers.open, "  IdentitiesOnly yes\n")
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "CI")}
    env.update(CLUSTERCTL_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(Path(__file__).parents[2]))
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session whose controlling terminal is the pty
        os.execve(sys.executable, [sys.executable, "-c", _CHILD, str(config), str(servers.locked)], env)
    output, status = b"", None
    try:
        output = _read_until(fd, b"Enter passphrase for key", 30)
        os.write(fd, PASSPHRASE.encode() + b"\n")
        output += _read_until(fd, b"CONNECTED True", 30)
    finally:
        status = _reap(pid)
        os.close(fd)
    assert b"Enter passphrase for key '" + str(servers.locked).encode() in output
    assert b"CONNECTED True" in output and status == 0, output


def _reap(pid: int, seconds: float = 10) -> int:
    """The child's exit code; a child still waiting (at a second prompt) is killed, never waited on forever."""
    import signal

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _read_until(fd: int, marker: bytes, seconds: float) -> bytes:
    data, deadline = b"", time.monotonic() + seconds
    while marker not in data and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
    return data


def test_json_output_turns_passphrase_prompts_off_for_the_process(tmp_path, capsys):
    from clusterctl import cli

    try:
        code = cli.main(["exec", "--json", "-i", str(tmp_path / "missing.yaml"), "--", "true"],
                        {**os.environ, "CLUSTERCTL_STATE": str(tmp_path / "state")})
        assert code == 2 and ssh_keys._prompts["allowed"] is False
    finally:
        ssh_keys.allow_prompts(True)
