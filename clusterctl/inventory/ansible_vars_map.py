"""Which Ansible variable means what to clusterctl, and one host's merged variables translated
into clusterctl host data (with the file:line of each value recorded)."""
from __future__ import annotations

import difflib
from typing import Any

from clusterctl.inventory.ansible_ssh_args import SshArgs, parse_ssh_args
from clusterctl.inventory.ansible_tree import AnsibleTree, FileLocator, Var
from clusterctl.inventory.formats import fail
from clusterctl.inventory.values import did_you_mean

# Ansible variable -> clusterctl host key. Legacy spellings first: modern ones win.
LEGACY_VARS = {"ansible_ssh_host": "address", "ansible_ssh_port": "port", "ansible_ssh_user": "user",
               "ansible_private_key_file": "identity_file"}
MODERN_VARS = {"ansible_host": "address", "ansible_port": "port", "ansible_user": "user",
               "ansible_ssh_private_key_file": "identity_file", "ansible_connection": "connection",
               "ansible_become": "become", "ansible_become_user": "become_user",
               "ansible_become_method": "become_method"}
# clusterctl's own host keys, usable as plain host or group variables
CLUSTERCTL_VARS = {"gpus": "gpus", "nic": "nic", "slots": "slots",
                   "clusterctl_gpus": "gpus", "clusterctl_nic": "nic", "clusterctl_slots": "slots"}
# ssh's command line, in the order Ansible's ssh connection builds it (the first value of an option wins)
SSH_ARGS_VARS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")
HOST_KEY_CHECKING_VARS = ("ansible_host_key_checking", "ansible_ssh_host_key_checking")
TIMEOUT_VARS = ("ansible_timeout", "ansible_ssh_timeout")
# read, and not used: said once per variable and file:line
UNUSED_VARS = {
    "ansible_become_pass": "clusterctl escalates with `sudo -n` (no password): give the SSH user passwordless sudo",
    "ansible_become_password": "clusterctl escalates with `sudo -n` (no password): give the SSH user passwordless sudo",
    "ansible_become_exe": "clusterctl runs `sudo -n`", "ansible_become_flags": "clusterctl runs `sudo -n`",
    "ansible_sftp_extra_args": "clusterctl copies over its own SSH channels",
    "ansible_scp_extra_args": "clusterctl copies over its own SSH channels",
}
# Ansible variables that mean nothing to clusterctl's connections
IGNORED_VARS = {
    "ansible_python_interpreter", "ansible_shell_type", "ansible_shell_executable", "ansible_ssh_pipelining",
    "ansible_pipelining", "ansible_ssh_executable", "ansible_ssh_retries", "ansible_remote_tmp",
    "ansible_group_priority", "ansible_ssh_transfer_method", "ansible_scp_if_ssh", "ansible_sftp_batch_mode",
    "ansible_ssh_use_tty", "ansible_control_path", "ansible_control_path_dir", "ansible_connection_timeout",
    "ansible_facts", "ansible_distribution", "ansible_os_family", "ansible_architecture", "ansible_system",
    "ansible_kernel", "ansible_distribution_version", "ansible_distribution_major_version",
}
PASSWORD_VARS = {"ansible_password", "ansible_ssh_password", "ansible_ssh_pass"}
KNOWN_ANSIBLE = sorted(set(LEGACY_VARS) | set(MODERN_VARS) | IGNORED_VARS | PASSWORD_VARS | set(UNUSED_VARS) |
                       set(SSH_ARGS_VARS) | set(HOST_KEY_CHECKING_VARS) | set(TIMEOUT_VARS))
# the variables clusterctl reads: a name close to one of these is a typo (an error), not an unknown variable
_READ = sorted(set(LEGACY_VARS) | set(MODERN_VARS) | set(SSH_ARGS_VARS) | PASSWORD_VARS)
CONNECTIONS = {"ssh": "ssh", "paramiko": "ssh", "paramiko_ssh": "ssh", "smart": "ssh", "local": "local",
               "ansible.builtin.ssh": "ssh", "ansible.builtin.paramiko_ssh": "ssh", "ansible.builtin.local": "local"}
_TRUE = {"yes", "true", "1", "on", "y", "t"}
_FALSE = {"no", "false", "0", "off", "n", "f"}


def tree_data(tree: AnsibleTree) -> tuple[dict, FileLocator]:
    """clusterctl inventory data for every host, its Locator, and the warnings of the translation."""
    if not tree.hosts:
        fail(f"{tree.source_name}:1", "the Ansible inventory lists no hosts",
             "add host lines under a [group] section, e.g. `node1 ansible_host=10.0.0.1`")
    locator = FileLocator(tree.source_name)
    locator.record(("hosts",), min(tree.hosts.values(), default=1), label="hosts")
    warnings: list[str] = []
    hosts = []
    for index, name in enumerate(tree.hosts):
        path = ("hosts", index)
        first = Var(name, tree.hosts[name], name, tree.host_sources.get(name))
        locator.record_var(path, first)
        locator.record_var(path + ("name",), first)
        locator.record_var(path + ("address",), first)
        hosts.append(host_data(tree, name, path, locator, warnings))
    return {"hosts": hosts, "warnings": sorted(set(warnings), key=warnings.index)}, locator


def host_data(tree: AnsibleTree, name: str, path: tuple, locator: FileLocator, warnings: list) -> dict:
    """One host's clusterctl data: its merged variables translated, each key's origin recorded."""
    merged = tree.merged(name)
    data: dict[str, Any] = {"name": name, "address": name}
    for table in (LEGACY_VARS, MODERN_VARS, CLUSTERCTL_VARS):
        for var_name, key in table.items():
            if var_name in merged:
                var = merged[var_name]
                data[key] = _translate(tree, key, var)
                locator.record_var(path + (key,), var)
    _ssh_args(tree, merged, data, path, locator, warnings)
    for var_name, var in merged.items():
        _check_var(tree, var_name, var, warnings)
    data["groups"] = sorted(g for g in tree.groups_of(name) if g != "ungrouped")
    return data


def where(tree: AnsibleTree, var: Var) -> str:
    """file:line and the variable, for errors."""
    return tree.where(var.line, var.label, var.source)


def place(tree: AnsibleTree, var: Var) -> str:
    """file:line alone, for warnings that name the variable themselves."""
    return tree.where(var.line, "", var.source)


def _translate(tree: AnsibleTree, key: str, var: Var) -> Any:
    value = var.value
    if isinstance(value, str) and "{{" in value:
        fail(where(tree, var), f"Jinja template {value!r} is not evaluated by clusterctl",
             "write the value literally (or read the inventory with ansible-core: -i ansible:PATH)")
    if key == "connection" and isinstance(value, str):
        return CONNECTIONS.get(value, value)
    if key in ("port", "slots") and isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if key == "become":
        return _boolean(tree, var)
    if key == "gpus":
        return _gpus_from_text(value)
    return value


def _boolean(tree: AnsibleTree, var: Var) -> bool:
    if isinstance(var.value, bool):
        return var.value
    text = str(var.value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    fail(where(tree, var), f"{var.label} must be true or false, got {var.value!r}", f"write {var.label.split()[-1]}=true")


def _ssh_args(tree: AnsibleTree, merged: dict, data: dict, path: tuple, locator: FileLocator, warnings: list) -> None:
    """ansible_ssh_args, host key checking, timeout, common and extra args -> ssh options."""
    args, first = SshArgs(), None
    for var_name in (SSH_ARGS_VARS[0],) + HOST_KEY_CHECKING_VARS + TIMEOUT_VARS + SSH_ARGS_VARS[1:]:
        var = merged.get(var_name)
        if var is None or var.value is None or var.value == "":
            continue
        if isinstance(var.value, str) and "{{" in var.value:
            fail(where(tree, var), f"Jinja template {var.value!r} is not evaluated by clusterctl",
                 "write the value literally (or read the inventory with ansible-core: -i ansible:PATH)")
        first = first or var
        if var_name in HOST_KEY_CHECKING_VARS:
            if not _boolean(tree, var):
                args.add("StrictHostKeyChecking", "no")  # what Ansible passes for host_key_checking=False
        elif var_name in TIMEOUT_VARS:
            args.add("ConnectTimeout", str(var.value))
        else:
            parse_ssh_args(str(var.value), var_name, place(tree, var), into=args)
    warnings.extend(args.warnings)
    if first is None:
        return
    options = args.first_options()
    if options:
        data["ssh_options"] = options
        locator.record_var(path + ("ssh_options",), first)
    if args.config_file:
        data["ssh_config"] = args.config_file
        locator.record_var(path + ("ssh_config",), first)
    if args.forward_agent is not None:
        data["forward_agent"] = args.forward_agent
        locator.record_var(path + ("forward_agent",), first)


def _check_var(tree: AnsibleTree, name: str, var: Var, warnings: list) -> None:
    at = where(tree, var)
    if name in PASSWORD_VARS:
        fail(at, "a password variable: clusterctl connects with SSH keys only, not passwords",
             "remove the password variable; set ansible_ssh_private_key_file (or use ssh-agent)")
    if name in UNUSED_VARS:
        warnings.append(f"{place(tree, var)}: {name} is not used: {UNUSED_VARS[name]}")
    if name == "ansible_become_method" and str(var.value) not in ("sudo", "ansible.builtin.sudo"):
        fail(at, f"ansible_become_method {var.value!r}: clusterctl escalates with sudo only",
             "use ansible_become_method=sudo (clusterctl runs `sudo -n`), or connect as root")
    if name.startswith("ansible_") and name not in KNOWN_ANSIBLE:
        hint = difflib.get_close_matches(name, _READ, n=1, cutoff=0.8)
        if hint:
            fail(at, f"unknown Ansible variable '{name}'{did_you_mean(name, _READ)}",
                 f"rename it to {hint[0]}")
        warnings.append(f"{place(tree, var)}: Ansible variable {name} means nothing to clusterctl; ignored")
    if name not in CLUSTERCTL_VARS and not name.startswith("ansible_"):
        hint = difflib.get_close_matches(name, list(CLUSTERCTL_VARS), n=1, cutoff=0.75)
        if hint:
            fail(at, f"unknown variable '{name}' (did you mean '{hint[0]}'?)",
                 f"rename it to {hint[0]}, or to a name clusterctl does not read")


def _gpus_from_text(value: Any) -> Any:
    """INI gives text: "all", "none", "4", "0,1,2" or "[0, 1]" -> the YAML value."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.isdigit():
        return int(text)
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    parts = [p.strip() for p in inner.split(",")]
    if inner and all(p.isdigit() for p in parts):
        return [int(p) for p in parts]
    return text
