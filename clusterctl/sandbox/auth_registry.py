"""Registries that want a login, like a cluster's Harbor: htpasswd (bcrypt) users, one over TLS
with a private CA and one over plain HTTP, both serving the sandbox registry's storage (so
`sandbox/base:1` is there without a push). Started on demand by the registry tests, not by
`sandbox up`; `stop` ends them.

- HTTPS (198.18.0.1:5443): its CA is nowhere the engines look until a test copies
  `ca_cert(layout)` into a node's certs.d (`Node.certs_dir / HTTPS / "ca.crt"`).
- PLAIN (198.18.0.1:5001): not in the engines' insecure-registries, so an engine refuses it
  ("server gave HTTP response to HTTPS client"), as a node without that daemon.json entry does.
"""
from __future__ import annotations

import datetime
import ipaddress
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from clusterctl.sandbox.layout import BRIDGE_ADDRESS, Layout
from clusterctl.sandbox.registry import OPENER
from clusterctl.sandbox.system import (
    owned_pid,
    pid_file_names_dead_process,
    spawn_detached,
    tail,
    terminate,
    wait_until,
)

HTTPS = f"{BRIDGE_ADDRESS}:5443"
PLAIN = f"{BRIDGE_ADDRESS}:5001"
USER = "ccpull"
PASSWORD = "cc-registry-pw-26"  # a rehearsal secret: the tests assert it appears nowhere clusterctl writes
REPOSITORY = "sandbox/base:1"  # pushed by `sandbox up --docker` to the main registry, whose storage these serve


def ca_cert(layout: Layout) -> Path:
    return layout.auth_registry_dir / "ca.crt"


def _files(layout: Layout, name: str) -> dict[str, Path]:
    base = layout.auth_registry_dir
    return {"config": base / f"{name}.yml", "pid": base / f"{name}.pid", "log": base / f"{name}.log"}


def _ensure_tls(layout: Layout) -> tuple[Path, Path]:
    """A private CA and a server certificate for the bridge address, made once."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    base = layout.auth_registry_dir
    cert, key = base / "server.crt", base / "server.key"
    if cert.exists() and key.exists() and ca_cert(layout).exists():
        return cert, key
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "clusterctl sandbox private CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, BRIDGE_ADDRESS)]))
              .issuer_name(ca_name).public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=3650))
              .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(BRIDGE_ADDRESS))]),
                             critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    ca_cert(layout).write_bytes(ca.public_bytes(pem))
    cert.write_bytes(server.public_bytes(pem))
    key.write_bytes(server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    key.chmod(0o600)
    return cert, key


def _htpasswd(layout: Layout) -> Path:
    import bcrypt  # paramiko's dependency; the registry reads bcrypt entries only

    path = layout.auth_registry_dir / "htpasswd"
    if not path.exists():
        path.write_text(f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt()).decode()}\n")
        path.chmod(0o600)
    return path


def config(layout: Layout, address: str, tls: bool) -> dict:
    http: dict = {"addr": address}
    if tls:
        cert, key = _ensure_tls(layout)
        http["tls"] = {"certificate": str(cert), "key": str(key)}
    return {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(layout.registry_storage)}, "maintenance": {
            "uploadpurging": {"enabled": False}, "readonly": {"enabled": True}}},
        "auth": {"htpasswd": {"realm": "clusterctl-sandbox", "path": str(_htpasswd(layout))}},
        "http": http,
    }


def answers(layout: Layout, address: str, tls: bool) -> bool:
    """The registry answers /v2/ (401 without a login is an answer)."""
    url = f"{'https' if tls else 'http'}://{address}/v2/"
    try:
        if tls:
            context = ssl.create_default_context(cafile=str(ca_cert(layout)))
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
        else:
            opener = OPENER
        with opener.open(url, timeout=1.0) as response:
            return response.status in (200, 401)
    except urllib.error.HTTPError as exc:
        return exc.code == 401
    except (OSError, urllib.error.URLError):
        return False


def start(layout: Layout, timeout: float = 15.0) -> None:
    layout.auth_registry_dir.mkdir(parents=True, exist_ok=True)
    for name, address, tls in (("https", HTTPS, True), ("plain", PLAIN, False)):
        files = _files(layout, name)
        if owned_pid(files["pid"], str(files["config"])) is None:
            files["config"].write_text(yaml.safe_dump(config(layout, address, tls), sort_keys=False))
            spawn_detached(["docker-registry", "serve", files["config"]], files["log"], files["pid"])
        wait_until(lambda a=address, t=tls: answers(layout, a, t), timeout, f"the registry at {address}",
                   lambda f=files: f"{f['log']}\n{tail(f['log'])}",
                   failed=lambda f=files: pid_file_names_dead_process(f["pid"]))


def stop(layout: Layout) -> None:
    for name in ("https", "plain"):
        files = _files(layout, name)
        running = owned_pid(files["pid"], str(files["config"]))
        if running is not None:
            terminate([running], timeout=10)
        files["pid"].unlink(missing_ok=True)
