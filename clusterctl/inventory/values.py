"""How one inventory value is read and checked.

`Doc` is the inventory being validated: it knows the `file:line` of every key and raises
`InventoryError`s that say what is wrong, where and how to fix it (with a hint for keys that
are misspelt, written in another tool's words, or put in the wrong section). Each `expect_*`
reads one kind of value (a port, a size, an address, environment variables, ...).
"""
from __future__ import annotations

import difflib

import os
import posixpath
import re
import string
from pathlib import Path
from typing import Any, NoReturn, Optional, Union

from clusterctl.errors import InventoryError
from clusterctl.models import MASK, EnvVar
from clusterctl.inventory.yamlsource import Locator

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HOST_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
PLACEHOLDERS = ("prompt", "world_size", "nnodes", "nproc_per_node", "run_id", "outputs", "attempt", "checkpoint")
SYSTEM_DIRS = ("/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/sys", "/dev", "/boot", "/root",
               "/var")
SYSTEM_TREES = ("/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/boot", "/lib", "/lib64")

# keys written in the wrong section -> the section they belong to
_HOME = {"user": "ssh", "identity_file": "ssh", "known_hosts": "ssh", "host_key_policy": "ssh", "proxy_jump": "ssh",
         "image": "container", "shm_size": "container", "volumes": "container", "ipc": "container",
         "pull": "container", "nproc_per_node": "job", "args": "job", "outputs": "job", "workdir": "job",
         "world_size_divides": "job", "ib": "checks", "shm_min": "checks", "disk_min": "checks",
         "master": "rendezvous", "join_timeout": "rendezvous", "address": "hosts", "partition": "scheduler",
         "account": "scheduler", "gpus_per_node": "scheduler", "extra_args": "scheduler"}
# other tools' words -> ours
_ALIASES = {"ip": "address", "host": "address", "hostname": "address", "ansible_host": "address",
            "ssh_port": "port", "ansible_port": "port", "username": "user", "ansible_user": "user",
            "key": "identity_file", "key_file": "identity_file", "private_key": "identity_file",
            "ssh_key": "identity_file", "gpu": "gpus", "interface": "nic", "iface": "nic", "ifname": "nic",
            "nproc": "nproc_per_node", "cmd": "command", "argv": "args", "output": "outputs",
            "output_dir": "outputs", "shm": "shm_size", "environment": "env", "group": "groups"}
_INSECURE_POLICIES = {"off", "no", "false", "auto-add", "autoadd", "auto_add", "ignore", "accept", "insecure",
                      "none", "warn", "yes", "true", "on"}


class Doc:
    """One inventory being validated: its Locator, its directory, and error helpers."""

    def __init__(self, locator: Locator, base_dir: Path):
        self.locator = locator
        self.base_dir = base_dir

    def where(self, path: tuple) -> str:
        label = self.locator.label(path)
        return f"{self.locator.where(path)} {label}" if label else self.locator.where(path)

    def fail(self, path: tuple, what: str, fix: str) -> NoReturn:
        raise InventoryError(what, where=self.where(path), fix=fix)

    def name_of(self, path: tuple) -> str:
        return self.locator.label(path) or "the inventory"

    def mapping(self, value: Any, path: tuple, allowed: tuple) -> dict:
        """`value` as a mapping with only `allowed` keys (None -> {})."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"{self.name_of(path)} must be a mapping, got {describe(value)}",
                      f"write it as `key: value` lines; allowed keys: {', '.join(allowed)}")
        for key in value:
            if key not in allowed:
                self.unknown_key(key, path, allowed)
        return value

    def unknown_key(self, key: Any, path: tuple, allowed: tuple) -> NoReturn:
        where_in = f" in {self.name_of(path)}" if path else ""
        alias = _ALIASES.get(str(key))
        if alias in allowed:
            self.fail(path + (key,), f"unknown key '{key}'{where_in} (did you mean '{alias}'?)",
                      f"rename '{key}' to '{alias}'")
        hint = did_you_mean(key, allowed)
        home = _HOME.get(str(key))
        if not hint and home and (path[-1:] != (home,)):
            self.fail(path + (key,), f"unknown key '{key}'{where_in}: it belongs under {home}:",
                      f"move '{key}' into the {home}: section")
        self.fail(path + (key,), f"unknown key '{key}'{where_in}{hint}",
                  f"{'rename it' if hint else 'remove it'}; allowed keys here: {', '.join(allowed)}")

    def value(self, data: dict, key: str, path: tuple, parse, default: Any = None) -> Any:
        """Parse data[key] with `parse(doc, value, path)`; absent or null -> default."""
        if data.get(key) is None:
            return default
        return parse(self, data[key], path + (key,))

    def local_path(self, value: Any, path: tuple) -> str:
        """A path on this machine: `~` expanded, relative to the inventory's directory."""
        text = expect_text(self, value, path)
        expanded = Path(os.path.expanduser(text))
        return os.path.normpath(expanded if expanded.is_absolute() else self.base_dir / expanded)


def describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean; YAML reads yes/no/on/off as booleans)"
    if isinstance(value, (int, float)):
        return f"{value} (a number)"
    if isinstance(value, str):
        return f"'{value}' (text)"
    return "a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict) else type(value).__name__


def _key(path: tuple) -> str:
    return str(path[-1]) if path else "value"


def expect_text(doc: Doc, value: Any, path: tuple) -> str:
    if not isinstance(value, str) or not value.strip():
        doc.fail(path, f"{_key(path)} must be non-empty text, got {describe(value)}",
                 f"write {_key(path)}: followed by the text (quote it if it starts with a digit or symbol)")
    return value


_EXAMPLES = {"port": 22, "slots": 8, "join_timeout": 120, "world_size_divides": 40, "nproc_per_node": 8}


def expect_int(doc: Doc, value: Any, path: tuple, low: int = 1, high: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        example = _EXAMPLES.get(_key(path), max(low, 1))
        if isinstance(value, str) and value.strip().isdigit():
            fix = f"remove the quotes: {_key(path)}: {value.strip()}"
        else:
            fix = f"write a whole number, e.g. {_key(path)}: {example}"
        doc.fail(path, f"{_key(path)} must be a whole number, got {describe(value)}", fix)
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        doc.fail(path, f"{_key(path)} must be {bounds}, got {value}", f"use a value {bounds}")
    return value


def expect_number(doc: Doc, value: Any, path: tuple, low: float = 0.0, strict: bool = True) -> float:
    bad = isinstance(value, bool) or not isinstance(value, (int, float))
    if bad or value < low or (strict and value == low):
        bound = f"greater than {low:g}" if strict else f"at least {low:g}"
        doc.fail(path, f"{_key(path)} must be a number {bound} (seconds), got {describe(value)}",
                 f"write {_key(path)}: 10 (a plain number, no unit)")
    return float(value)


def expect_bool(doc: Doc, value: Any, path: tuple) -> bool:
    if not isinstance(value, bool):
        doc.fail(path, f"{_key(path)} must be true or false, got {describe(value)}", f"write {_key(path)}: true")
    return value


def expect_choice(doc: Doc, value: Any, path: tuple, choices: tuple) -> str:
    if value not in choices or not isinstance(value, str):
        doc.fail(path, f"{_key(path)} must be one of {' | '.join(choices)}, got {describe(value)}"
                 f"{did_you_mean(value, choices) if isinstance(value, str) else ''}",
                 f"write {_key(path)}: {choices[0]}")
    return value


def expect_safe_name(doc: Doc, value: Any, path: tuple) -> str:
    text = value if isinstance(value, str) else None
    if text is None or not HOST_NAME_RE.fullmatch(text):
        doc.fail(path, f"{_key(path)} {describe(value)} is not a safe name: names must match "
                 f"{HOST_NAME_RE.pattern} (letters, digits, . _ -; at most 63; no spaces or shell characters)",
                 "rename it, e.g. node-01; the address: key can still hold any host name or IP")
    return text


def expect_port(doc: Doc, value: Any, path: tuple) -> int:
    if value == 0 and not isinstance(value, bool) and "rendezvous" in path:
        doc.fail(path, "rendezvous port 0 asks each node's launcher for a random free port, so nodes never meet "
                 "(a launcher_args mistake)", "use a fixed free port on the master, e.g. rendezvous: {port: 29500}")
    return expect_int(doc, value, path, 1, 65535)


def expect_gpus(doc: Doc, value: Any, path: tuple) -> Union[str, int, tuple]:
    """all | none | a count | a list of distinct device ids."""
    fix = "write gpus: all, gpus: none, gpus: 4 (a count) or gpus: [0, 1, 2] (device ids)"
    if isinstance(value, str):
        if value in ("all", "none"):
            return value
        if re.fullmatch(r"\s*\d+(\s*,\s*\d+)+\s*", value):
            fix = f"write the ids as a list: gpus: [{', '.join(p.strip() for p in value.split(','))}]"
        doc.fail(path, f"gpus must be all, none, a count or a list of device ids, got {describe(value)}", fix)
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            doc.fail(path, f"gpus: {value} selects no GPU", "write gpus: none to run without GPUs")
        return value
    if isinstance(value, list) and value:
        for index, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                doc.fail(path + (index,), f"GPU id must be a whole number >= 0, got {describe(item)}", fix)
        duplicates = sorted({i for i in value if value.count(i) > 1})
        if duplicates:
            doc.fail(path, f"GPU {duplicates[0]} is listed twice in gpus", "list each device id once")
        return tuple(value)
    doc.fail(path, f"gpus must be all, none, a count or a list of device ids, got {describe(value)}", fix)


def expect_size(doc: Doc, value: Any, path: tuple) -> str:
    """A size with a unit (16g, 512m, 2Gi, 1.5GB); returns the text as written."""
    fix = f"write a size with a unit, e.g. {_key(path)}: 16g (k, m, g, t; binary units, like docker)"
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        doc.fail(path, f"{_key(path)} must be a size like 16g, got {describe(value)}", fix)
    if not isinstance(value, str):
        doc.fail(path, f"{_key(path)}: {value} has no unit, so it would mean {value} bytes", fix)
    try:
        if parse_size(value) <= 0:
            raise ValueError(value)
    except ValueError:
        doc.fail(path, f"{_key(path)} must be a size like 16g, 512m or 2Gi, got {describe(value)}", fix)
    return value.strip()


def expect_remote_dir(doc: Doc, value: Any, path: tuple) -> str:
    text = expect_text(doc, value, path)
    if not text.startswith("/"):
        doc.fail(path, f"{_key(path)} must be an absolute path (on the host or in the container), got '{text}'",
                 f"write the full path, e.g. {_key(path)}: /workspace/output")
    return posixpath.normpath(text).replace("//", "/")


def expect_outputs(doc: Doc, value: Any, path: tuple) -> str:
    text = expect_remote_dir(doc, value, path)
    if text in SYSTEM_DIRS or any(text.startswith(tree + "/") for tree in SYSTEM_TREES):
        doc.fail(path, f"outputs: {text} is a system directory; runs write and clean files there",
                 "use a directory of its own, e.g. outputs: /workspace/output or /data/clusterctl/outputs")
    return text


def expect_text_list(doc: Doc, value: Any, path: tuple) -> tuple[str, ...]:
    """argv-like lists: text items; numbers are kept exactly as written (`010` stays "010")."""
    if isinstance(value, str):
        if value.split() != [value]:
            doc.fail(path, f"{_key(path)} must be a list (argv), got the text '{value}'",
                     f"write {_key(path)}: {list(value.split())} so arguments are never re-split by a shell")
        return (value,)
    if not isinstance(value, list):
        doc.fail(path, f"{_key(path)} must be a list of strings, got {describe(value)}", f"write {_key(path)}: [a, b]")
    items = []
    for index, item in enumerate(value):
        if isinstance(item, dict) and len(item) == 1 and next(iter(item.values())) is None:
            name = next(iter(item))
            doc.fail(path + (index,), f"{{{name}}} without quotes is a YAML mapping, not a placeholder",
                     f'quote it: "{{{name}}}"')
        if isinstance(item, int) and not isinstance(item, bool):
            items.append(doc.locator.raw(path + (index,)) or str(item))
        elif isinstance(item, str):
            items.append(item)
        else:
            doc.fail(path + (index,), f"{_key(path)} items must be text, got {describe(item)}",
                     'quote the item, e.g. "10" or "true"')
    return tuple(items)


def check_placeholders(doc: Doc, items: tuple, path: tuple) -> None:
    valid = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
    for index, item in enumerate(items):
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(item) if f is not None]
        except ValueError as exc:
            doc.fail(path + (index,), f"bad braces in '{item}': {exc}", "write a literal { or } as {{ or }}")
        for name in fields:
            if name not in PLACEHOLDERS:
                doc.fail(path + (index,), f"unknown placeholder {{{name}}}{did_you_mean(name, PLACEHOLDERS)}; "
                         f"valid placeholders: {valid}", f"use one of {valid} (write a literal brace as {{{{ or }}}})")


def expect_env(doc: Doc, value: Any, path: tuple) -> tuple[EnvVar, ...]:
    if isinstance(value, list):
        doc.fail(path, "env must be a mapping NAME: value, not a list", "write env: {NCCL_DEBUG: INFO}")
    entries = doc.mapping(value, path, tuple(value) if isinstance(value, dict) else ())
    return tuple(_env_var(doc, name, raw, path + (name,)) for name, raw in entries.items())


def _env_var(doc: Doc, name: Any, raw: Any, path: tuple) -> EnvVar:
    if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name):
        doc.fail(path, f"'{name}' is not a valid environment variable name",
                 "use letters, digits and _ (e.g. NCCL_DEBUG)")
    secret = False
    if isinstance(raw, dict):
        entry = doc.mapping(raw, path, ("value", "secret"))
        secret = doc.value(entry, "secret", path, expect_bool, False)
        raw, path = entry.get("value"), path + ("value",)
    if not isinstance(raw, str):
        shown = doc.locator.raw(path) or describe(raw)
        doc.fail(path, f"env value of {name} must be text, got {describe(raw)}",
                 f'quote it: {name}: "{shown if raw is not None else ""}"')
    if raw == MASK:
        doc.fail(path, f"env value of {name} is '{MASK}', a masked secret from a printed inventory",
                 "put the real value back (or set it in the environment on the hosts)")
    return EnvVar(name, raw, secret)


def expect_address(doc: Doc, value: Any, path: tuple) -> str:
    text = expect_text(doc, value, path).strip()
    if "@" in text:
        doc.fail(path, f"address '{text}' contains a user", f"write address: {text.split('@')[-1]} and user: "
                 f"{text.split('@')[0]}")
    if re.fullmatch(r"[^:]+:\d+", text):
        host, port = text.split(":")
        doc.fail(path, f"address '{text}' contains a port", f"write address: {host} and port: {port}")
    if text.startswith("-") or not re.fullmatch(r"[A-Za-z0-9._:%-]+", text):
        doc.fail(path, f"address '{text}' is not a host name or IP address",
                 "write a DNS name, an ~/.ssh/config alias or an IP, e.g. address: 10.0.0.5")
    return text


def expect_user(doc: Doc, value: Any, path: tuple) -> str:
    text = expect_text(doc, value, path)
    if text.startswith("-") or not re.fullmatch(r"[A-Za-z0-9._][A-Za-z0-9._@$-]*", text):
        doc.fail(path, f"user '{text}' is not a valid login name", "write the remote login, e.g. user: root")
    return text


def expect_policy(doc: Doc, value: Any, path: tuple) -> str:
    if isinstance(value, bool) or str(value).lower() in _INSECURE_POLICIES:
        doc.fail(path, f"host_key_policy {describe(value)} would accept any host key: clusterctl always verifies "
                 "host keys", "use strict (add keys first: ssh-keyscan -H HOST >> ~/.ssh/known_hosts) or "
                 "accept-new (records keys of new hosts, refuses changed ones)")
    return expect_choice(doc, value, path, ("strict", "accept-new"))


def expect_ib(doc: Doc, value: Any, path: tuple) -> str:
    if value is False:  # YAML 1.1 reads an unquoted `off` as false
        return "off"
    return expect_choice(doc, value, path, ("auto", "required", "off"))


def expect_nproc(doc: Doc, value: Any, path: tuple) -> Union[int, str]:
    if value == "auto":
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return expect_int(doc, value, path, 1)
    doc.fail(path, f"nproc_per_node must be a whole number or auto, got {describe(value)}",
             "write nproc_per_node: auto (one rank per visible GPU) or a number, e.g. 8")


def did_you_mean(word: str, choices) -> str:
    """" (did you mean 'x'?)" for the closest choice, or ""."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


# --------------------------------------------------------------------- sizes

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE)
_UNITS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_size(text: str) -> int:
    """"16g", "512m", "2Gi", "1.5GB", "4096b" -> bytes (binary units, as docker reads them).

    A bare number is refused (ValueError): `shm_size: 16` meaning 16 bytes is never intended.
    """
    match = _SIZE_RE.match(str(text))
    if not match or not (match.group(2) or match.group(4)):
        raise ValueError(f"not a size with a unit: {text!r}")
    number, unit = float(match.group(1)), match.group(2).lower()
    return int(number * (1024 ** _UNITS[unit]))


def format_size(size: int) -> str:
    """Bytes -> the shortest exact size text parse_size reads back (1073741824 -> "1g")."""
    for unit in ("p", "t", "g", "m", "k"):
        scale = 1024 ** _UNITS[unit]
        if size and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}b"
