"""Host-key trust as OpenSSH decides it (hostfile.c, sshconnect.c check_host_key).

Every UserKnownHostsFile and GlobalKnownHostsFile is read (each once per process, again when
it changes). A line applies to a host when its names match: hashed (`|1|salt|hash`), exact,
wildcard (`*`, `?`), a negation (`!name`) vetoing the line, `[host]:port` for other ports. Then,
as ssh: a host certificate is trusted through a matching `@cert-authority` line (and must be
valid for the host: see host_certs.py), else it is judged as its plain key; a plain key is OK
when a line lists it, CHANGED when lines list the host with other keys only, NEW when none does;
`@revoked` lines (the key, or its CA) refuse it whatever else matched. A host on a port other
than 22 that is NEW under `[host]:port` is looked up again without the port.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import threading
from dataclasses import dataclass, replace
from typing import Optional, Sequence

from clusterctl.transport.host_certs import CERT_SUFFIX, HostCertificate, check_host_certificate
from clusterctl.transport.ssh_config_file import match_hostname

_WILDCARDS = set("*?!")


@dataclass(frozen=True)
class KnownHostLine:
    path: str
    line: int
    marker: Optional[str]  # None, "cert-authority" or "revoked"
    names: str  # the host field as written
    key_type: str
    key: bytes  # the public key blob

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class ServerKey:
    """What the server presented: its plain key, and the certificate around it if any."""

    key_type: str
    plain: bytes
    cert: Optional[HostCertificate] = None


@dataclass(frozen=True)
class Verdict:
    status: str  # ok | new | changed | revoked
    line: Optional[KnownHostLine] = None  # the line that matched (ok), or that lists another key (changed)
    note: str = ""  # why a certificate was not accepted, if one was presented


class _File:
    """One known_hosts file: exact names indexed, the other lines (wildcards, hashes) in order."""

    def __init__(self, path: str, lines: list[KnownHostLine]):
        self.path = path
        self.exact: dict[str, list[KnownHostLine]] = {}
        self.scanned: list[KnownHostLine] = []
        for entry in lines:
            if entry.names.startswith("|") or _WILDCARDS & set(entry.names):
                self.scanned.append(entry)
            else:
                for name in entry.names.lower().split(","):
                    self.exact.setdefault(name, []).append(entry)

    def lines_for(self, name: str) -> list[KnownHostLine]:
        found = list(self.exact.get(name, ()))
        found += [entry for entry in self.scanned if names_match(name, entry.names)]
        return sorted(set(found), key=lambda entry: entry.line)


_files: dict[str, tuple] = {}
_files_lock = threading.Lock()


def names_match(name: str, names: str) -> bool:
    if names.startswith("|"):
        return _hashed_match(name, names)
    return match_hostname(name, names) == 1


def _hashed_match(name: str, field: str) -> bool:
    parts = field.split("|")
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt, digest = base64.b64decode(parts[2]), base64.b64decode(parts[3])
    except ValueError:
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)


def hashed_name(name: str) -> str:
    salt = os.urandom(20)
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def parse_line(text: str, path: str, number: int) -> Optional[KnownHostLine]:
    """One known_hosts line, or None for comments, blanks and lines ssh would skip."""
    words = text.split()
    if not words or words[0].startswith("#"):
        return None
    marker = None
    if words[0].startswith("@"):
        marker = {"@cert-authority": "cert-authority", "@revoked": "revoked"}.get(words[0])
        if marker is None:
            return None
        words = words[1:]
    if len(words) < 3:
        return None
    names, key_type, encoded = words[0], words[1], words[2]
    try:
        blob = base64.b64decode(encoded, validate=True)
    except ValueError:
        return None
    if _blob_type(blob) != key_type:
        return None
    return KnownHostLine(path, number, marker, names, key_type, blob)


def _blob_type(blob: bytes) -> Optional[str]:
    if len(blob) < 4:
        return None
    size = int.from_bytes(blob[:4], "big")
    return blob[4:4 + size].decode("ascii", errors="replace") if size <= len(blob) - 4 else None


def read_file(path: str) -> Optional[_File]:
    """The parsed file, read once per process (again when it changes); None if absent or unreadable."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
    with _files_lock:
        cached = _files.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    parsed = _File(path, [entry for number, line in enumerate(text.splitlines(), 1)
                          if (entry := parse_line(line, path, number)) is not None])
    with _files_lock:
        _files[path] = (stamp, parsed)
    return parsed


def lines_for(name: str, paths: Sequence[str]) -> list[KnownHostLine]:
    """Every line of `paths` (in order) whose names match `name` (lowercased, as ssh does)."""
    name = name.lower()
    found: list[KnownHostLine] = []
    for path in paths:
        parsed = read_file(path)
        if parsed is not None:
            found += parsed.lines_for(name)
    return found


def lookup_name(hostname: str, port: int, alias: Optional[str]) -> str:
    if alias:
        return alias.lower()
    return hostname.lower() if port == 22 else f"[{hostname.lower()}]:{port}"


def judge(server: ServerKey, hostname: str, port: int, alias: Optional[str], paths: Sequence[str]) -> Verdict:
    """OpenSSH's verdict on `server`'s key for hostname:port (HostKeyAlias `alias`)."""
    return _judge(server, lookup_name(hostname, port, alias), (alias or hostname).lower(),
                  alias is None and port != 22, hostname.lower(), paths)


def _judge(server: ServerKey, name: str, principal: str, retry_without_port: bool, hostname: str,
           paths: Sequence[str]) -> Verdict:
    lines = lines_for(name, paths)
    note = ""
    if server.cert is not None:
        verdict = _cert_verdict(server, lines, principal)
        if verdict.status in ("ok", "revoked"):
            return verdict
        if retry_without_port:
            again = _judge(server, hostname, principal, False, hostname, paths)
            if again.status == "ok":
                return again
        note = verdict.note or f"no @cert-authority line for {name} lists the certificate's CA"
        server = replace(server, cert=None)  # as ssh: the certificate dropped, its plain key judged
    verdict = _plain_verdict(server, lines)
    if verdict.status == "new" and retry_without_port:
        again = _plain_verdict(server, lines_for(hostname, paths))
        if again.status == "ok":
            return again
    return replace(verdict, note=note)


def _cert_verdict(server: ServerKey, lines: list[KnownHostLine], principal: str) -> Verdict:
    cert = server.cert
    if _revoked(lines, (server.plain, cert.ca_key)):
        return Verdict("revoked", _revoked(lines, (server.plain, cert.ca_key)))
    for entry in lines:
        if entry.marker == "cert-authority" and entry.key == cert.ca_key:
            reason = check_host_certificate(cert, principal)
            return Verdict("ok", entry) if reason is None else Verdict("new", entry, f"{reason} ({entry.where})")
    return Verdict("new")


def _plain_verdict(server: ServerKey, lines: list[KnownHostLine]) -> Verdict:
    revoked = _revoked(lines, (server.plain,))
    if revoked:
        return Verdict("revoked", revoked)
    verdict = Verdict("new")
    for entry in lines:
        if entry.marker is None:
            if entry.key == server.plain:
                return Verdict("ok", entry)
            verdict = Verdict("changed", entry)
    return verdict


def _revoked(lines: list[KnownHostLine], keys: tuple[bytes, ...]) -> Optional[KnownHostLine]:
    return next((entry for entry in lines if entry.marker == "revoked" and entry.key in keys), None)


# OpenSSH's default HostKeyAlgorithms order for the algorithms paramiko offers: certificates first.
def key_type_of(algorithm: str) -> str:
    plain = algorithm[: -len(CERT_SUFFIX)] if algorithm.endswith(CERT_SUFFIX) else algorithm
    return "ssh-rsa" if plain.startswith("rsa-sha2-") else plain


def preferred_algorithms(offered: Sequence[str], name: str, paths: Sequence[str]) -> tuple[str, ...]:
    """The host key algorithms in the order ssh would ask for them (order_hostkeyalgs): certificates
    first when the best one's key type is known; otherwise known key types (and every certificate
    type where a @cert-authority line applies) first, the rest after."""
    plain = [a for a in offered if not a.endswith(CERT_SUFFIX)]
    order = [a + CERT_SUFFIX for a in plain if a + CERT_SUFFIX in offered] + plain
    order += [a for a in offered if a not in order]
    lines = lines_for(name, paths)
    known = {entry.key_type for entry in lines if entry.marker is None}
    has_ca = any(entry.marker == "cert-authority" for entry in lines)
    if not order or key_type_of(order[0]) in known:
        return tuple(order)
    first = [a for a in order if (a.endswith(CERT_SUFFIX) and has_ca) or key_type_of(a) in known]
    return tuple(first + [a for a in order if a not in first])


def known_hosts_line(name: str, key_type: str, key: bytes, hashed: bool) -> str:
    return f"{hashed_name(name) if hashed else name} {key_type} {base64.b64encode(key).decode()}\n"
