"""Issue 34: what a node, a job or another user on the cluster controls can no longer cost the
controller memory, leak a secret or reach a file outside the run. Each test plays the attack
that worked before the fix (see docs/reliability.md, "Hostile input" and "Secrets")."""
from __future__ import annotations

import io
import json
import tarfile
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from clusterctl_helpers import examples
from hypothesis import strategies as st

from clusterctl.collect.tarstream import MAX_NAME, MAX_PAX, DamagedStream, TarStream
from clusterctl.collect.unpack import StreamMask, mask_values
from clusterctl.models import MASK

FAST = settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("kind, limit", [(tarfile.GNUTYPE_LONGNAME, MAX_NAME), (tarfile.GNUTYPE_LONGLINK, MAX_NAME),
                                         (tarfile.XHDTYPE, MAX_PAX), (tarfile.XGLTYPE, MAX_PAX)])
def test_a_name_or_pax_header_over_its_bound_is_refused_before_it_is_read(kind, limit):
    header = tarfile.TarInfo("h")
    header.type, header.size = kind, limit + 1
    asked = []

    def read(size: int) -> bytes:  # the body never comes: refusing must not wait for it
        asked.append(size)
        return header.tobuf(format=tarfile.USTAR_FORMAT) if len(asked) == 1 else b""

    with pytest.raises(DamagedStream, match=f"at most {limit}"):
        list(TarStream(read))


@FAST
@given(size=st.integers(0, 4 * MAX_PAX), kind=st.sampled_from([tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE]),
       gzip=st.booleans(), compressed=st.booleans())
def test_the_tar_reader_never_holds_more_than_its_bounds_whatever_the_sizes_claimed(size, kind, gzip, compressed):
    header = tarfile.TarInfo("h")
    header.type, header.size = kind, size
    data = header.tobuf(format=tarfile.USTAR_FORMAT) + bytes(512 * 4)
    if gzip:
        data = _gzipped(data)
    try:
        list(TarStream(io.BytesIO(data).read, compressed))
    except DamagedStream as exc:
        message = str(exc)
        assert (gzip and not compressed and "no compression" in message) or "at most" in message \
            or "ended" in message or "pax" in message, message
    else:
        assert size <= (MAX_NAME if kind == tarfile.GNUTYPE_LONGNAME else MAX_PAX) and (compressed or not gzip)


def _gzipped(data: bytes) -> bytes:
    compressor = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


# --------------------------------------------------------------------------- masking

SECRET = st.text(st.characters(blacklist_categories=("Cs",)), min_size=4, max_size=24).filter(lambda s: s.strip())


@FAST
@given(secret=SECRET, ascii_only=st.booleans(), cut=st.integers(1, 64))
def test_a_secret_is_masked_in_json_however_it_is_escaped_and_however_the_stream_is_cut(secret, ascii_only, cut):
    document = json.dumps([{"Env": [f"PASSWORD={secret}"], "note": "x"}, secret], ensure_ascii=ascii_only).encode()
    whole = mask_values(document, {secret})
    pieces = []
    mask = StreamMask({secret}, pieces.append)
    for start in range(0, len(document), cut):
        mask.write(document[start:start + cut])
    mask.close()
    for masked in (whole, b"".join(pieces)):
        [env, value] = json.loads(masked)
        assert value == MASK and env["Env"] == [f"PASSWORD={MASK}"] and secret not in masked.decode()


def test_a_password_with_a_quote_and_a_backslash_is_masked_in_docker_inspect_and_run_json(reliability):
    row = reliability("a `secret: true` value with `\"`, `\\` and `&` in the collected docker-inspect.json and run.json "
                      "(JSON-escaped, Go's HTML escapes too)", "masked", section="Secrets")
    secret = 'pa"ss\\w&rd'
    go_inspect = b'[{"Config":{"Env":["DB_PASSWORD=pa\\"ss\\\\w\\u0026rd"]}}]'  # as Docker's Go encoder writes it
    run_json = json.dumps({"env": {"DB_PASSWORD": secret}}, indent=2).encode()
    masked = [mask_values(text, {secret}) for text in (go_inspect, run_json)]
    assert json.loads(masked[0])[0]["Config"]["Env"] == [f"DB_PASSWORD={MASK}"]
    assert json.loads(masked[1])["env"]["DB_PASSWORD"] == MASK
    row.observe(f"both masked ({masked[0].decode()}; run.json {json.loads(masked[1])})")
