"""OpenSSH host certificates (PROTOCOL.certkeys): read one, and judge it as ssh does
(sshkey_cert_check_host): a host certificate, inside its validity window, naming the host
among its principals (or naming none), no critical options, signed by its CA with an
algorithm of OpenSSH's default CASignatureAlgorithms (not SHA-1 `ssh-rsa`).

paramiko reads a certificate only as far as the key inside it; the rest is read here.
"""
from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Optional

CERT_SUFFIX = "-cert-v01@openssh.com"
HOST_CERT = 2
# OpenSSH 9.2's default CASignatureAlgorithms
CA_SIGNATURE_ALGORITHMS = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
                           "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com", "rsa-sha2-512",
                           "rsa-sha2-256")
# The public fields of each key type, in the order the certificate carries them.
_KEY_FIELDS = {"ssh-ed25519": 1, "ssh-rsa": 2, "ecdsa-sha2-nistp256": 2, "ecdsa-sha2-nistp384": 2,
               "ecdsa-sha2-nistp521": 2, "ssh-dss": 4, "sk-ssh-ed25519@openssh.com": 2,
               "sk-ecdsa-sha2-nistp256@openssh.com": 3}


class CertificateError(ValueError):
    """The blob is not a certificate this reader understands."""


@dataclass(frozen=True)
class HostCertificate:
    cert_type_name: str
    plain_key: bytes  # the certified key's own public blob
    serial: int
    cert_type: int
    key_id: str
    principals: tuple[str, ...]
    valid_after: int
    valid_before: int
    critical_options: bytes
    ca_key: bytes  # the signing CA's public blob
    signed: bytes  # everything the signature covers
    signature: bytes

    @property
    def signature_algorithm(self) -> str:
        return _Reader(self.signature).text()


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise CertificateError("truncated certificate")
        chunk = self.data[self.pos:self.pos + size]
        self.pos += size
        return chunk

    def uint32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def uint64(self) -> int:
        return struct.unpack(">Q", self.take(8))[0]

    def string(self) -> bytes:
        return self.take(self.uint32())

    def text(self) -> str:
        return self.string().decode("utf-8", errors="replace")


def _string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def parse_certificate(blob: bytes) -> HostCertificate:
    reader = _Reader(blob)
    name = reader.text()
    if not name.endswith(CERT_SUFFIX):
        raise CertificateError(f"{name} is not a certificate type")
    plain_name = name[: -len(CERT_SUFFIX)]
    if plain_name not in _KEY_FIELDS:
        raise CertificateError(f"unknown certificate key type {plain_name}")
    reader.string()  # nonce
    start = reader.pos
    for _ in range(_KEY_FIELDS[plain_name]):
        reader.string()
    plain_key = _string(plain_name.encode()) + blob[start:reader.pos]
    serial, cert_type, key_id = reader.uint64(), reader.uint32(), reader.text()
    names = _Reader(reader.string())
    principals = []
    while names.pos < len(names.data):
        principals.append(names.text())
    valid_after, valid_before = reader.uint64(), reader.uint64()
    critical = reader.string()
    reader.string()  # extensions
    reader.string()  # reserved
    ca_key = reader.string()
    signed = blob[:reader.pos]
    signature = reader.string()
    return HostCertificate(name, plain_key, serial, cert_type, key_id, tuple(principals), valid_after,
                           valid_before, critical, ca_key, signed, signature)


def check_host_certificate(cert: HostCertificate, name: str, now: Optional[float] = None) -> Optional[str]:
    """None when `cert` is valid for host `name` now, else OpenSSH's reason. The CA itself is
    judged by the caller (known_hosts' @cert-authority lines)."""
    now = time.time() if now is None else now
    if cert.cert_type != HOST_CERT:
        return "Certificate invalid: not a host certificate"
    if now < cert.valid_after:
        return "Certificate invalid: not yet valid"
    if now >= cert.valid_before:
        return "Certificate invalid: expired"
    if cert.principals and name not in cert.principals:
        return f"Certificate invalid: name is not a listed principal ({name} not in {', '.join(cert.principals)})"
    if cert.critical_options:
        return "Certificate contains unsupported critical options"
    try:  # the signature blob is read only here: a damaged one is a refusal, never a crash
        algorithm = cert.signature_algorithm
    except CertificateError as exc:
        return f"Certificate invalid: its signature is damaged ({exc})"
    if algorithm not in CA_SIGNATURE_ALGORITHMS:
        return f"Certificate signed with disallowed algorithm {algorithm}"
    if not _signature_valid(cert):
        return "Certificate signature does not verify with its CA key"
    return None


def _signature_valid(cert: HostCertificate) -> bool:
    from clusterctl.transport.paramiko_setup import _paramiko

    paramiko = _paramiko()
    try:
        ca_type = _Reader(cert.ca_key).text()
        ca = paramiko.PKey.from_type_string(ca_type, cert.ca_key)
        return bool(ca.verify_ssh_sig(cert.signed, paramiko.Message(cert.signature)))
    except Exception:  # an unknown CA key type, a malformed signature: not valid
        return False
