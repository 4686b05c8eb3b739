"""Which keys to offer, in OpenSSH's order (sshconnect2.c pubkey_prepare): CertificateFile
certificates, then the agent's keys that are also identity files (so a passphrase-protected
identity_file is signed by the agent's copy, never decrypted), then the agent's other keys
(not with IdentitiesOnly), then the identity files themselves, read from disk.

A key file whose private half is encrypted and that the agent does not hold is decrypted only
after asking on the terminal: never when stdin, stdout or stderr is not a terminal, under
`--json`, in CI (`$CI`), or with BatchMode. FIDO (`sk-`) key files and PKCS#11 tokens are
not usable by paramiko: their keys work through ssh-agent; otherwise the failure says so.
Key files are read once per process (again when they change).
"""
from __future__ import annotations

import base64
import os
import socket
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from clusterctl.transport.openssh_config import SSHTarget
from clusterctl.transport.paramiko_setup import _paramiko

_prompts = {"allowed": True}
_keys_lock = threading.Lock()  # key files read, passphrases asked: one at a time
_loaded: dict = {}  # (path, mtime, size) -> (key or None, why not)


def allow_prompts(allowed: bool) -> None:
    """False under --json: a passphrase is never asked for."""
    _prompts["allowed"] = allowed


def can_prompt(target: SSHTarget) -> bool:
    if not _prompts["allowed"] or target.batch_mode or os.environ.get("CI"):
        return False
    if not all(stream is not None and stream.isatty() for stream in (sys.stdin, sys.stdout, sys.stderr)):
        return False
    try:
        os.close(os.open("/dev/tty", os.O_RDWR))
    except OSError:
        return False
    return True


_public_halves: dict = {}


def public_half(path: str) -> Optional[bytes]:
    """The public key blob of a key file without decrypting it: from PATH.pub, or from the
    unencrypted header of an OpenSSH-format private key. Read once per process (again when
    the file changes)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    stamp = (path, stat.st_mtime_ns, stat.st_size)
    if stamp not in _public_halves:
        _public_halves[stamp] = _read_public_half(path)
    return _public_halves[stamp]


def _read_public_half(path: str) -> Optional[bytes]:
    try:
        with open(f"{path}.pub") as handle:
            return base64.b64decode(handle.read().split()[1])
    except (OSError, IndexError, ValueError):
        pass
    try:
        with open(path) as handle:
            header = _openssh_header(handle.read())
    except OSError:
        return None
    return header[1] if header else None


def is_encrypted(path: str) -> bool:
    """True when the private half needs a passphrase: a cipher in the OpenSSH header, or a PEM
    `Proc-Type: 4,ENCRYPTED` / `ENCRYPTED PRIVATE KEY` (paramiko's exceptions for this vary)."""
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError:
        return False
    if "ENCRYPTED" in text.split("\n\n", 1)[0]:
        return True
    header = _openssh_header(text)
    return header is not None and header[0] != b"none"


def _openssh_header(text: str) -> Optional[tuple]:
    """(cipher, public key blob) of an OpenSSH-format private key, or None."""
    begin, end = "-----BEGIN OPENSSH PRIVATE KEY-----", "-----END OPENSSH PRIVATE KEY-----"
    if begin not in text or end not in text:
        return None
    try:
        data = base64.b64decode("".join(text.split(begin, 1)[1].split(end, 1)[0].split()))
        if not data.startswith(b"openssh-key-v1\0"):
            return None
        message = _paramiko().Message(data[len(b"openssh-key-v1\0"):])
        cipher = message.get_string()
        message.get_string()  # kdf
        message.get_string()  # kdf options
        return cipher, (message.get_binary() if message.get_int() >= 1 else None)
    except Exception:  # a damaged file: paramiko says why when it is loaded
        return None


def _blob_type(blob: Optional[bytes]) -> str:
    if not blob:
        return ""
    return _paramiko().Message(blob).get_text()


def load_key(path: str, target: SSHTarget, notes: list) -> Any:
    """The private key of `path`, or None with the reason appended to `notes`."""
    paramiko = _paramiko()
    try:
        stat = os.stat(path)
    except OSError:
        return None  # absent: ssh skips missing identity files too
    stamp = (path, stat.st_mtime_ns, stat.st_size)
    with _keys_lock:
        if stamp not in _loaded:
            try:
                _loaded[stamp] = (paramiko.PKey.from_path(path), "")
            except Exception as exc:  # encrypted, an unknown type (FIDO sk-), a damaged file
                _loaded[stamp] = (None, "encrypted" if is_encrypted(path) else f"unreadable: {exc}")
        key, why = _loaded[stamp]
        asked = key is None and why == "encrypted" and can_prompt(target)
        if asked:
            key = _ask_passphrase(path, stamp)
    if key is not None:
        return key
    kind = _blob_type(public_half(path))
    if kind.startswith("sk-"):
        notes.append(f"{path} is a FIDO security key ({kind}), which clusterctl's SSH client (paramiko) cannot "
                     "use: add it to ssh-agent (ssh-add), or use a non-FIDO key")
    elif why == "encrypted" and asked:
        notes.append(f"{path} is passphrase-protected and the passphrase was not accepted: ssh-add {path}")
    elif why == "encrypted":
        notes.append(f"{path} is passphrase-protected and ssh-agent does not hold it (not asked for the passphrase: "
                     f"no terminal, --json, CI or BatchMode): ssh-add {path}")
    else:
        notes.append(f"{path}: {why}")
    return None


def _ask_passphrase(path: str, stamp: tuple) -> Any:
    """Up to 3 tries on the terminal (NumberOfPasswordPrompts); the key is kept for the process."""
    import getpass

    paramiko = _paramiko()
    for _ in range(3):
        try:
            passphrase = getpass.getpass(f"Enter passphrase for key '{path}': ")
        except (EOFError, OSError):
            return None
        if not passphrase:
            return None
        try:
            key = paramiko.PKey.from_path(path, password=passphrase.encode())
        except Exception:  # a wrong passphrase (paramiko and cryptography raise several kinds)
            continue
        _loaded[stamp] = (key, "")
        return key
    return None


def _with_certificate(key: Any, path: str) -> list:
    """[the key with PATH-cert.pub loaded, the plain key] when a certificate lies beside it."""
    cert = f"{path}-cert.pub"
    if not os.path.exists(cert):
        return [key]
    try:
        certified = type(key).__new__(type(key))
        certified.__dict__.update(key.__dict__)
        certified.load_certificate(cert)
        return [certified, key]
    except Exception:  # a certificate for another key: ssh skips it as well
        return [key]


def agent_keys(target: SSHTarget) -> tuple[Any, list]:
    """(the agent connection or None, its keys). IdentityAgent picks the socket; none: no agent."""
    path = target.identity_agent
    if path == "none":
        return None, []
    if path in (None, "SSH_AUTH_SOCK"):
        path = os.environ.get("SSH_AUTH_SOCK")
    if not path:
        return None, []
    paramiko = _paramiko()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(10)
        conn.connect(path)
        # Private touch: paramiko.Agent() reads only $SSH_AUTH_SOCK; an IdentityAgent socket of
        # ssh_config's own is handed to AgentSSH._connect, which Agent itself uses (its `close` is
        # `_close`). tests/unit/test_library_canaries.py fails loudly when paramiko changes them.
        agent = paramiko.agent.AgentSSH()
        agent._connect(conn)
        return agent, list(agent.get_keys())
    except (OSError, paramiko.SSHException):
        conn.close()
        return None, []  # a dangling $SSH_AUTH_SOCK, as ssh: no agent


@dataclass
class KeyPlan:
    """The keys to offer one host, and what could not be offered (for the failure message)."""

    target: SSHTarget
    agent: Any = None
    notes: list = field(default_factory=list)
    offered: list = field(default_factory=list)  # (description, key) in order

    def close(self) -> None:
        if self.agent is not None:
            self.agent._close()
            self.agent = None


def plan_keys(target: SSHTarget, first: Optional[str] = None) -> KeyPlan:
    """The keys for `target` in ssh's order, except that the key file the inventory names (`first`)
    goes first: with many keys in the agent, ssh's order can exhaust the server's MaxAuthTries
    before the key named for the cluster is tried."""
    plan = KeyPlan(target)
    plan.agent, held = agent_keys(target)
    files = [(path, public_half(path)) for path in target.identity_files if os.path.exists(path)]
    file_of = {blob: path for path, blob in reversed(files) if blob}
    matched = [key for key in held if key.asbytes() in file_of]
    others = [] if target.identities_only else [key for key in held if key.asbytes() not in file_of]
    for cert_path in target.certificate_files:
        plan.offered += _certificate_keys(cert_path, files, matched, target, plan.notes)
    plan.offered += [(f"{file_of[key.asbytes()]} (the agent's copy)", key) for key in matched]
    plan.offered += [(f"agent key {key.comment or key.get_name()}", key) for key in others]
    for path, blob in files:
        if blob and blob in {key.asbytes() for key in matched}:
            continue  # signed by the agent's copy
        key = load_key(path, target, plan.notes)
        if key is not None:
            plan.offered += [(path, each) for each in _with_certificate(key, path)]
    preferred = public_half(first) if first else None
    if preferred:
        plan.offered.sort(key=lambda item: item[1].asbytes() != preferred)  # stable: the rest keep their order
    if target.pkcs11_provider:
        plan.notes.append(f"PKCS11Provider {target.pkcs11_provider} is not used by clusterctl (paramiko has no "
                          f"PKCS#11): `ssh-add -s {target.pkcs11_provider}` puts the token's keys in ssh-agent, "
                          "which clusterctl uses")
    return plan


def _certificate_keys(cert_path: str, files: list, matched: list, target: SSHTarget, notes: list) -> list:
    """A CertificateFile paired with its private key: the agent's copy, else the identity file."""
    try:
        with open(cert_path) as handle:
            words = handle.read().split()
        cert_blob = base64.b64decode(words[1])
    except (OSError, IndexError, ValueError):
        return []
    from clusterctl.transport.host_certs import CertificateError, parse_certificate

    try:
        plain = parse_certificate(cert_blob).plain_key
    except CertificateError:
        return []
    candidates = [key for key in matched if key.asbytes() == plain]
    candidates += [load_key(path, target, notes) for path, blob in files if blob == plain and not candidates]
    for key in candidates:
        if key is not None:
            try:
                certified = type(key).__new__(type(key))
                certified.__dict__.update(key.__dict__)
                certified.load_certificate(cert_path)
                return [(cert_path, certified)]
            except Exception:
                return []
    return []
