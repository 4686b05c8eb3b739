"""known_hosts as OpenSSH reads it. Which lines apply to a name is checked differentially against
`ssh-keygen -F NAME -f FILE` (OpenSSH's own matcher: plain, hashed, wildcard, negated and
[host]:port names, @cert-authority and @revoked markers), over a table and generated files; the
verdict on a key (ok, new, changed, revoked, the retry without the port) against check_host_key's
rules, on keys made by ssh-keygen."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterctl.transport import known_hosts
from clusterctl.transport.known_hosts import ServerKey, judge, lines_for, preferred_algorithms

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen (the reference)")

_KEYS: dict = {}


def key(name: str) -> str:
    """`ssh-ed25519 BASE64` of a fresh key, one per name for the whole module."""
    if name not in _KEYS:
        directory = Path(tempfile.mkdtemp())
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(directory / "k")], check=True)
        _KEYS[name] = " ".join((directory / "k.pub").read_text().split()[:2])
        shutil.rmtree(directory)
    return _KEYS[name]


def blob(text: str) -> bytes:
    import base64

    return base64.b64decode(text.split()[1])


def openssh_lines(name: str, path: Path) -> set:
    """The line numbers `ssh-keygen -F` reports for `name`, lowercased as ssh lowercases a host
    name before looking it up (ssh-keygen hashes the name as given)."""
    proc = subprocess.run(["ssh-keygen", "-F", name.lower(), "-f", str(path)], capture_output=True, text=True, timeout=30)
    return {int(line.split("found: line ")[1].split()[0]) for line in proc.stdout.splitlines()
            if line.startswith("# Host ") and "found: line " in line}


def ours(name: str, path: Path) -> set:
    return {entry.line for entry in lines_for(name, [str(path)])}


TABLE = [
    "node1 {a}",
    "node2,10.0.0.2 {a}",
    "*.lab,!bad.lab {a}",
    "[10.0.0.*]:2222 {a}",
    "10.0.0.? {b}",
    "@cert-authority *.cluster {ca}",
    "@revoked * {r}",
    "# a comment",
    "",
    "[node3]:2200 {b}",
    "NODE4 {b}",
    "@bogus-marker node1 {a}",
]
NAMES = ["node1", "NODE1", "node2", "10.0.0.2", "x.lab", "bad.lab", "[10.0.0.5]:2222", "10.0.0.5", "10.0.0.55",
         "a.cluster", "[node3]:2200", "node3", "node4", "[node1]:22"]


def _write(path: Path, lines: list) -> Path:
    values = {"a": key("a"), "b": key("b"), "ca": key("ca"), "r": key("r")}
    path.write_text("".join(line.format(**values) + "\n" for line in lines))
    return path


def test_the_lines_that_apply_to_a_name_are_those_ssh_keygen_finds(tmp_path):
    path = _write(tmp_path / "known_hosts", TABLE)
    hashed = _write(tmp_path / "hashed", [line for line in TABLE if "bogus" not in line])
    subprocess.run(["ssh-keygen", "-H", "-f", str(hashed)], check=True, capture_output=True)  # as HashKnownHosts writes
    for name in NAMES:
        assert ours(name, path) == openssh_lines(name, path), name
        assert ours(name, hashed) == openssh_lines(name, hashed), f"{name} (hashed)"


_NAME_POOL = ["node1", "node2", "x.lab", "bad.lab", "10.0.0.5", "[10.0.0.5]:2222", "gpu-01", "Gpu-02"]
_PATTERN_POOL = ["node1", "node?", "*.lab", "!bad.lab", "10.0.0.*", "[10.0.0.*]:2222", "*", "!*", "gpu-0[1]",
                 "GPU-*", "!node2", "[node1]:22"]


@st.composite
def _known_hosts_text(draw):
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        marker = draw(st.sampled_from(["", "", "@cert-authority ", "@revoked "]))
        if draw(st.integers(0, 4)) == 0:
            names = known_hosts.hashed_name(draw(st.sampled_from(_NAME_POOL)).lower())
        else:
            names = ",".join(draw(st.lists(st.sampled_from(_PATTERN_POOL), min_size=1, max_size=3)))
        lines.append(f"{marker}{names} {key(draw(st.sampled_from(['a', 'b'])))}")
    return "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_known_hosts_text(), name=st.sampled_from(_NAME_POOL))
def test_generated_known_hosts_files_match_as_ssh_keygen_matches(text, name):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "known_hosts"
        path.write_text(text)
        assert ours(name, path) == openssh_lines(name, path)


# ---- the verdict (sshconnect.c check_host_key)


def _server(name: str) -> ServerKey:
    return ServerKey("ssh-ed25519", blob(key(name)))


def test_a_listed_key_is_ok_another_key_is_changed_an_unlisted_host_is_new(tmp_path):
    path = _write(tmp_path / "kh", ["node1 {a}", "node2 {b}"])
    assert judge(_server("a"), "node1", 22, None, [str(path)]).status == "ok"
    changed = judge(_server("a"), "node2", 22, None, [str(path)])
    assert changed.status == "changed" and changed.line.line == 2
    assert judge(_server("a"), "node3", 22, None, [str(path)]).status == "new"


def test_the_global_file_counts_as_the_user_file_does(tmp_path):
    user = _write(tmp_path / "user", ["other {b}"])
    system = _write(tmp_path / "global", ["node1 {a}"])
    verdict = judge(_server("a"), "node1", 22, None, [str(user), str(system)])
    assert verdict.status == "ok" and verdict.line.path == str(system)


def test_a_revoked_key_is_refused_even_where_another_line_lists_it(tmp_path):
    path = _write(tmp_path / "kh", ["node1 {a}", "@revoked * {a}"])
    verdict = judge(_server("a"), "node1", 22, None, [str(path)])
    assert verdict.status == "revoked" and verdict.line.line == 2


def test_another_port_is_looked_up_bracketed_then_without_the_port(tmp_path):
    path = _write(tmp_path / "kh", ["node1 {a}", "[node2]:2222 {a}", "node2 {b}"])
    assert judge(_server("a"), "node1", 2222, None, [str(path)]).status == "ok"  # only `node1` listed: ssh accepts
    assert judge(_server("a"), "node2", 2222, None, [str(path)]).status == "ok"
    assert judge(_server("b"), "node2", 2222, None, [str(path)]).status == "changed"  # [node2]:2222 lists a


def test_host_key_alias_replaces_the_name_and_the_port(tmp_path):
    path = _write(tmp_path / "kh", ["cluster-a {a}"])
    assert judge(_server("a"), "10.0.0.1", 2200, "cluster-a", [str(path)]).status == "ok"
    assert judge(_server("a"), "10.0.0.1", 2200, None, [str(path)]).status == "new"


def test_known_key_types_are_asked_for_first_and_certificates_where_a_ca_applies(tmp_path):
    offered = ("ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "ssh-ed25519-cert-v01@openssh.com",
               "ecdsa-sha2-nistp256-cert-v01@openssh.com", "rsa-sha2-512-cert-v01@openssh.com")
    rsa = tmp_path / "rsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(rsa)], check=True)
    rsa_pub = " ".join(Path(f"{rsa}.pub").read_text().split()[:2])
    path = tmp_path / "kh"
    path.write_text(f"rsahost {rsa_pub}\nedhost {key('a')}\n@cert-authority *.ca {key('ca')}\n")
    assert preferred_algorithms(offered, "rsahost", [str(path)])[:2] == ("rsa-sha2-512-cert-v01@openssh.com",
                                                                         "rsa-sha2-512")
    assert preferred_algorithms(offered, "edhost", [str(path)])[0] == "ssh-ed25519-cert-v01@openssh.com"
    assert preferred_algorithms(offered, "x.ca", [str(path)])[:3] == tuple(a for a in offered if "cert" in a)


def test_a_changed_file_is_read_again(tmp_path):
    path = _write(tmp_path / "kh", ["node1 {a}"])
    assert judge(_server("a"), "node1", 22, None, [str(path)]).status == "ok"
    _write(path, ["node1 {b}"])
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert judge(_server("a"), "node1", 22, None, [str(path)]).status == "changed"


def test_lines_ssh_would_skip_are_skipped(tmp_path):
    path = tmp_path / "kh"
    path.write_text(f"node1 ssh-ed25519 !!notbase64\nnode1 ssh-rsa {key('a').split()[1]}\n@weird node1 {key('a')}\n"
                    f"node1\n\n# node1 {key('a')}\n")
    assert lines_for("node1", [str(path)]) == []
