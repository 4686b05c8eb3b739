"""ansible_ssh_common_args and friends read as ssh reads its command line: every option the issue
names, ssh's first-value-wins, flags, and a warning (variable, option, file:line) for anything
clusterctl does not act on. Whatever the text, the reader returns options or one InventoryError
(property test), and what it returns is a valid `ssh -o` for ssh itself (checked with `ssh -G`)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from clusterctl_helpers import examples
from hypothesis import strategies as st

from clusterctl.errors import InventoryError
from clusterctl.inventory.ansible_ssh_args import parse_ssh_args


@pytest.mark.parametrize("text, options", [
    ('-o ProxyCommand="ssh -W %h:%p -q ubuntu@10.0.0.1"', {"ProxyCommand": "ssh -W %h:%p -q ubuntu@10.0.0.1"}),
    ("-J ops@bastion:2200", {"ProxyJump": "ops@bastion:2200"}),
    ("-o ProxyJump=ops@bastion", {"ProxyJump": "ops@bastion"}),
    ("-p 2222 -l bob -i ~/.ssh/k", {"Port": "2222", "User": "bob", "IdentityFile": "~/.ssh/k"}),
    ("-p2222 -lbob", {"Port": "2222", "User": "bob"}),
    ("-o Port=2201 -o User=ann -o IdentityFile=/k", {"Port": "2201", "User": "ann", "IdentityFile": "/k"}),
    ("-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
     {"StrictHostKeyChecking": "no", "UserKnownHostsFile": "/dev/null"}),
    ("-oPort=1 -o 'Port 2'", {"Port": "1"}),  # ssh keeps the first
    ("-o 'ServerAliveInterval = 30'", {"ServerAliveInterval": "30"}),
    ("-C -q -o ControlMaster=auto -o ControlPersist=60s", {"ControlMaster": "auto", "ControlPersist": "60s"}),
])
def test_the_options_ssh_would_take(text, options):
    args = parse_ssh_args(text, "ansible_ssh_common_args", "hosts:3")
    assert args.first_options() == options and args.warnings == []


def test_config_file_and_agent_forwarding_flags():
    args = parse_ssh_args("-F ~/.ssh/cluster_config -A", "ansible_ssh_extra_args", "hosts:3")
    assert (args.config_file, args.forward_agent, args.options) == ("~/.ssh/cluster_config", True, [])


@pytest.mark.parametrize("text, words", [
    ("-o Ciphers=aes128-ctr", ["Ciphers", "does not act on"]),
    ("-L 8080:localhost:80", ["-L 8080:localhost:80", "no meaning"]),
    ("-D 1080", ["-D 1080"]),
    ("-g", ["-g"]),
    ("bastion", ["'bastion' is not an ssh option"]),
    ("-o", ["-o has no value"]),
    ("-o =x", ["not an ssh option"]),
])
def test_what_clusterctl_does_not_use_is_a_warning_naming_variable_option_and_line(text, words):
    args = parse_ssh_args(text, "ansible_ssh_extra_args", "inv/hosts:7")
    assert len(args.warnings) == 1
    warning = args.warnings[0]
    assert warning.startswith("inv/hosts:7: ansible_ssh_extra_args") and all(w in warning for w in words)


def test_an_unclosed_quote_is_one_error_with_the_fix():
    with pytest.raises(InventoryError) as caught:
        parse_ssh_args('-o ProxyCommand="ssh -W %h:%p', "ansible_ssh_common_args", "hosts:9")
    assert caught.value.where == "hosts:9" and "close the quotes" in caught.value.fix


_WORDS = st.sampled_from(["-o", "-p", "-J", "-i", "-l", "-F", "-A", "-C", "-L", "-q", "Port=22", "ProxyJump=j",
                          "ProxyCommand=nc %h %p", "'x y'", '"a"', "=", "-oUser=u", "host", "2222", "-o'Port 2'",
                          "'", '"', "\\", "-", "--", "-46"])


@settings(max_examples=examples(400), deadline=None)
@given(parts=st.lists(st.one_of(_WORDS, st.text(max_size=6)), max_size=8))
def test_any_text_gives_options_or_one_inventory_error(parts):
    try:
        args = parse_ssh_args(" ".join(parts), "ansible_ssh_common_args", "hosts:1")
    except InventoryError:
        return
    for keyword, value in args.options:
        assert keyword[:1].isalpha() and keyword.isalnum() and value != ""
    assert all(w.startswith("hosts:1: ansible_ssh_common_args") for w in args.warnings)
