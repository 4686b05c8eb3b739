"""tarstream against real archives: GNU tar's and Python's formats, read through every chunking,
must list the same members with the same bytes as tarfile does."""
from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile

import pytest

from clusterctl.collect.tarstream import DamagedStream, TarStream

from unit.test_tarstream import LONG_DIR, NAMES, _Chunks, _via_tarstream, tree


def _via_tarfile(data: bytes) -> list[tuple]:
    found = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for info in tar:
            body = tar.extractfile(info).read() if info.isreg() else b""
            kind = "file" if info.isreg() else "dir" if info.isdir() else "link" if info.issym() or info.islnk() else "other"
            found.append((info.name, kind, len(body), int(info.mtime), hashlib.sha256(body).hexdigest()))
    return found


def _gnu_tar(root, *options: str) -> bytes:
    return subprocess.run(["tar", *options, "-cf", "-", "-C", str(root), "."], check=True, capture_output=True).stdout


ARCHIVES = {
    "gnu tar, default": lambda root: _gnu_tar(root),
    "gnu tar, --format=posix (pax)": lambda root: _gnu_tar(root, "--format=posix"),
    "gnu tar, --format=gnu": lambda root: _gnu_tar(root, "--format=gnu"),
    "gnu tar, -z": lambda root: _gnu_tar(root, "-z"),
    "python, ustar": lambda root: _python_tar(root, tarfile.USTAR_FORMAT),
    "python, gnu": lambda root: _python_tar(root, tarfile.GNU_FORMAT),
    "python, pax": lambda root: _python_tar(root, tarfile.PAX_FORMAT),
}


def _python_tar(root, fmt) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for path in sorted(root.rglob("*")):
            if path.is_fifo():
                continue
            try:
                tar.add(path, arcname=str(path.relative_to(root)), recursive=False)
            except ValueError:  # ustar: a name too long even for its prefix field
                assert fmt == tarfile.USTAR_FORMAT
    return buffer.getvalue()


@pytest.mark.parametrize("kind", ARCHIVES)
@pytest.mark.parametrize("step", [1_000_003, 65_536, 513, 7])
def test_members_and_bytes_match_tarfile_through_any_chunking(tree, kind, step):
    data = ARCHIVES[kind](tree)
    expected = _via_tarfile(data)
    assert _via_tarstream(data, step) == expected
    names = {row[0].removeprefix("./") for row in expected}
    too_long = {name for name in NAMES if "n" * 150 in name} if "ustar" in kind else set()
    assert set(NAMES) - too_long <= names and {"link", "hard"} <= names
    assert f"{LONG_DIR}/in-the-ustar-prefix.txt" in names


def test_data_not_taken_is_skipped(tree):
    data = _gnu_tar(tree)
    tar = TarStream(_Chunks(data, 4096).read)
    names = [member.name for member in tar]  # data() never called
    assert [row[0] for row in _via_tarfile(data)] == names


@pytest.mark.parametrize("cut", [100, 512, 700, 2048])
def test_a_stream_cut_short_is_damaged(tree, cut):
    data = _gnu_tar(tree)
    with pytest.raises(DamagedStream):
        _via_tarstream(data[:cut], 4096)


def test_a_gzip_stream_cut_short_is_damaged(tree):
    data = _gnu_tar(tree, "-z")
    with pytest.raises(DamagedStream):
        _via_tarstream(data[:len(data) // 2], 4096)
