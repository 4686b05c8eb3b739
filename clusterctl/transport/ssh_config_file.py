"""ssh_config read as OpenSSH's own client reads it (readconf.c), for machines with no `ssh`
binary to ask (`ssh -G` is the first choice: openssh_config.py).

OpenSSH's rules kept: the first value obtained for an option wins (IdentityFile and
CertificateFile accumulate); `Host` patterns with `*`, `?` and `!`, matched against the name as
typed; `Match host/originalhost/user/localuser/exec/all/final/canonical`, evaluated where it
stands with what is known so far; `Include` (globs; relative paths in ~/.ssh or /etc/ssh; an
Include inside a block that does not apply reads the file without applying it); quoted values;
`Key=Value`; `-o` options before every file; a second pass when a `Match final` asks for it.
Not done: hostname canonicalisation (CanonicalizeHostname needs DNS; the second pass runs
without it). The result has the shape of `ssh -G`'s output: {keyword: [values]}.
"""
from __future__ import annotations

import glob
import ipaddress
import os
import subprocess
from dataclasses import dataclass, field

from clusterctl.errors import UsageError

# Options whose whole remaining line is the value (a command line, kept as written).
_RAW = {"proxycommand", "knownhostscommand", "localcommand", "remotecommand"}
# Options that accumulate, one value per line.
_ACCUMULATE = {"identityfile", "certificatefile", "sendenv", "setenv"}
# Options with several values on their one line (the first such line wins).
_ARRAYS = {"userknownhostsfile", "globalknownhostsfile"}
_DEFAULT_IDENTITIES = ("id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk", "id_xmss", "id_dsa")
_MAX_DEPTH = 16


def match_pattern(text: str, pattern: str) -> bool:
    """OpenSSH's match_pattern: `*` any run, `?` one character, everything else literal."""
    if not pattern:
        return not text
    if pattern[0] == "*":
        rest = pattern.lstrip("*")
        return not rest or any(match_pattern(text[i:], rest) for i in range(len(text) + 1))
    if not text or (pattern[0] != "?" and pattern[0] != text[0]):
        return False
    return match_pattern(text[1:], pattern[1:])


def match_pattern_list(text: str, patterns: str, lower: bool = False) -> int:
    """1 for a positive match, -1 when a negated pattern matches (it wins), 0 for none."""
    positive = 0
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        if match_pattern(text, pattern.lower() if lower else pattern):
            if negated:
                return -1
            positive = 1
    return positive


def match_hostname(host: str, patterns: str) -> int:
    return match_pattern_list(host.lower(), patterns, lower=True)


def split_args(text: str, where: str) -> list[str]:
    """OpenSSH's argv_split: whitespace separates, quotes group, `\\` escapes quotes, `#` ends."""
    args, i = [], 0
    while i < len(text):
        if text[i] in " \t":
            i += 1
            continue
        if text[i] == "#":
            break
        arg, quote = [], ""
        while i < len(text):
            char = text[i]
            if char == "\\" and i + 1 < len(text) and (text[i + 1] in "'\"\\" or (not quote and text[i + 1] == " ")):
                arg.append(text[i + 1])
                i += 2
                continue
            if not quote and char in " \t":
                break
            if not quote and char in "'\"":
                quote = char
            elif quote and char == quote:
                quote = ""
            else:
                arg.append(char)
            i += 1
        if quote:
            raise UsageError(f"unterminated quote in ssh_config line: {text.strip()}", where=where,
                             fix="close the quote (ssh itself refuses this line too)")
        args.append("".join(arg))
    return args


def split_keyword(line: str) -> tuple[str, str]:
    """(keyword, the rest): `Key Value`, `Key=Value` and `Key = Value` alike (one `=` is skipped)."""
    line = line.strip()
    end = 0
    while end < len(line) and line[end] not in " \t=\"":
        end += 1
    keyword, rest = line[:end], line[end:].lstrip(" \t")
    if rest.startswith("="):
        rest = rest[1:].lstrip(" \t")
    return keyword.lower(), rest


@dataclass
class _Reading:
    host_arg: str
    local_user: str
    home: str
    options: dict = field(default_factory=dict)
    seen: set = field(default_factory=set)
    want_final: bool = False
    final: bool = False
    host: str = ""  # what Host lines match: the name as typed, or the hostname in the final pass

    def is_set(self, keyword: str) -> bool:
        return keyword in self.options

    def set_first(self, keyword: str, value: list[str]) -> None:
        self.options.setdefault(keyword, value)


def read_ssh_config(host_arg: str, files: list[tuple[str, bool]], cmdline: list[tuple[str, str]],
                    local_user: str, home: str) -> dict[str, list[str]]:
    """{keyword: [values]} for `host_arg`, like `ssh -G`: `files` as (path, is_user_config) in
    order, `cmdline` the `-o Key=Value` options (and -l/-p/-i/-J as User/Port/IdentityFile/ProxyJump)."""
    reading = _Reading(host_arg, local_user, home, host=host_arg)
    for keyword, value in cmdline:
        _apply(reading, keyword.lower(), value, active=True, where="command line", origin="command line")
    for path, user_config in files:
        _read_file(reading, path, user_config, active=True, never_match=False, depth=0)
    hostname = _hostname(reading)
    if reading.want_final or _value(reading, "canonicalizehostname", "no") not in ("no", "false"):
        reading.final, reading.host = True, hostname
        reading.options["hostname"] = [hostname]
        for path, user_config in files:
            _read_file(reading, path, user_config, active=True, never_match=False, depth=0)
    return _with_defaults(reading, hostname)


def _value(reading: _Reading, keyword: str, default: str) -> str:
    values = reading.options.get(keyword)
    return values[0].lower() if values else default


def _hostname(reading: _Reading) -> str:
    """HostName with %h (and %%) expanded; lowercased unless it is an address, as ssh does."""
    name = reading.host_arg
    if "hostname" in reading.options:
        name = reading.options["hostname"][0].replace("%%", "\0").replace("%h", reading.host_arg).replace("\0", "%")
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        return name.lower()


def _read_file(reading: _Reading, path: str, user_config: bool, active: bool, never_match: bool, depth: int) -> None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"cannot read ssh_config {path}: {exc.strerror}", where=path,
                         fix="make the file readable or remove the Include that names it") from None
    for number, line in enumerate(lines, 1):
        keyword, rest = split_keyword(line)
        if not keyword or keyword.startswith("#"):
            continue
        where = f"{path}:{number}"
        if keyword == "host":
            active = not never_match and _host_line(reading, split_args(rest, where))
        elif keyword == "match":
            active = not never_match and _match_line(reading, split_args(rest, where), where)
        elif keyword == "include":
            for pattern in split_args(rest, where):
                _include(reading, pattern, user_config, active, depth, where)
        else:
            _apply(reading, keyword, rest, active, where, origin="user" if user_config else "system")


def _include(reading: _Reading, pattern: str, user_config: bool, active: bool, depth: int, where: str) -> None:
    if depth >= _MAX_DEPTH:
        raise UsageError(f"ssh_config Include nested more than {_MAX_DEPTH} deep", where=where,
                         fix="remove the Include loop")
    if pattern.startswith("~"):
        pattern = reading.home + pattern[1:]
    elif not pattern.startswith("/"):
        pattern = os.path.join(reading.home, ".ssh", pattern) if user_config else os.path.join("/etc/ssh", pattern)
    for path in sorted(glob.glob(pattern)):
        _read_file(reading, path, user_config, active, never_match=not active, depth=depth + 1)


def _host_line(reading: _Reading, patterns: list[str]) -> bool:
    matched = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if match_pattern(reading.host, pattern[1:] if negated else pattern):
            if negated:
                return False
            matched = True
    return matched


def _match_line(reading: _Reading, words: list[str], where: str) -> bool:
    """Match criteria, evaluated with the options known at this line (as ssh does)."""
    if not words:
        raise UsageError("Match with no criteria", where=where, fix="write e.g. Match host gpu* user ops")
    result, index = True, 0
    host = reading.host if reading.final else _hostname(reading)
    user = reading.options.get("user", [reading.local_user])[0]
    while index < len(words):
        word = words[index]
        negate = word.startswith("!")
        criterion = word[1:].lower() if negate else word.lower()
        index += 1
        if criterion == "all":
            if len(words) > 1:
                raise UsageError("'Match all' cannot be combined with other criteria", where=where,
                                 fix="write Match all alone")
            return not negate
        if criterion in ("canonical", "final"):
            reading.want_final = reading.want_final or criterion == "final"
            hit = reading.final
        else:
            if index >= len(words):
                raise UsageError(f"Match {criterion} has no argument", where=where, fix=f"write Match {criterion} PATTERN")
            argument = words[index]
            index += 1
            hit = _criterion(reading, criterion, argument, host, user, result, where)
        if hit == negate:
            result = False
    return result


def _criterion(reading: _Reading, criterion: str, argument: str, host: str, user: str, so_far: bool,
               where: str) -> bool:
    if criterion == "host":
        return match_hostname(host, argument) == 1
    if criterion == "originalhost":
        return match_hostname(reading.host_arg, argument) == 1
    if criterion == "user":
        return match_pattern_list(user, argument) == 1
    if criterion == "localuser":
        return match_pattern_list(reading.local_user, argument) == 1
    if criterion == "exec":
        if not so_far:
            return False  # ssh skips the command once an earlier criterion failed
        import socket

        local = socket.gethostname()
        alias = reading.options.get("hostkeyalias", [host])[0]
        tokens = {"h": host, "n": reading.host_arg, "p": reading.options.get("port", ["22"])[0], "r": user,
                  "u": reading.local_user, "d": reading.home, "l": local, "L": local.split(".")[0],
                  "i": str(os.getuid()), "k": alias}
        command = expand_tokens(argument, tokens, where)
        return subprocess.run(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0
    raise UsageError(f"unsupported Match criterion '{criterion}'", where=where,
                     fix="use host, originalhost, user, localuser, exec, all, canonical or final")


def _apply(reading: _Reading, keyword: str, rest: str, active: bool, where: str, origin: str) -> None:
    if keyword in _RAW:
        value = [rest]
    elif keyword == "proxyjump":
        value = [rest.split("#", 1)[0].rstrip()]
    else:
        value = split_args(rest, where)
    if not active or not value:
        return
    if keyword in _ACCUMULATE:
        if (keyword, value[0], origin) not in reading.seen:  # ssh skips a file named twice from one origin
            reading.seen.add((keyword, value[0], origin))
            reading.options.setdefault(keyword, []).append(value[0])
    elif keyword == "proxycommand":  # ssh 9.2: a ProxyJump other than `none` set before wins over it
        if reading.options.get("proxyjump", ["none"])[0].lower() == "none":
            reading.set_first("proxycommand", value)
    elif keyword == "proxyjump":
        if not reading.is_set("proxyjump") and not reading.is_set("proxycommand"):
            reading.options["proxyjump"] = value
            if value[0].lower() != "none":
                reading.options["proxycommand"] = ["none"]
    elif keyword in _ARRAYS:
        reading.set_first(keyword, value)
    else:
        reading.set_first(keyword, value[:1])


def _with_defaults(reading: _Reading, hostname: str) -> dict[str, list[str]]:
    """What ssh -G prints for what was never set."""
    options = dict(reading.options)
    options["host"] = [reading.host_arg]
    options["hostname"] = [hostname]
    options.setdefault("user", [reading.local_user])
    options.setdefault("port", ["22"])
    if not options.get("identityfile"):
        options["identityfile"] = [f"~/.ssh/{name}" for name in _DEFAULT_IDENTITIES]
    options.setdefault("userknownhostsfile", ["~/.ssh/known_hosts", "~/.ssh/known_hosts2"])
    options.setdefault("globalknownhostsfile", ["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"])
    if "hostkeyalias" in options:
        options["hostkeyalias"] = [options["hostkeyalias"][0].lower()]
    if options.get("proxyjump", [""])[0].lower() == "none":
        del options["proxyjump"]
    return options


def expand_tokens(text: str, tokens: dict[str, str], where: str) -> str:
    """OpenSSH's percent_expand: `%x` from `tokens`, `%%` a percent sign; any other `%x` is an error."""
    if "%" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        if text[i] != "%":
            out.append(text[i])
            i += 1
            continue
        token = text[i + 1:i + 2]
        if token == "%":
            out.append("%")
        elif token in tokens:
            out.append(tokens[token])
        else:
            raise UsageError(f"unknown token %{token} in '{text}'", where=where,
                             fix=f"use one of {' '.join('%' + t for t in sorted(tokens))} (or %% for a percent sign)")
        i += 2
    return "".join(out)
