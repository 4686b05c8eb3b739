"""Where and how to connect to a host, as the user's own OpenSSH would: one answer for the whole
transport.

Where an `ssh` client is installed the answer is `ssh -G` itself (the inventory's user, port,
key and jump host passed as `-l -p -i -J`, its options as `-o`, so they win over ssh_config and
`Match user` sees them, as on ssh's command line); without one, ssh_config_file.py reads the
files the same way. Each distinct query is answered once per process, and `ssh -G` answers are
kept on disk (ssh_g_cache.py) while no file ssh would read has changed: an `ssh -G` costs ~7 ms
of CPU, a quarter of a new connection's, which a 240-node fan-out would feel.
"""
from __future__ import annotations

import functools
import hashlib
import os
import pwd
import shutil
import socket
import subprocess
import threading
from dataclasses import dataclass, replace
from typing import Optional

from clusterctl.errors import ClusterctlError, UnreachableError
from clusterctl.transport import ssh_g_cache
from clusterctl.transport.ssh_config_file import expand_tokens, read_ssh_config

_MAX_HOPS = 8
# The keywords of `ssh -G` that clusterctl acts on (the rest is neither kept nor compared).
WANTED = ("host", "hostname", "port", "user", "identityfile", "certificatefile", "identitiesonly", "identityagent",
          "proxyjump", "proxycommand", "userknownhostsfile", "globalknownhostsfile", "hostkeyalias", "connecttimeout",
          "serveraliveinterval", "stricthostkeychecking", "hashknownhosts", "batchmode", "pkcs11provider",
          "gssapiauthentication", "knownhostscommand", "revokedhostkeys")


@dataclass(frozen=True)
class Query:
    """What the inventory says about one host; None leaves the choice to ssh_config."""

    name: str
    user: Optional[str] = None
    port: Optional[int] = None
    identity_file: Optional[str] = None
    proxy_jump: Optional[str] = None
    config_file: Optional[str] = None  # ssh -F; else ~/.ssh/config then /etc/ssh/ssh_config
    options: tuple[tuple[str, str], ...] = ()  # ssh -o Key=Value

    def argv(self, ssh: str) -> list[str]:
        argv = [ssh, "-G"]
        for flag, value in (("-F", self.config_file), ("-l", self.user), ("-p", self.port),
                            ("-i", self.identity_file), ("-J", self.proxy_jump)):
            if value is not None:
                argv += [flag, str(value)]
        for key, value in self.options:
            argv += ["-o", f"{key}={value}"]
        return argv + ["--", self.name]


@dataclass(frozen=True)
class SSHTarget:
    """One hop's resolved settings, every path and token expanded."""

    name: str  # as asked (the inventory address, or the jump host as written)
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...] = ()
    certificate_files: tuple[str, ...] = ()
    identities_only: bool = False
    identity_agent: Optional[str] = None  # a socket path; None: $SSH_AUTH_SOCK; "none": no agent
    jump: Optional["SSHTarget"] = None  # reached through this host (ProxyJump)
    proxy_command: Optional[str] = None  # or through this command's stdin/stdout
    user_known_hosts: tuple[str, ...] = ()
    global_known_hosts: tuple[str, ...] = ()
    host_key_alias: Optional[str] = None
    connect_timeout: Optional[float] = None
    server_alive_interval: int = 0
    strict_host_key_checking: str = "ask"  # yes | no | ask | accept-new
    hash_known_hosts: bool = False
    batch_mode: bool = False
    pkcs11_provider: Optional[str] = None
    gssapi: bool = False
    known_hosts_command: Optional[str] = None
    revoked_host_keys: Optional[str] = None
    source: str = "ssh -G"  # or "ssh_config reader"

    @property
    def known_hosts_name(self) -> str:
        """The name known_hosts files list this host under: HostKeyAlias, else host or [host]:port."""
        if self.host_key_alias:
            return self.host_key_alias
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    @property
    def hops(self) -> tuple["SSHTarget", ...]:
        """The jump hosts, first hop first."""
        return (self.jump.hops + (self.jump,)) if self.jump else ()


_answers: dict = {}
_answers_lock = threading.Lock()


def resolve(query: Query, use_ssh: Optional[bool] = None) -> SSHTarget:
    """The target for `query`, its jump hosts resolved too. Raises UnreachableError when ssh
    refuses the configuration (the message is ssh's own) or a jump chain loops."""
    return _resolve(query, use_ssh, depth=0)


def _resolve(query: Query, use_ssh: Optional[bool], depth: int) -> SSHTarget:
    options, source = _options(query, use_ssh)
    try:
        target = _target(query, options, source)
    except ClusterctlError as exc:  # an unknown %-token in a path or ProxyCommand
        raise UnreachableError(exc.what, where=exc.where, fix=exc.fix) from None
    spec = options.get("proxyjump", [None])[0]
    if spec and spec.lower() != "none":
        extra, _, last = spec.rpartition(",")
        user, host, port = split_hop(last)
        if host.lower() == target.hostname and (port or 22) == target.port and (user or target.user) == target.user:
            raise UnreachableError(f"jumphost loop via {host}: ssh_config makes {query.name} its own ProxyJump",
                                   fix=f"exclude the jump host from the block that sets ProxyJump (Host * !{host})")
        if depth >= _MAX_HOPS:
            raise UnreachableError(f"ProxyJump chain for {query.name} is longer than {_MAX_HOPS} hops (a loop?)",
                                   fix="check the ProxyJump lines of ssh_config (ssh -G HOST shows them)")
        hop = Query(host, user, port, proxy_jump=extra or None, config_file=query.config_file)
        target = replace(target, jump=_resolve(hop, use_ssh, depth + 1), proxy_command=None)
    return target


def _options(query: Query, use_ssh: Optional[bool]) -> tuple[dict, str]:
    ssh = _which_ssh(os.environ.get("PATH")) if use_ssh is not False else None
    if use_ssh and not ssh:
        raise UnreachableError("no ssh client on PATH", fix="install openssh-client")
    key = (query, ssh)
    with _answers_lock:
        if key in _answers:
            return _answers[key]
    answer = (_ssh_g(query, ssh), "ssh -G") if ssh else (_read(query), "ssh_config reader")
    with _answers_lock:
        _answers[key] = answer
    return answer


def _ssh_g(query: Query, ssh: str) -> dict:
    argv = query.argv(ssh)
    files = [(query.config_file, True)] if query.config_file else _default_files()
    cached = ssh_g_cache.lookup(argv, files)
    if cached is not None:
        return cached
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise UnreachableError(f"`ssh -G {query.name}` did not answer in 30 s (a Match exec that hangs?)",
                               fix="check the Match exec lines of ssh_config") from None
    if proc.returncode != 0:
        message = " ".join(line for line in proc.stderr.splitlines() if "Pseudo-terminal" not in line).strip()
        raise UnreachableError(f"ssh refuses the configuration for {query.name}: {message or 'exit ' + str(proc.returncode)}",
                               fix=f"fix the line ssh names (`{' '.join(argv)}` shows the same error)")
    options = {key: values for key, values in parse_ssh_g(proc.stdout).items() if key in WANTED}
    ssh_g_cache.store(argv, files, options)
    return options


def parse_ssh_g(text: str) -> dict[str, list[str]]:
    """`ssh -G` output -> {keyword: [values]}: repeated keywords accumulate, the known_hosts
    file lists are split into their files."""
    options: dict[str, list[str]] = {}
    for line in text.splitlines():
        keyword, _, value = line.partition(" ")
        if not keyword:
            continue
        keyword = keyword.lower()
        if keyword in ("userknownhostsfile", "globalknownhostsfile"):
            options[keyword] = value.split()
        else:
            options.setdefault(keyword, []).append(value)
    return options


def _default_files() -> list[tuple[str, bool]]:
    return [(os.path.join(_home(), ".ssh", "config"), True), ("/etc/ssh/ssh_config", False)]


def _read(query: Query) -> dict:
    cmdline = list(query.options)
    identity = query.identity_file if query.identity_file and os.path.exists(query.identity_file) else None
    for keyword, value in (("User", query.user), ("Port", query.port), ("IdentityFile", identity),
                           ("ProxyJump", query.proxy_jump)):
        if value is not None:  # as ssh's -l -p -i -J (ssh drops an -i file that does not exist)
            cmdline.insert(0, (keyword, str(value)))
    files = [(query.config_file, True)] if query.config_file else _default_files()
    try:
        options = read_ssh_config(query.name, files, cmdline, _local_user(), _home())
        return {key: values for key, values in options.items() if key in WANTED}
    except ClusterctlError as exc:
        raise UnreachableError(exc.what, where=exc.where, fix=exc.fix) from None


@functools.lru_cache(maxsize=None)
def _account(uid: int) -> tuple[str, str]:
    entry = pwd.getpwuid(uid)
    return entry.pw_name, entry.pw_dir


def _local_user() -> str:
    return _account(os.getuid())[0]


def _home() -> str:
    return _account(os.getuid())[1]  # ssh expands ~ from the password database, not $HOME


@functools.lru_cache(maxsize=None)
def _which_ssh(path: Optional[str]) -> Optional[str]:
    return shutil.which("ssh", path=path)


@functools.lru_cache(maxsize=None)
def _local_hostname() -> str:
    return socket.gethostname()


def _target(query: Query, options: dict, source: str) -> SSHTarget:
    def one(keyword: str, default: Optional[str] = None) -> Optional[str]:
        values = options.get(keyword)
        return values[0] if values else default

    def flag(keyword: str) -> bool:
        return (one(keyword) or "no").lower() in ("yes", "true")

    hostname, port, user = one("hostname", query.name), int(one("port", "22")), one("user") or _local_user()
    alias = one("hostkeyalias")
    tokens = _tokens(query.name, hostname, port, user, alias)
    where = f"ssh_config for {query.name}"

    def paths(keyword: str) -> tuple[str, ...]:
        return tuple(expand_path(p, tokens, where) for p in options.get(keyword, []) if p.lower() != "none")

    agent = one("identityagent")
    proxy = one("proxycommand")
    proxy_tokens = {k: tokens[k] for k in "hknpr"}
    return SSHTarget(
        name=query.name, hostname=hostname, port=port, user=user,
        identity_files=paths("identityfile"), certificate_files=paths("certificatefile"),
        identities_only=flag("identitiesonly"),
        identity_agent=agent if agent in (None, "none", "SSH_AUTH_SOCK") else expand_path(agent, tokens, where),
        proxy_command=expand_tokens(proxy, proxy_tokens, where) if proxy and proxy.lower() != "none" else None,
        user_known_hosts=paths("userknownhostsfile"), global_known_hosts=paths("globalknownhostsfile"),
        host_key_alias=alias, connect_timeout=_seconds(one("connecttimeout")),
        server_alive_interval=int(_seconds(one("serveraliveinterval")) or 0),
        strict_host_key_checking=_strictness(one("stricthostkeychecking", "ask")),
        hash_known_hosts=flag("hashknownhosts"), batch_mode=flag("batchmode"),
        pkcs11_provider=_unless_none(one("pkcs11provider")), gssapi=flag("gssapiauthentication"),
        known_hosts_command=_unless_none(one("knownhostscommand")),
        revoked_host_keys=_unless_none(one("revokedhostkeys")), source=source,
    )


def _tokens(name: str, hostname: str, port: int, user: str, alias: Optional[str]) -> dict[str, str]:
    """OpenSSH's DEFAULT_CLIENT_PERCENT_EXPAND_ARGS."""
    local = _local_hostname()
    return {"C": hashlib.sha1(f"{local}{hostname}{port}{user}".encode()).hexdigest(), "L": local.split(".")[0],
            "i": str(os.getuid()), "k": alias or name, "l": local, "n": name, "p": str(port), "d": _home(),
            "h": hostname, "r": user, "u": _local_user()}


def expand_path(path: str, tokens: dict[str, str], where: str) -> str:
    """~ from the password database, %-tokens, then ${VAR} from the environment (ssh's order)."""
    if path.startswith("~/") or path == "~":
        path = _home() + path[1:]
    path = expand_tokens(path, tokens, where)
    while "${" in path:
        start = path.index("${")
        end = path.find("}", start)
        name = path[start + 2:end] if end > 0 else ""
        if not name or name not in os.environ:
            raise UnreachableError(f"{where}: '{path}' names environment variable {name or '?'} which is not set",
                                   fix=f"set {name} or change the path in ssh_config")
        path = path[:start] + os.environ[name] + path[end + 1:]
    return path


def _seconds(value: Optional[str]) -> Optional[float]:
    if value is None or value.lower() == "none":
        return None
    try:
        return float(value)
    except ValueError:
        return _convtime(value)


def _convtime(text: str) -> Optional[float]:
    """OpenSSH's time format: 90, 1m30s, 2h."""
    units, total, number = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}, 0, ""
    for char in text.lower():
        if char.isdigit():
            number += char
        elif char in units and number:
            total, number = total + int(number) * units[char], ""
        else:
            return None
    return float(total + int(number or 0))


def _strictness(value: str) -> str:
    value = value.lower()
    return {"true": "yes", "yes": "yes", "false": "no", "no": "no", "off": "no"}.get(value, value)


def _unless_none(value: Optional[str]) -> Optional[str]:
    return None if value is None or value.lower() == "none" else value


def split_hop(hop: str) -> tuple[Optional[str], str, Optional[int]]:
    """ProxyJump's [user@]host[:port], with [v6]:port and ssh://user@host:port."""
    if hop.startswith("ssh://"):
        hop = hop[len("ssh://"):].rstrip("/")
    user, _, rest = hop.rpartition("@")
    port = None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else None
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    else:
        host = rest
    return user or None, host, int(port) if port else None
