"""Host certificates as ssh judges them (sshkey_cert_check_host), on certificates made by
`ssh-keygen -s` here: the principals, the validity window, host vs user certificates, the CA's
signature and its algorithm. The reader of the certificate bytes a server sends never fails
with anything but CertificateError, whatever the bytes (property test)."""
from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from clusterctl.transport.host_certs import CertificateError, check_host_certificate, parse_certificate

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")


def _keygen(path: Path, kind: str = "ed25519") -> Path:
    argv = ["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)] + (["-b", "2048"] if kind == "rsa" else [])
    subprocess.run(argv, check=True, timeout=30)
    return path


def _certify(tmp_path: Path, ca: Path, *options: str, host_kind: str = "ed25519", name: str = "host") -> tuple:
    host = _keygen(tmp_path / name, host_kind)
    subprocess.run(["ssh-keygen", "-q", "-s", str(ca), "-I", "test", *options, f"{host}.pub"], check=True,
                   timeout=30, capture_output=True)
    blob = base64.b64decode(Path(f"{host}-cert.pub").read_text().split()[1])
    plain = base64.b64decode(Path(f"{host}.pub").read_text().split()[1])
    return blob, plain


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> Path:
    return _keygen(tmp_path_factory.mktemp("ca") / "ca")


def test_a_host_certificate_is_read_whole(ca, tmp_path):
    blob, plain = _certify(tmp_path, ca, "-h", "-n", "node1.cluster,10.0.0.1", "-z", "42")
    cert = parse_certificate(blob)
    ca_blob = base64.b64decode(Path(f"{ca}.pub").read_text().split()[1])
    assert (cert.cert_type, cert.serial, cert.key_id) == (2, 42, "test")
    assert cert.principals == ("node1.cluster", "10.0.0.1")
    assert cert.plain_key == plain and cert.ca_key == ca_blob
    assert cert.signature_algorithm == "ssh-ed25519"


def test_a_valid_certificate_names_the_host_among_its_principals(ca, tmp_path):
    cert = parse_certificate(_certify(tmp_path, ca, "-h", "-n", "node1.cluster,10.0.0.1")[0])
    assert check_host_certificate(cert, "node1.cluster") is None
    assert check_host_certificate(cert, "10.0.0.1") is None
    assert "not a listed principal" in check_host_certificate(cert, "node2.cluster")


def test_a_certificate_without_principals_is_valid_for_any_host(ca, tmp_path):
    cert = parse_certificate(_certify(tmp_path, ca, "-h")[0])
    assert cert.principals == () and check_host_certificate(cert, "anything") is None


@pytest.mark.parametrize("validity, reason", [("-2d:-1d", "expired"), ("+1d:+2d", "not yet valid"),
                                              ("-1d:+1d", None)])
def test_the_validity_window_is_kept(ca, tmp_path, validity, reason):
    cert = parse_certificate(_certify(tmp_path, ca, "-h", "-n", "n1", "-V", validity)[0])
    verdict = check_host_certificate(cert, "n1")
    assert verdict is None if reason is None else reason in verdict
    assert check_host_certificate(cert, "n1", now=cert.valid_after - 1) is not None


def test_a_user_certificate_is_not_a_host_certificate(ca, tmp_path):
    cert = parse_certificate(_certify(tmp_path, ca, "-n", "n1")[0])
    assert "not a host certificate" in check_host_certificate(cert, "n1")


def test_a_tampered_certificate_does_not_verify(ca, tmp_path):
    blob, _ = _certify(tmp_path, ca, "-h", "-n", "node1")
    cert = parse_certificate(blob)
    forged = blob.replace(b"node1", b"node2")  # a principal changed after signing
    assert check_host_certificate(parse_certificate(forged), "node2") == \
        "Certificate signature does not verify with its CA key"
    assert check_host_certificate(cert, "node1") is None


@pytest.mark.parametrize("ca_kind, host_kind", [("rsa", "ed25519"), ("ecdsa", "rsa"), ("ed25519", "ecdsa")])
def test_rsa_and_ecdsa_certificates_and_cas_verify(tmp_path, ca_kind, host_kind):
    other_ca = _keygen(tmp_path / f"ca-{ca_kind}", ca_kind)
    cert = parse_certificate(_certify(tmp_path, other_ca, "-h", "-n", "n1", host_kind=host_kind)[0])
    assert check_host_certificate(cert, "n1") is None
    if ca_kind == "rsa":
        assert cert.signature_algorithm == "rsa-sha2-512"


def test_a_sha1_rsa_signature_is_refused_as_ssh_refuses_it(tmp_path):
    rsa_ca = _keygen(tmp_path / "rsa-ca", "rsa")
    cert = parse_certificate(_certify(tmp_path, rsa_ca, "-h", "-n", "n1", "-t", "ssh-rsa")[0])
    assert cert.signature_algorithm == "ssh-rsa"
    assert "disallowed algorithm" in check_host_certificate(cert, "n1")


def test_a_plain_key_is_not_a_certificate(tmp_path):
    plain = _keygen(tmp_path / "k")
    with pytest.raises(CertificateError):
        parse_certificate(base64.b64decode(Path(f"{plain}.pub").read_text().split()[1]))


_SAMPLE = {}


@settings(max_examples=200, deadline=None)
@given(position=st.integers(0, 10_000), value=st.integers(0, 255), cut=st.integers(0, 10_000))
@example(position=224, value=0, cut=225)  # a signature blob whose length field is cut: found by hypothesis
def test_a_damaged_certificate_is_refused_never_crashes(tmp_path_factory, position, value, cut):
    if "blob" not in _SAMPLE:
        directory = tmp_path_factory.mktemp("damaged")
        _SAMPLE["blob"] = _certify(directory, _keygen(directory / "ca"), "-h", "-n", "n1")[0]
    blob = bytearray(_SAMPLE["blob"])
    blob[position % len(blob)] = value
    data = bytes(blob[: max(1, cut % (len(blob) + 1))])
    try:
        cert = parse_certificate(data)
    except CertificateError:
        return
    assert isinstance(check_host_certificate(cert, "n1"), (str, type(None)))
