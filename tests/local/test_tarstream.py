"""tarstream against real archives: GNU tar's and Python's formats, read through every chunking,
must list the same members with the same bytes as tarfile does."""
from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile

import pytest

from clusterctl.collect.tarstream import DamagedStream, TarStream

LONG_DIR = "d" * 120
NAMES = {
    "empty.txt": b"",
    "one-block.bin": os.urandom(512),
    "odd.bin": os.urandom(1000),
    "big.bin": os.urandom(300_001),
    f"{LONG_DIR}/{'n' * 150}.log": b"a long name\n",
    f"{LONG_DIR}/in-the-ustar-prefix.txt": b"ustar splits this name\n",
    "ünïcode 名前/猫.txt": "café\n".encode(),
}


def _tree(root):
    for name, data in NAMES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (1_700_000_000, 1_700_000_000))
    (root / "link").symlink_to("big.bin")
    os.link(root / "odd.bin", root / "hard")
    os.mkfifo(root / "fifo")
    return root


class _Chunks:
    """Hands out `step` bytes per read at most, like a channel delivering packets."""

    def __init__(self, data: bytes, step: int):
        self.data, self.step, self.pos, self.largest = data, step, 0, 0

    def read(self, size: int) -> bytes:
        out = self.data[self.pos:self.pos + min(size, self.step)]
        self.pos += len(out)
        self.largest = max(self.largest, len(out))
        return out


def _via_tarstream(data: bytes, step: int) -> list[tuple]:
    tar = TarStream(_Chunks(data, step).read, compressed=data[:2] == b"\x1f\x8b")  # as with --compress
    found = []
    for member in tar:
        digest = hashlib.sha256()
        for piece in tar.data():
            digest.update(piece)
        kind = "file" if member.isfile() else "dir" if member.isdir() else "link" if member.islink() else "other"
        found.append((member.name, kind, member.size if member.isfile() else 0, int(member.mtime), digest.hexdigest()))
    return found


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


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return _tree(tmp_path_factory.mktemp("tree"))


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
