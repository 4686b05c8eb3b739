"""ansible_ssh_common_args / ansible_ssh_extra_args / ansible_ssh_args: the ssh options in them,
as ssh options clusterctl hands to its own `ssh -G` (so ProxyCommand %h %p %r, ProxyJump, Port,
User, IdentityFile, StrictHostKeyChecking, UserKnownHostsFile ... mean what they mean to ssh).

Read as Ansible's ssh connection builds the command line: ansible_ssh_args, then common, then
extra args; ssh keeps the first value of an option, and the inventory's own ansible_port,
ansible_user and ansible_ssh_private_key_file come before all of them. An option that makes no
sense here, or that clusterctl does not act on, is a warning naming the variable, the option
and file:line; a malformed value (an unclosed quote) is an error.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Optional

from clusterctl.errors import InventoryError

# ssh options clusterctl acts on (through `ssh -G`, see transport/openssh_config.py)
ACTED_ON = {"hostname", "port", "user", "identityfile", "certificatefile", "identitiesonly", "identityagent",
            "proxyjump", "proxycommand", "userknownhostsfile", "globalknownhostsfile", "hostkeyalias",
            "connecttimeout", "serveraliveinterval", "stricthostkeychecking", "hashknownhosts", "batchmode",
            "forwardagent", "pkcs11provider"}
# understood, and without effect on clusterctl's one connection per host (no warning)
NO_EFFECT = {"controlmaster", "controlpersist", "controlpath", "compression", "serveralivecountmax", "loglevel",
             "connectionattempts", "tcpkeepalive", "requesttty", "preferredauthentications",
             "passwordauthentication", "kbdinteractiveauthentication", "pubkeyauthentication",
             "gssapiauthentication", "gssapidelegatecredentials", "addkeystoagent", "forwardx11",
             "forwardx11trusted", "updatehostkeys", "visualhostkey", "checkhostip", "sendenv", "setenv"}
# ssh's short options with an argument -> the ssh_config keyword they set
_WITH_VALUE = {"-p": "Port", "-l": "User", "-i": "IdentityFile", "-J": "ProxyJump", "-F": None, "-o": None,
               "-c": "Ciphers", "-m": "MACs", "-b": "BindAddress", "-B": "BindInterface", "-E": None, "-S": "ControlPath",
               "-D": None, "-L": None, "-R": None, "-W": None, "-w": None, "-O": None, "-Q": None, "-e": None,
               "-I": "PKCS11Provider"}
_QUIET_FLAGS = set("CqvTtnNxXYys")  # compression, verbosity, tty and X11 flags: no effect here
_KEYWORD = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


@dataclass
class SshArgs:
    options: list = field(default_factory=list)  # (Keyword, value) in order; the first of a keyword wins
    config_file: Optional[str] = None  # -F
    forward_agent: Optional[bool] = None  # -A / -a
    warnings: list = field(default_factory=list)

    def add(self, keyword: str, value: str) -> None:
        if keyword.lower() == "forwardagent":
            if self.forward_agent is None:
                self.forward_agent = value.lower() in ("yes", "true")
            return
        self.options.append((keyword, value))

    def first_options(self) -> dict:
        """{Keyword: value}, the first value of each keyword (ssh's rule), in order."""
        chosen: dict = {}
        seen: set = set()
        for keyword, value in self.options:
            if keyword.lower() not in seen:
                seen.add(keyword.lower())
                chosen[keyword] = value
        return chosen


def parse_ssh_args(text: str, variable: str, where: str, into: Optional[SshArgs] = None) -> SshArgs:
    """The ssh options in one variable's value (`where` is its file:line), added to `into`."""
    args = into or SshArgs()
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InventoryError(f"{variable} cannot be split into ssh arguments: {exc}", where=where,
                             fix="close the quotes, e.g. -o ProxyCommand=\"ssh -W %h:%p -q user@bastion\"") from None
    index = 0
    while index < len(words):
        word, index = words[index], index + 1
        if not word.startswith("-") or word == "-":
            args.warnings.append(f"{where}: {variable}: '{word}' is not an ssh option; ignored")
            continue
        flag, attached = word[:2], word[2:]
        if flag in _WITH_VALUE:
            if not attached and index >= len(words):
                args.warnings.append(f"{where}: {variable}: {flag} has no value; ignored")
                break
            value = attached or words[index]
            index += 0 if attached else 1
            _option(args, flag, value, variable, where)
        else:
            _flags(args, word[1:], variable, where)
    return args


def _option(args: SshArgs, flag: str, value: str, variable: str, where: str) -> None:
    if flag == "-o":
        keyword, value = _split_option(value)
        if not _KEYWORD.match(keyword) or not value:
            args.warnings.append(f"{where}: {variable}: '-o {keyword}' is not an ssh option (-o Keyword=value); ignored")
            return
        _keyword(args, keyword, value, variable, where)
    elif flag == "-F":
        args.config_file = args.config_file or value
    elif _WITH_VALUE[flag] is None:
        args.warnings.append(f"{where}: {variable}: {flag} {value} has no meaning for clusterctl's connections; ignored")
    else:
        _keyword(args, _WITH_VALUE[flag], value, variable, where)


def _keyword(args: SshArgs, keyword: str, value: str, variable: str, where: str) -> None:
    lowered = keyword.lower()
    if lowered not in ACTED_ON and lowered not in NO_EFFECT:
        args.warnings.append(f"{where}: {variable}: ssh option {keyword} is passed to ssh's configuration but "
                             "clusterctl does not act on it")
    args.add(keyword, value)


def _split_option(text: str) -> tuple[str, str]:
    """`Key=Value`, `Key Value` or `Key = Value` (as ssh reads -o)."""
    match = re.match(r"^\s*([^\s=]+)\s*(?:=\s*|\s+)(.*)$", text, re.S)
    if not match:
        return text.strip(), ""
    return match.group(1), match.group(2).strip()


def _flags(args: SshArgs, letters: str, variable: str, where: str) -> None:
    for letter in letters:
        if letter == "A":
            args.forward_agent = True if args.forward_agent is None else args.forward_agent
        elif letter == "a":
            args.forward_agent = False if args.forward_agent is None else args.forward_agent
        elif letter in "46":
            _keyword(args, "AddressFamily", "inet" if letter == "4" else "inet6", variable, where)
        elif letter == "K":
            args.add("GSSAPIDelegateCredentials", "yes")
        elif letter == "k":
            args.add("GSSAPIDelegateCredentials", "no")
        elif letter not in _QUIET_FLAGS:
            args.warnings.append(f"{where}: {variable}: ssh flag -{letter} has no meaning for clusterctl's "
                                 "connections; ignored")
