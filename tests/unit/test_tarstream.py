"""tarstream against real archives: GNU tar's and Python's formats, read through every chunking,
must list the same members with the same bytes as tarfile does."""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile

import pytest

from clusterctl.collect.tarstream import READ_SIZE, DamagedStream, TarStream

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


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return _tree(tmp_path_factory.mktemp("tree"))


def test_a_pax_global_header_applies_to_the_members_after_it():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"mtime": "1234567890"}) as tar:
        info = tarfile.TarInfo("a.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    [(name, kind, size, mtime, _)] = _via_tarstream(buffer.getvalue(), 100)
    assert (name, kind, size, mtime) == ("a.txt", "file", 3, 1234567890)


def test_what_is_not_a_tar_stream_is_damaged():
    with pytest.raises(DamagedStream, match="bad tar header"):
        _via_tarstream(b"Error response from daemon: No such container\n" + bytes(600), 4096)


def test_an_empty_stream_is_damaged():
    with pytest.raises(DamagedStream, match="end-of-archive"):
        _via_tarstream(b"", 10)


def test_a_compressed_stream_of_zeros_inflates_a_bounded_amount_per_read():
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        info = tarfile.TarInfo("zeros.bin")
        info.size = 64 << 20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    assert len(raw.getvalue()) < 1 << 20  # the whole stream is one read
    tar = TarStream(_Chunks(raw.getvalue(), 1 << 30).read, compressed=True)
    for member in tar:
        sizes = [len(piece) for piece in tar.data()]
        assert sum(sizes) == member.size == 64 << 20 and max(sizes) <= READ_SIZE


@pytest.mark.skipif(not shutil.which("busybox"), reason="busybox not installed")
def test_busybox_tar_reads_the_same(tree, tmp_path):
    data = subprocess.run(["busybox", "tar", "-cf", "-", "-C", str(tree), "."], check=True, capture_output=True).stdout
    assert _via_tarstream(data, 777) == _via_tarstream(data, 1 << 20) == _via_tarstream(data, 777)
