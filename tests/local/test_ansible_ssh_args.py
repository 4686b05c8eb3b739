"""ansible_ssh_common_args and friends read as ssh reads its command line: every option the issue
names, ssh's first-value-wins, flags, and a warning (variable, option, file:line) for anything
clusterctl does not act on. Whatever the text, the reader returns options or one InventoryError
(property test), and what it returns is a valid `ssh -o` for ssh itself (checked with `ssh -G`)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from clusterctl.errors import InventoryError
from clusterctl.inventory.ansible_ssh_args import parse_ssh_args


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs an OpenSSH client")
def test_what_it_hands_to_ssh_is_what_ssh_accepts():
    args = parse_ssh_args('-J ops@bastion:2200 -p 2201 -l bob -o ProxyCommand="ssh -W %h:%p gw" '
                          "-o StrictHostKeyChecking=accept-new -o ConnectTimeout=7 -o ControlPersist=60s",
                          "ansible_ssh_common_args", "hosts:1")
    argv = ["ssh", "-G", "-F", "/dev/null"] + [a for k, v in args.first_options().items() for a in ("-o", f"{k}={v}")]
    printed = subprocess.run(argv + ["node"], capture_output=True, text=True, check=True).stdout
    assert "port 2201" in printed and "user bob" in printed and "proxyjump ops@bastion:2200" in printed
    assert "stricthostkeychecking accept-new" in printed and "connecttimeout 7" in printed
