"""Host-key trust against real sshds (tests/ssh_testbed.py: 127.0.0.1, free high ports, temporary
directories), each case with OpenSSH's own verdict as the reference: `ssh -F CONFIG -o
BatchMode=yes -o StrictHostKeyChecking=yes ALIAS true` must succeed exactly when clusterctl, with
host_key_policy strict and the same ssh_config, connects. Every setup of issue 24 has its
negative control: a key signed by another CA, a wildcard line with the wrong key, a revoked key."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from ssh_testbed import Servers, have_openssh, keygen, openssh_accepts, public_line

from clusterctl.errors import HostKeyError, UnreachableError
from clusterctl.models import Host, SSHSettings
from clusterctl.transport import SSHTransport, known_hosts, openssh_config, ssh_g_cache

pytestmark = pytest.mark.skipif(not have_openssh(), reason="needs root and OpenSSH (sshd, ssh, ssh-keygen, ssh-agent)")


@dataclass
class Bed:
    testbed: Servers
    ca: Path
    other_ca: Path
    plain: object
    cert: object
    cert_other: object
    expired: object
    bastion: object


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    directory = tmp_path_factory.mktemp("trust")
    testbed = Servers(directory)
    try:
        ca, other_ca = keygen(directory / "ca"), keygen(directory / "other_ca")
        yield Bed(testbed, ca, other_ca, plain=testbed.sshd("plain"),
                  cert=testbed.sshd("cert", cert_by=ca, principals="node-cert.cluster"),
                  cert_other=testbed.sshd("cert-other", cert_by=other_ca, principals="node-other.cluster"),
                  expired=testbed.sshd("expired", cert_by=ca, principals="node-expired.cluster", validity="-2d:-1d"),
                  bastion=testbed.sshd("bastion"))
    finally:
        testbed.stop()


@pytest.fixture(autouse=True)
def _clean(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTERCTL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    ssh_g_cache.clear_memory()
    openssh_config._answers.clear()


def ca_line(path: Path) -> str:
    return public_line(Path(f"{path}.pub"))


def setup(tmp_path: Path, bed: Bed, hosts: str, user_lines=(), global_lines=()) -> Path:
    """An ssh_config with `hosts` blocks, the client key, and known_hosts files of our own."""
    user, system = tmp_path / "known_hosts", tmp_path / "global_known_hosts"
    user.write_text("".join(line + "\n" for line in user_lines))
    system.write_text("".join(line + "\n" for line in global_lines))
    config = tmp_path / "ssh_config"
    config.write_text(hosts.format(plain=bed.plain.port, cert=bed.cert.port, cert_other=bed.cert_other.port,
                                   expired=bed.expired.port, bastion=bed.bastion.port, dir=tmp_path) +
                      f"\nHost *\n  User root\n  IdentityFile {bed.testbed.client_key}\n  IdentitiesOnly yes\n"
                      f"  UserKnownHostsFile {user}\n  GlobalKnownHostsFile {system}\n")
    return config


def clusterctl_accepts(config: Path, alias: str, **ssh) -> tuple[bool, str]:
    settings = SSHSettings(config_file=str(config), host_key_policy="strict", connect_timeout=5,
                           explicit=frozenset({"host_key_policy", "connect_timeout"}), **ssh)
    transport = SSHTransport(Host(alias, alias, ssh=settings))
    try:
        transport.open()  # the host key judged and a key accepted: what the OpenSSH reference proves too
        return transport.alive, ""
    except (HostKeyError, UnreachableError) as exc:
        return False, str(exc)
    finally:
        transport.close()


def assert_same_verdict(config: Path, alias: str, accepted: bool, env=None, **ssh) -> str:
    theirs, their_words = openssh_accepts(config, alias, env=env)
    ours, our_words = clusterctl_accepts(config, alias, **ssh)
    assert theirs == accepted, f"OpenSSH: {their_words}"
    assert ours == accepted, f"clusterctl: {our_words}"
    return our_words


NODE = "Host node\n  HostName 127.0.0.1\n  Port {plain}\n"


def test_a_key_only_in_the_global_known_hosts_is_trusted(tmp_path, bed):
    config = setup(tmp_path, bed, NODE, global_lines=[f"[127.0.0.1]:{bed.plain.port} {bed.plain.host_pub}"])
    assert_same_verdict(config, "node", True)


def test_a_global_known_hosts_line_with_another_key_is_a_changed_key(tmp_path, bed):
    config = setup(tmp_path, bed, NODE, global_lines=[f"[127.0.0.1]:{bed.plain.port} {bed.bastion.host_pub}"])
    words = assert_same_verdict(config, "node", False)
    assert "CHANGED" in words and "global_known_hosts:1" in words and "ssh-keygen -f" in words


@pytest.mark.parametrize("pattern", ["[127.0.0.*]:{port}", "[127.0.0.?]:{port}", "*", "[*]:{port},!nothing"])
def test_a_wildcard_line_is_trusted(tmp_path, bed, pattern):
    line = pattern.format(port=bed.plain.port) + " " + bed.plain.host_pub
    assert_same_verdict(setup(tmp_path, bed, NODE, user_lines=[line]), "node", True)


def test_a_wildcard_line_with_the_wrong_key_is_refused(tmp_path, bed):
    config = setup(tmp_path, bed, NODE, user_lines=[f"[127.0.0.*]:{bed.plain.port} {bed.bastion.host_pub}"])
    assert "CHANGED" in assert_same_verdict(config, "node", False)


def test_a_negated_pattern_vetoes_the_line(tmp_path, bed):
    hosts = "Host node1.cluster\n  HostName 127.0.0.1\n  Port {plain}\n  HostKeyAlias node1.cluster\n"
    config = setup(tmp_path, bed, hosts, user_lines=[f"*.cluster,!node1.cluster {bed.plain.host_pub}"])
    assert "unknown host key" in assert_same_verdict(config, "node1.cluster", False)


def test_a_hashed_name_is_trusted(tmp_path, bed):
    line = f"{known_hosts.hashed_name(f'[127.0.0.1]:{bed.plain.port}')} {bed.plain.host_pub}"
    assert_same_verdict(setup(tmp_path, bed, NODE, user_lines=[line]), "node", True)


def test_a_line_without_the_port_is_used_when_no_line_names_the_port(tmp_path, bed):
    assert_same_verdict(setup(tmp_path, bed, NODE, user_lines=[f"127.0.0.1 {bed.plain.host_pub}"]), "node", True)


def test_a_revoked_key_is_refused_though_another_line_lists_it(tmp_path, bed):
    config = setup(tmp_path, bed, NODE, user_lines=[f"[127.0.0.1]:{bed.plain.port} {bed.plain.host_pub}"],
                   global_lines=[f"@revoked * {bed.plain.host_pub}"])
    assert "REVOKED" in assert_same_verdict(config, "node", False)


CERT = ("Host node-cert.cluster\n  HostName 127.0.0.1\n  Port {cert}\n  HostKeyAlias node-cert.cluster\n"
        "Host other.cluster\n  HostName 127.0.0.1\n  Port {cert}\n  HostKeyAlias other.cluster\n"
        "Host node-other.cluster\n  HostName 127.0.0.1\n  Port {cert_other}\n  HostKeyAlias node-other.cluster\n"
        "Host node-expired.cluster\n  HostName 127.0.0.1\n  Port {expired}\n  HostKeyAlias node-expired.cluster\n")


def test_a_ca_signed_host_certificate_is_trusted_through_cert_authority(tmp_path, bed):
    config = setup(tmp_path, bed, CERT, global_lines=[f"@cert-authority *.cluster {ca_line(bed.ca)}"])
    assert_same_verdict(config, "node-cert.cluster", True)


def test_a_certificate_signed_by_another_ca_is_refused(tmp_path, bed):
    config = setup(tmp_path, bed, CERT, global_lines=[f"@cert-authority *.cluster {ca_line(bed.ca)}"])
    words = assert_same_verdict(config, "node-other.cluster", False)
    assert "unknown host key" in words and "no @cert-authority line" in words


def test_a_cert_authority_line_for_another_ca_does_not_vouch(tmp_path, bed):
    config = setup(tmp_path, bed, CERT, user_lines=[f"@cert-authority *.cluster {ca_line(bed.other_ca)}"])
    assert_same_verdict(config, "node-cert.cluster", False)


def test_a_certificate_not_naming_the_host_is_refused(tmp_path, bed):
    config = setup(tmp_path, bed, CERT, user_lines=[f"@cert-authority *.cluster {ca_line(bed.ca)}"])
    assert "not a listed principal" in assert_same_verdict(config, "other.cluster", False)


def test_an_expired_certificate_is_refused(tmp_path, bed):
    config = setup(tmp_path, bed, CERT, user_lines=[f"@cert-authority *.cluster {ca_line(bed.ca)}"])
    assert "expired" in assert_same_verdict(config, "node-expired.cluster", False)


def test_a_revoked_ca_is_refused(tmp_path, bed):
    config = setup(tmp_path, bed, CERT, user_lines=[f"@cert-authority *.cluster {ca_line(bed.ca)}",
                                                    f"@revoked * {ca_line(bed.ca)}"])
    assert "REVOKED" in assert_same_verdict(config, "node-cert.cluster", False)


def test_a_certificate_no_ca_vouches_for_is_judged_as_its_plain_key(tmp_path, bed):
    config = setup(tmp_path, bed, CERT, user_lines=[f"@cert-authority *.cluster {ca_line(bed.ca)}",
                                                    f"node-other.cluster {bed.cert_other.host_pub}"])
    assert_same_verdict(config, "node-other.cluster", True)


JUMP = ("Host node\n  HostName 127.0.0.1\n  Port {plain}\n  ProxyJump bastion\n"
        "Host bastion\n  HostName 127.0.0.1\n  Port {bastion}\n")


def test_a_jump_host_is_judged_by_the_same_rules(tmp_path, bed):
    node = f"[127.0.0.1]:{bed.plain.port} {bed.plain.host_pub}"
    config = setup(tmp_path, bed, JUMP, user_lines=[node],
                   global_lines=[f"[127.0.0.*]:{bed.bastion.port} {bed.bastion.host_pub}"])
    assert_same_verdict(config, "node", True)


def test_a_jump_host_with_the_wrong_key_is_refused(tmp_path, bed):
    node = f"[127.0.0.1]:{bed.plain.port} {bed.plain.host_pub}"
    config = setup(tmp_path, bed, JUMP, user_lines=[node, f"[127.0.0.1]:{bed.bastion.port} {bed.plain.host_pub}"])
    words = assert_same_verdict(config, "node", False)
    assert f"[127.0.0.1]:{bed.bastion.port} CHANGED" in words


def test_a_proxy_command_through_openssh_reaches_the_node(tmp_path, bed):
    hosts = ("Host node\n  HostName 127.0.0.1\n  Port {plain}\n  ProxyCommand ssh -F {dir}/ssh_config -W %h:%p bastion\n"
             "Host bastion\n  HostName 127.0.0.1\n  Port {bastion}\n")
    config = setup(tmp_path, bed, hosts, user_lines=[f"[127.0.0.1]:{bed.plain.port} {bed.plain.host_pub}",
                                                     f"[127.0.0.1]:{bed.bastion.port} {bed.bastion.host_pub}"])
    assert_same_verdict(config, "node", True)


def test_a_proxy_command_that_fails_says_what_it_said(tmp_path, bed):
    hosts = "Host node\n  HostName 127.0.0.1\n  Port {plain}\n  ProxyCommand sh -c 'echo no route to %h >&2; exit 7'\n"
    config = setup(tmp_path, bed, hosts, user_lines=[f"[127.0.0.1]:{bed.plain.port} {bed.plain.host_pub}"])
    words = assert_same_verdict(config, "node", False)
    assert "no route to 127.0.0.1" in words and "exit 7" in words


def test_a_host_defined_only_in_an_included_file_is_reached(tmp_path, bed):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "cluster.conf").write_text(f"Host r3alias\n  HostName 127.0.0.1\n  Port {bed.plain.port}\n")
    config = setup(tmp_path, bed, "Include {dir}/conf.d/*.conf\n",
                   user_lines=[f"[127.0.0.1]:{bed.plain.port} {bed.plain.host_pub}"])
    assert_same_verdict(config, "r3alias", True)


def test_accept_new_from_ssh_config_records_a_hashed_line_and_still_refuses_a_changed_key(tmp_path, bed):
    config = setup(tmp_path, bed, NODE + "  StrictHostKeyChecking accept-new\n  HashKnownHosts yes\n")
    settings = SSHSettings(config_file=str(config), connect_timeout=5)  # the inventory sets no policy
    transport = SSHTransport(Host("node", "node", ssh=settings)).open()
    transport.close()
    recorded = (tmp_path / "known_hosts").read_text()
    assert recorded.startswith("|1|") and bed.plain.host_pub.split()[1] in recorded
    again = SSHTransport(Host("node", "node", ssh=settings)).open()  # now known: no second line
    again.close()
    assert (tmp_path / "known_hosts").read_text() == recorded
    (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{bed.plain.port} {bed.bastion.host_pub}\n")
    with pytest.raises(HostKeyError, match="CHANGED"):
        SSHTransport(Host("node", "node", ssh=settings)).open()


def test_strict_host_key_checking_no_is_accept_new_never_accept_any(tmp_path, bed):
    config = setup(tmp_path, bed, NODE + "  StrictHostKeyChecking no\n",
                   user_lines=[f"[127.0.0.1]:{bed.plain.port} {bed.bastion.host_pub}"])
    settings = SSHSettings(config_file=str(config), connect_timeout=5)
    with pytest.raises(HostKeyError, match="CHANGED"):  # ssh would connect (without forwarding); we refuse
        SSHTransport(Host("node", "node", ssh=settings)).open()


def test_the_inventory_policy_wins_over_ssh_config(tmp_path, bed):
    config = setup(tmp_path, bed, NODE + "  StrictHostKeyChecking accept-new\n")
    ok, words = clusterctl_accepts(config, "node")  # host_key_policy: strict set in the inventory
    assert not ok and "unknown host key" in words and (tmp_path / "known_hosts").read_text() == ""
