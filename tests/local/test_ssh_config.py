"""Where and how to connect, differentially against OpenSSH: for every ssh_config in the table and
every host asked, what `ssh -G -F file HOST` prints on this machine is the expected answer, and
both of clusterctl's ways of answering (asking `ssh -G` with the inventory's values as ssh's
command-line options, and reading the files itself where no ssh is installed) must give it.
A generated-config property test widens the table."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterctl.errors import UnreachableError
from clusterctl.transport import openssh_config, ssh_g_cache
from clusterctl.transport.openssh_config import Query, parse_ssh_g, resolve

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs an OpenSSH client (the reference)")


def project(target) -> dict:
    """Everything resolved, without where it came from."""
    data = asdict(target)

    def strip(node):
        if isinstance(node, dict):
            node.pop("source", None)
            for value in node.values():
                strip(value)
        return node

    return strip(data)


def openssh_answer_target(query: Query, depth: int = 0):
    """OpenSSH's own answer: `ssh -G` run here with the command line ssh would get, jump hosts
    asked the way ssh's ProxyJump asks them (`ssh -J earlier-hops last-hop`)."""
    from dataclasses import replace

    assert depth <= 8, "ProxyJump loop: ssh would start ssh through ssh until it fails"
    proc = subprocess.run(query.argv("ssh"), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
    assert proc.returncode == 0, proc.stderr
    options = {k: v for k, v in parse_ssh_g(proc.stdout).items() if k in openssh_config.WANTED}
    target = openssh_config._target(query, options, "ssh -G")
    spec = options.get("proxyjump", [None])[0]
    if spec and spec != "none":
        extra, _, last = spec.rpartition(",")
        user, host, port = openssh_config.split_hop(last)
        target = replace(target, jump=openssh_answer_target(Query(host, user, port, proxy_jump=extra or None,
                                                                  config_file=query.config_file), depth + 1),
                         proxy_command=None)
    return target


def assert_like_openssh(query: Query) -> dict:
    expected = project(openssh_answer_target(query))
    assert project(resolve(query, use_ssh=True)) == expected, "asking ssh -G"
    assert project(resolve(query, use_ssh=False)) == expected, "reading ssh_config without ssh"
    return expected


# (case, ssh_config text, extra files, queries: host or (host, user, port, identity, jump, options))
CASES = [
    ("first match wins", """
Host gpu1
  Port 2201
  User first
Host gpu*
  Port 2299
  User second
  IdentityFile ~/.ssh/gpu
Host *
  IdentityFile ~/.ssh/all
  Port 22
""", {}, ["gpu1", "gpu7", "other"]),
    ("several patterns on one Host line, negation and ? wildcards", """
Host web?? db-* !db-test *.lab
  User ops
Host db-test
  User tester
""", {}, ["web01", "web1", "db-prod", "db-test", "x.lab", "lab"]),
    ("Key=Value, quoted values, comments and odd spacing", """
# a comment
Host=quoted
  HostName = 10.1.1.1
  User="a user"
  IdentityFile "/tmp/with space/key"
  Port=2222 # trailing comment
Host "spaced name" other
\tUser\t=\ttabbed
""", {}, ["quoted", "other"]),
    ("Match user before the block that sets User keeps port 22 (issue 24, case 6)", """
Match user trainer host gpu*
  Port 2222
Host gpu*
  User trainer
""", {}, ["gpu1", ("gpu1", "trainer", None, None, None, ())]),
    ("Match host sees HostName; originalhost the name as typed", """
Host short
  HostName long.example.com
Match host long.example.com
  User by-host
Match originalhost short
  Port 2022
Match !host *.example.com
  User not-example
""", {}, ["short", "long.example.com", "else"]),
    ("Match exec runs with tokens, and skips after a failed criterion", """
Match host exec* exec "test %h = execyes"
  User exec-matched
Match exec "false"
  User never
Match all
  Port 2200
""", {}, ["execyes", "execno"]),
    ("Match final runs a second pass", """
Host alias
  HostName real.host
Match final host real.host
  User final-pass
""", {}, ["alias", "real.host"]),
    ("tokens %h %p %r %n %d %u %% in paths and ProxyCommand", """
Host tok*
  HostName %h.internal
  User u-%%x
  IdentityFile ~/.ssh/id_%h_%p_%r_%n
  CertificateFile /tmp/cert_%u_%d_%%
  UserKnownHostsFile /tmp/kh_%h_%p /tmp/kh2_%n
  ProxyCommand ssh -W %h:%p -l %r gw-%n.example
  Port 2200
""", {}, ["tok1", ("tok2", "alice", 2222, None, None, ())]),
    ("ProxyJump chains, user@host:port hops, and ProxyJump before ProxyCommand", """
Host inner
  ProxyJump ops@jump1:2200,jump2
  ProxyCommand never-used %h
Host jump2
  User j2user
  ProxyCommand nc %h %p
Host jump1
  HostName 10.0.0.1
Host pc
  ProxyCommand ssh -W %h:%p bastion
  ProxyJump never-used
""", {}, ["inner", "jump2", "pc", ("plain", None, None, None, "a@hop1:2022,[fd00::1]:22", ())]),
    ("a Host * !bastion ProxyJump reaches the bastion directly", """
Host bastion
  HostName 192.0.2.1
Host * !bastion
  ProxyJump bastion
""", {}, ["node", "bastion"]),
    ("the inventory's user, port, key and options win over ssh_config", """
Host node*
  User config-user
  Port 2200
  IdentityFile ~/.ssh/config_key
  StrictHostKeyChecking yes
  ConnectTimeout 7
""", {}, [("node1", "inv-user", 2299, "/tmp/inv_key", None,
           (("StrictHostKeyChecking", "accept-new"), ("ConnectTimeout", "33"), ("HostKeyAlias", "Node1.Alias")))]),
    ("Include with an absolute glob, and inside a Host block only when that block applies", """
Include {dir}/conf.d/*.conf
Host gated
  Include {dir}/gated.conf
Host *
  User fallback
""", {"conf.d/10-cluster.conf": "Host r3alias\n  HostName 10.9.9.3\n  Port 2203\n",
      "conf.d/20-more.conf": "Host r4alias\n  HostName 10.9.9.4\n",
      "gated.conf": "  Port 2299\nHost *\n  User from-gated\n"},
     ["r3alias", "r4alias", "gated", "ungated"]),
    ("known_hosts files, HostKeyAlias, StrictHostKeyChecking, timeouts, agent, IdentitiesOnly, BatchMode", """
Host a
  UserKnownHostsFile ~/kh/a %d/kh2
  GlobalKnownHostsFile /tmp/global_%h
  HostKeyAlias Cluster-A
  StrictHostKeyChecking no
  ConnectTimeout 1m30s
  ServerAliveInterval 2m
  IdentityAgent /tmp/agent-%u.sock
  IdentitiesOnly yes
  BatchMode yes
  PKCS11Provider /usr/lib/opensc.so
  GSSAPIAuthentication yes
Host b
  UserKnownHostsFile none
  StrictHostKeyChecking accept-new
  IdentityAgent none
""", {}, ["a", "b", "c"]),
    ("addresses keep their case, names are lowercased", """
Host UPPER
  User upper
Host upper
  User lower
""", {}, ["UPPER", "upper", "10.0.0.1", "fd00::1"]),
]


@pytest.mark.parametrize("case, text, files, queries", CASES, ids=[c[0] for c in CASES])
def test_every_host_resolves_as_ssh_G_prints_it(case, text, files, queries, tmp_path):
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body.replace("{dir}", str(tmp_path)))
    config = tmp_path / "ssh_config"
    config.write_text(text.replace("{dir}", str(tmp_path)))
    for item in queries:
        host, user, port, identity, jump, options = (item, None, None, None, None, ()) if isinstance(item, str) else item
        assert_like_openssh(Query(host, user, port, identity, jump, str(config), options))


def test_the_match_user_case_of_issue_24_keeps_port_22_and_the_user_from_the_later_block(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(CASES[3][1])
    answer = assert_like_openssh(Query("gpu1", config_file=str(config)))
    assert (answer["port"], answer["user"]) == (22, "trainer")
    answer = assert_like_openssh(Query("gpu1", user="trainer", config_file=str(config)))
    assert answer["port"] == 2222  # `-l trainer` is known when the Match line is read


def test_a_host_defined_only_in_an_included_file_gets_its_address(tmp_path):
    case = CASES[11]
    for name, body in case[2].items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    config = tmp_path / "ssh_config"
    config.write_text(case[1].replace("{dir}", str(tmp_path)))
    answer = assert_like_openssh(Query("r3alias", config_file=str(config)))
    assert (answer["hostname"], answer["port"]) == ("10.9.9.3", 2203)


def test_tokens_expand_as_ssh_expands_them(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(CASES[7][1])
    target = resolve(Query("tok2", "alice", 2222, config_file=str(config)))
    home = os.path.expanduser("~" + openssh_config._local_user())
    assert target.hostname == "tok2.internal"
    assert target.identity_files == (f"{home}/.ssh/id_tok2.internal_2222_alice_tok2",)
    assert target.user_known_hosts == ("/tmp/kh_tok2.internal_2222", "/tmp/kh2_tok2")
    assert target.proxy_command == "ssh -W tok2.internal:2222 -l alice gw-tok2.example"


def test_an_unknown_token_is_one_clear_error_naming_the_host(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host x\n  ProxyCommand nc %z %p\n")
    for use_ssh in (True, False):
        openssh_config._answers.clear()
        with pytest.raises(UnreachableError) as caught:
            resolve(Query("x", config_file=str(config)), use_ssh=use_ssh)
        assert "%z" in str(caught.value)


def test_a_jump_host_that_is_its_own_jump_host_is_refused_as_ssh_refuses_it(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host bastion\n  HostName 192.0.2.1\nHost *\n  ProxyJump bastion\n")
    for use_ssh in (True, False):
        openssh_config._answers.clear()
        with pytest.raises(UnreachableError) as caught:
            resolve(Query("node", config_file=str(config)), use_ssh=use_ssh)
        assert "loop" in caught.value.what  # ssh itself would start ssh through ssh until it fails


def test_a_config_ssh_refuses_is_refused_with_ssh_own_words_and_where(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host x\n  NoSuchOption yes\n")
    with pytest.raises(UnreachableError) as caught:
        resolve(Query("x", config_file=str(config)), use_ssh=True)
    assert "line 2" in caught.value.what and "nosuchoption" in caught.value.what.lower()


def test_ssh_G_answers_are_kept_on_disk_until_a_file_ssh_reads_changes(tmp_path):
    included = tmp_path / "inc.conf"
    included.write_text("Host n\n  Port 2201\n")
    config = tmp_path / "ssh_config"
    config.write_text(f"Include {included}\n")
    query = Query("n", config_file=str(config))
    assert resolve(query).port == 2201
    ssh_g_cache._write()
    ssh_g_cache.clear_memory()
    openssh_config._answers.clear()
    argv, files = query.argv(shutil.which("ssh")), [(str(config), True)]
    assert ssh_g_cache.lookup(argv, files)["port"] == ["2201"]  # a new process would not run ssh -G
    included.write_text("Host n\n  Port 2202\n")
    ssh_g_cache.clear_memory()
    assert ssh_g_cache.lookup(argv, files) is None  # the included file changed
    assert resolve(query).port == 2202


# ---- generated configs: any mix of the constructs above, every host, against ssh -G

_PATTERNS = ["gpu*", "gpu1", "!gpu2", "*.lab", "x?", "*", "db", "GPU1", "!*.lab", "10.1.*"]
_HOSTS = ["gpu1", "gpu2", "a.lab", "xy", "db", "GPU1", "10.1.2.3"]
_OPTIONS = [("HostName", ["%h.real", "10.9.0.1", "real.lab"]), ("User", ["ops", "trainer", '"q user"']),
            ("Port", ["2201", "2202"]), ("IdentityFile", ["~/.ssh/k_%h", "/tmp/k2"]),
            ("ProxyJump", ["jump", "u@j2:2200", "none"]), ("ProxyCommand", ["nc %h %p", "none"]),
            ("HostKeyAlias", ["alias-%h", "Alias2"]), ("ConnectTimeout", ["5", "1m"]),
            ("StrictHostKeyChecking", ["no", "accept-new", "yes"]), ("UserKnownHostsFile", ["/tmp/kh_%h /tmp/x"])]


@st.composite
def _config(draw):
    lines = []
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            lines.append("Host " + " ".join(draw(st.lists(st.sampled_from(_PATTERNS), min_size=1, max_size=3))))
        else:
            kind = draw(st.sampled_from(["host", "originalhost", "user", "!host", "all"]))
            argument = "" if kind == "all" else " " + draw(st.sampled_from(
                ["ops", "trainer", "root"] if kind == "user" else ["gpu*", "*.lab", "real.lab", "10.9.*", "xy"]))
            lines.append(f"Match {kind}{argument}")
        for _ in range(draw(st.integers(0, 3))):
            key, values = draw(st.sampled_from(_OPTIONS))
            separator = draw(st.sampled_from([" ", "=", " = "]))
            lines.append(f"  {key}{separator}{draw(st.sampled_from(values))}")
    return "\n".join(lines) + "\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=_config(), host=st.sampled_from(_HOSTS), user=st.sampled_from([None, "ops", "trainer"]))
def test_generated_configs_resolve_as_ssh_G_prints_them(text, host, user):
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "ssh_config"
        config.write_text(text)
        openssh_config._answers.clear()
        ssh_g_cache.clear_memory()
        os.environ["CLUSTERCTL_CACHE_DIR"] = str(Path(directory) / "cache")
        try:
            expected = project(openssh_answer_target(Query(host, user=user, config_file=str(config))))
        except AssertionError as refused:  # a jump host loop ssh refuses or never leaves: we refuse, both ways
            assert "loop" in str(refused)
            for use_ssh in (True, False):
                openssh_config._answers.clear()
                with pytest.raises(UnreachableError, match="loop"):
                    resolve(Query(host, user=user, config_file=str(config)), use_ssh=use_ssh)
            return
        assert project(resolve(Query(host, user=user, config_file=str(config)), use_ssh=True)) == expected
        assert project(resolve(Query(host, user=user, config_file=str(config)), use_ssh=False)) == expected
