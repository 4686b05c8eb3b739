"""A tar stream read as it arrives, its file data handed on without being copied.

tarfile's stream mode copies every byte three times while holding the GIL (joins and slices
in `_Stream`, then `readinto`). On a 600 MB collect-logs that thread was the bottleneck of the
whole process, ahead of the SSH connections it shares the GIL with; handing on slices
(memoryviews) of the chunks the channel delivers took collect-logs from ~75 % to ~85 % of
parallel scp's throughput (bench/collect.py).

What is read: ustar, GNU and pax archives as GNU tar, busybox tar and Python write them.
Headers are parsed by `tarfile.TarInfo.frombuf` (checksums, base-256 sizes, ustar prefixes);
GNU long names and link names ('L', 'K') and pax headers ('x'; 'g' for the rest of the
archive: path, linkpath, size, mtime) are applied here. A gzip stream is inflated on the way,
only when the caller asked for one (`--compress`): otherwise a few MB from a node could inflate
into gigabytes. Long-name and pax headers are bounded (MAX_NAME, MAX_PAX): a node controls their
sizes, and they are held in memory whole.
Sparse members and a stream cut short (even between members) raise `DamagedStream`.
"""
from __future__ import annotations

import math
import tarfile
import zlib
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

BLOCK = 512
READ_SIZE = 1 << 20
MAX_NAME = 64 << 10  # a GNU long name or link name (PATH_MAX is 4096)
MAX_PAX = 1 << 20  # a pax header's records (paths, times, the odd xattr)
_PAX_KEYS = {"path": "name", "linkpath": "linkname", "size": "size", "mtime": "mtime"}


class DamagedStream(Exception):
    """The stream is not a tar archive, or ends in the middle of one."""


@dataclass
class Member:
    name: str
    size: int
    mtime: float
    type: bytes
    linkname: str = ""

    def isfile(self) -> bool:
        return self.type in tarfile.REGULAR_TYPES

    def isdir(self) -> bool:
        return self.type == tarfile.DIRTYPE

    def islink(self) -> bool:
        return self.type in (tarfile.SYMTYPE, tarfile.LNKTYPE)


class TarStream:
    """Iterate the members of the tar stream `read(n)` delivers (b"" at its end); for each,
    `data()` yields its bytes as memoryviews of the chunks as they were read. Data a caller does not
    take is skipped."""

    def __init__(self, read: Callable[[int], bytes], compressed: bool = False):
        self._source = _Bytes(read)
        first = self._source.peek(2)
        self._inflating: Optional[_Inflating] = None
        if first[:2] == b"\x1f\x8b":
            if not compressed:
                raise DamagedStream("a gzip stream, and no compression was asked for")
            self._inflating = _Inflating(self._source)
            self._source = _Bytes(self._inflating.read)
        self._left = 0  # data (and padding) of the current member not yet taken
        self._data_size = 0  # data of the current member not yet handed out by data()
        self._pax_global: dict = {}

    def __iter__(self) -> Iterator[Member]:
        while True:
            self._source.skip(self._left)
            self._left = 0
            member = self._next_member()
            if member is None:
                return
            self._left = member.size + _padding(member.size)
            self._data_size = member.size
            yield member

    def data(self) -> Iterator[memoryview]:
        """The current member's bytes, in pieces as they arrived."""
        size = self._data_size
        self._data_size = 0
        for piece in self._source.pieces(size):
            self._left -= len(piece)
            yield piece

    def _next_member(self) -> Optional[Member]:
        overrides: dict = {}
        while True:
            header = self._source.exact(BLOCK, allow_end=True)
            if header is None:  # tar always ends with zero blocks: this stream was cut off
                raise DamagedStream("the stream ended before tar's end-of-archive blocks")
            if header == bytes(BLOCK):
                if self._inflating is not None:  # a damaged gzip stream is damaged however it was cut
                    self._inflating.drain()
                return None
            try:
                info = tarfile.TarInfo.frombuf(header, "utf-8", "surrogateescape")
            except tarfile.HeaderError as exc:
                raise DamagedStream(f"bad tar header: {exc}") from None
            if info.size < 0:  # base-256 fields can be negative; a negative count would never end
                raise DamagedStream(f"bad tar header: negative size {info.size}")
            if info.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
                _bounded(info, MAX_NAME)
                text = self._source.exact(info.size + _padding(info.size))[:info.size]
                key = "name" if info.type == tarfile.GNUTYPE_LONGNAME else "linkname"
                overrides[key] = text.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                continue
            if info.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE):
                _bounded(info, MAX_PAX)
                records = _pax_records(self._source.exact(info.size + _padding(info.size))[:info.size])
                (self._pax_global if info.type == tarfile.XGLTYPE else overrides).update(records)
                continue
            if info.type == tarfile.GNUTYPE_SPARSE:
                raise DamagedStream(f"{info.name}: sparse members are not supported")
            fields = {"name": info.name, "linkname": info.linkname, "size": info.size, "mtime": info.mtime}
            fields.update(self._pax_global)
            fields.update(overrides)
            name = fields["name"].rstrip("/") if info.type == tarfile.DIRTYPE else fields["name"]
            size, mtime = int(fields["size"]), _mtime(fields["mtime"])
            if size < 0:
                raise DamagedStream(f"{name!r}: negative size {size}")
            return Member(name=name, size=size, mtime=mtime, type=info.type, linkname=fields["linkname"])


def _bounded(info: tarfile.TarInfo, limit: int) -> None:
    """A header read whole into memory: its size is the node's word, so it is capped."""
    if info.size > limit:
        raise DamagedStream(f"a {info.type.decode('ascii', 'replace')!r} header of {info.size} bytes "
                            f"(at most {limit} are read)")


def _padding(size: int) -> int:
    return -size % BLOCK


def _mtime(value) -> float:
    """A member's mtime as a finite float (a base-256 field or a pax value can be anything)."""
    try:
        mtime = float(value)
    except OverflowError:
        mtime = math.inf
    if not math.isfinite(mtime):
        raise DamagedStream(f"bad mtime {str(value)[:40]}")
    return mtime


def _pax_records(data: bytes) -> dict:
    """The pax keys we apply ("LENGTH key=value\\n" records), named like TarInfo's fields."""
    found, pos = {}, 0
    while pos < len(data) and data[pos:pos + 1] != b"\0":
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            raise DamagedStream("bad pax header") from None
        if length <= 0 or space < 0:
            raise DamagedStream("bad pax header")
        key, _, value = data[space + 1:pos + length - 1].partition(b"=")
        field = _PAX_KEYS.get(key.decode("ascii", "replace"))
        if field:
            text = value.decode("utf-8", "surrogateescape")
            try:
                found[field] = float(text) if field == "mtime" else int(text) if field == "size" else text
            except ValueError:
                raise DamagedStream(f"bad pax {key!r} value") from None
        pos += length
    return found


class _Bytes:
    """The source's chunks, taken as exact byte counts (copied: headers) or as pieces (not copied)."""

    def __init__(self, read: Callable[[int], bytes]):
        self._read = read
        self._chunk = memoryview(b"")
        self._ended = False

    def _fill(self) -> bool:
        if not self._chunk and not self._ended:
            data = self._read(READ_SIZE)
            if data:
                self._chunk = memoryview(data)
            else:
                self._ended = True
        return bool(self._chunk)

    def peek(self, count: int) -> bytes:
        """The next `count` bytes (fewer at the end), not taken: joins the first chunks if
        they are shorter, so what is seen does not depend on how the stream was cut."""
        while len(self._chunk) < count and not self._ended:
            data = self._read(READ_SIZE)
            if not data:
                self._ended = True
            self._chunk = memoryview(bytes(self._chunk) + data)
        return bytes(self._chunk[:count])

    def pieces(self, count: int) -> Iterator[memoryview]:
        while count:
            if not self._fill():
                raise DamagedStream("the stream ended in the middle of a member")
            piece = self._chunk[:count]
            self._chunk = self._chunk[len(piece):]
            count -= len(piece)
            yield piece

    def exact(self, count: int, allow_end: bool = False) -> Optional[bytes]:
        if allow_end and not self._fill():
            return None
        return b"".join(bytes(piece) for piece in self.pieces(count))

    def skip(self, count: int) -> None:
        for _ in self.pieces(count):
            pass

    def read(self, size: int) -> bytes:  # for _Inflating: whatever is there, up to size
        if not self._fill():
            return b""
        piece = self._chunk[:size]
        self._chunk = self._chunk[len(piece):]
        return piece


class _Inflating:
    """A gzip stream's inflated bytes, at most READ_SIZE per read (a small stream of zeros must
    not inflate into gigabytes at once)."""

    def __init__(self, source: _Bytes):
        self._source = source
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def read(self, size: int) -> bytes:
        while not self._inflate.eof:
            pending = self._inflate.unconsumed_tail
            if not pending:
                pending = self._source.read(READ_SIZE)
                if not pending:
                    raise DamagedStream("the gzip stream ended early")
            try:
                out = self._inflate.decompress(pending, size)
            except zlib.error as exc:
                raise DamagedStream(f"bad gzip stream: {exc}") from None
            if out:
                return out
        return b""

    def drain(self, limit: int = 1 << 30) -> None:
        """Inflate what is left (up to `limit` bytes) so that zlib checks the stream's checksum:
        tar stops at its end-of-archive block, and whether zlib had reached the gzip trailer by then
        would depend on how the stream arrived."""
        while limit > 0:
            out = self.read(min(limit, READ_SIZE))
            if not out:
                return
            limit -= len(out)
