"""Issue 34: what a node, a job or another user on the cluster controls can no longer cost the
controller memory, leak a secret or reach a file outside the run. Each test plays the attack
that worked before the fix (see docs/reliability.md, "Hostile input" and "Secrets")."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterctl.collect.tarstream import MAX_NAME, MAX_PAX, DamagedStream, TarStream
from clusterctl.collect.unpack import StreamMask, mask_values
from clusterctl.models import MASK

REPO = Path(__file__).resolve().parents[1]
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _python_peak(code: str, limit_bytes: int = 1536 << 20) -> dict:
    """Run `code` in a fresh interpreter under an address-space limit (the old code asked for
    gigabytes: it fails with MemoryError instead of swapping the machine); its last stdout line is JSON."""
    prelude = ("import resource, tracemalloc, json, sys\n"
               f"resource.setrlimit(resource.RLIMIT_AS, ({limit_bytes}, {limit_bytes}))\n"
               "tracemalloc.start()\n")
    done = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _gzip_long_name_bomb(name_bytes: int) -> bytes:
    """A gzip stream whose tar holds one GNU long-name header of `name_bytes` zeros: ~1 KiB of
    gzip per MiB of header."""
    header = tarfile.TarInfo("././@LongLink")
    header.type, header.size = tarfile.GNUTYPE_LONGNAME, name_bytes
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [compressor.compress(header.tobuf(format=tarfile.USTAR_FORMAT))]
    zeros = bytes(8 << 20)
    left = name_bytes
    while left:
        out.append(compressor.compress(zeros[:min(left, len(zeros))]))
        left -= min(left, len(zeros))
    out.append(compressor.flush())
    return b"".join(out)


@pytest.mark.slow
def test_a_one_mebibyte_hostile_tar_stream_costs_the_controller_under_100_mb(tmp_path, reliability):
    row = reliability("a 1 MiB gzip tar stream from a node holding a 1 GiB GNU long-name header (collect's tar "
                      "reader, with and without --compress)", "refused as a damaged stream; the controller's "
                      "peak allocation under 100 MB", section="Hostile input")
    bomb = tmp_path / "bomb.tar.gz"
    bomb.write_bytes(_gzip_long_name_bomb(1 << 30))
    assert len(bomb.read_bytes()) < 1.1 * 2**20
    measured = _python_peak(f"""
        from clusterctl.collect.tarstream import DamagedStream, TarStream
        errors = []
        for compressed in (False, True):
            with open({str(bomb)!r}, "rb") as stream:
                try:
                    [m for m in TarStream(stream.read, compressed)]
                except DamagedStream as exc:
                    errors.append(str(exc))
        print(json.dumps({{"peak": tracemalloc.get_traced_memory()[1], "errors": errors}}))
    """)
    assert len(measured["errors"]) == 2, measured
    assert "no compression was asked for" in measured["errors"][0]
    assert f"at most {MAX_NAME}" in measured["errors"][1]
    assert measured["peak"] < 100 << 20
    row.observe(f"a {bomb.stat().st_size / 2**20:.2f} MiB stream: without --compress refused at its first bytes "
                f"({measured['errors'][0]}); with it, refused at the header ({measured['errors'][1]}); peak "
                f"allocation {measured['peak'] / 2**20:.1f} MB (was 2 GiB)")


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
