"""The inventory keys that shape one host's SSH connection beyond user/port/key: further ssh
options (`ssh_options: {ProxyCommand: ..., StrictHostKeyChecking: "no"}`, as `ssh -o`), another
ssh_config (`ssh_config`, as `ssh -F`), agent forwarding, and privilege escalation (`become`,
`become_user`, `become_method: sudo`). Ansible's ansible_ssh_common_args and ansible_become*
arrive here translated (ansible_vars_map.py)."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from clusterctl.inventory.values import Doc, describe, expect_bool, expect_choice, expect_user
from clusterctl.models import SSHSettings

HOST_SSH_KEYS = ("ssh_options", "ssh_config", "forward_agent", "become", "become_user", "become_method")
_KEYWORD = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


def expect_ssh_options(doc: Doc, value: Any, path: tuple) -> tuple[tuple[str, str], ...]:
    """{Keyword: value} of ssh_config keywords -> ((Keyword, "value"), ...), in order."""
    if not isinstance(value, dict):
        doc.fail(path, f"ssh options must be a mapping of ssh_config keyword: value, got {describe(value)}",
                 'write e.g. ssh_options: {ProxyCommand: "ssh -W %h:%p bastion", ServerAliveInterval: 30}')
    options = []
    for keyword, option in value.items():
        if not isinstance(keyword, str) or not _KEYWORD.match(keyword):
            doc.fail(path + (keyword,), f"'{keyword}' is not an ssh_config keyword",
                     "use ssh_config's names (man ssh_config), e.g. ProxyCommand, Port, StrictHostKeyChecking")
        if isinstance(option, bool):
            option = "yes" if option else "no"
        if not isinstance(option, (str, int, float)) or str(option).strip() == "":
            doc.fail(path + (keyword,), f"ssh option {keyword} must be text or a number, got {describe(option)}",
                     f"write {keyword}: VALUE as ssh_config would")
        options.append((keyword, str(option)))
    return tuple(options)


def host_ssh(doc: Doc, entry: dict, path: tuple, ssh: SSHSettings) -> SSHSettings:
    """A host's own ssh_options, ssh_config and forward_agent over the inventory's ssh: section
    (the host's options first: ssh keeps the first value of an option)."""
    options = doc.value(entry, "ssh_options", path, expect_ssh_options, ())
    return replace(ssh, options=options + ssh.options,
                   config_file=doc.value(entry, "ssh_config", path, Doc.local_path, ssh.config_file),
                   forward_agent=doc.value(entry, "forward_agent", path, expect_bool, ssh.forward_agent))


def host_become(doc: Doc, entry: dict, path: tuple) -> dict:
    return {"become": doc.value(entry, "become", path, expect_bool),
            "become_user": doc.value(entry, "become_user", path, expect_user),
            "become_method": doc.value(entry, "become_method", path,
                                       lambda d, v, p: expect_choice(d, v, p, ("sudo",)))}
