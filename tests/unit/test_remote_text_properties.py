"""Nothing a node prints can crash clusterctl: every parser of remote text, fed arbitrary text
and bytes (huge lines, NULs, invalid UTF-8, digits int() refuses), returns a value or raises
only its own documented error.

Parsers covered: the tar stream reader and the unpacking of collect-logs, the survey, listing,
links and `docker inspect` readers of collect/fetch.py, the agent's poll, torchrun's rank
prefix, the stale-rank scan, the Docker engine's replies, nccl-test's records and report.
"""
from __future__ import annotations

import gzip
import io
import json
import tarfile
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from clusterctl_helpers import examples
from hypothesis import strategies as st

from clusterctl.collect import fetch
from clusterctl.collect.tarstream import DamagedStream, TarStream
from clusterctl.collect.unpack import extract_stream
from clusterctl.plan.wrapper import parse_poll
from clusterctl.plan.torchrun import RANK_PREFIX_RE
from clusterctl.registry.docker_replies import memlock_limit, pull_failure, pull_status, stored_config
from clusterctl.modules.process import parse_scan
from clusterctl.nccltest import plan as nccl
from clusterctl.transport.base import BATCH_MARK

FAST = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
DEEP = settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Any code point, lone surrogates included (what surrogateescape makes of undecodable bytes).
ANY_CHAR = st.characters(blacklist_categories=())
ANY_TEXT = st.text(ANY_CHAR, max_size=300)
# Lines made of what trips parsers: separators, digits of other scripts, huge numbers, NULs.
TRICKY = st.sampled_from(["\t", " ", "\n", "\r", "\0", "exit", "ours", "gpu", "port", "link", "\x1b[2J", "²",
                          "٣", "-1", "1e999", "nan", "9" * 5000, "[", "]", "rank", "{", "}", "\ufffd", "\udcff"])
TRICKY_TEXT = st.lists(st.one_of(TRICKY, st.text(ANY_CHAR, max_size=8)), max_size=60).map("".join)
REMOTE_TEXT = st.one_of(ANY_TEXT, TRICKY_TEXT, st.binary(max_size=400).map(lambda b: b.decode("utf-8", "replace")))
HUGE_LINE = "x" * (4 << 20) + "\t" + "9" * 5000 + "\0\n"
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(ANY_CHAR, max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=20)


# --------------------------------------------------------------------------- tar streams


def _real_tar(fmt: int, compress: bool = False) -> bytes:
    """A small archive in one of tar's real formats, names long enough for GNU longname/pax."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, data in (("logs/run/a.log", b"hello\n" * 50), ("d" * 110 + "/" + "n" * 120 + ".txt", b"x" * 700),
                           ("caf\u00e9/\u732b.txt", b""), ("logs/run/b.bin", bytes(range(256)) * 3)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
        directory = tarfile.TarInfo("logs/run/sub")
        directory.type = tarfile.DIRTYPE
        tar.addfile(directory)
    data = buffer.getvalue()
    return gzip.compress(data, mtime=0) if compress else data


REAL_TARS = [_real_tar(tarfile.GNU_FORMAT), _real_tar(tarfile.PAX_FORMAT),
             _real_tar(tarfile.GNU_FORMAT, compress=True), _real_tar(tarfile.PAX_FORMAT, compress=True)]


@st.composite
def damaged_tars(draw) -> bytes:
    """A real archive with bytes overwritten, a piece cut out, garbage appended, or cut short."""
    data = bytearray(draw(st.sampled_from(REAL_TARS)))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.sampled_from([0x00, 0xff, 0x80, 0x20, 0x30, 0x37, 0x0a, draw(st.integers(0, 255))]))
    if draw(st.booleans()):
        start = draw(st.integers(0, len(data)))
        del data[start:start + draw(st.integers(0, 1024))]
    if draw(st.booleans()):
        data += draw(st.binary(max_size=600))
    return bytes(data[:draw(st.integers(0, len(data)))] if draw(st.booleans()) else data)


class _Chunked:
    """Hands out the stream in the given piece sizes (then whatever is asked), like a channel."""

    def __init__(self, data: bytes, steps: list[int]):
        self.data, self.steps, self.pos = data, list(steps), 0

    def read(self, size: int) -> bytes:
        step = min(size, self.steps.pop(0) if self.steps else size)
        out = self.data[self.pos:self.pos + step]
        self.pos += len(out)
        return out


def _read_all(data: bytes, steps: list[int], take: list[bool]):
    """The members of a stream (and the data of those `take` says), or the DamagedStream."""
    found = []
    try:
        tar = TarStream(_Chunked(data, steps).read, compressed=True)
        for index, member in enumerate(tar):
            body = b"".join(bytes(piece) for piece in tar.data()) if take[index % len(take)] else None
            found.append((member.name, member.size, member.mtime, member.type, member.linkname, body))
    except DamagedStream as exc:
        return found, str(exc)
    return found, None


STEPS = st.lists(st.integers(1, 70_000), max_size=12)
TAKE = st.lists(st.booleans(), min_size=1, max_size=5)


@DEEP
@given(data=st.one_of(st.binary(max_size=3000), damaged_tars()), steps=STEPS, take=TAKE)
@example(data=b"\x1f", steps=[1], take=[True])
@example(data=REAL_TARS[2], steps=[1, 1, 1], take=[True])
def test_the_tar_reader_raises_only_damaged_stream_for_any_bytes_cut_anywhere(data, steps, take):
    _read_all(data, steps, take)  # any other exception fails the test


@DEEP
@given(data=damaged_tars(), steps=STEPS, take=TAKE)
def test_the_tar_reader_sees_the_same_archive_however_the_stream_is_cut(data, steps, take):
    (cut, cut_damage), (whole, whole_damage) = _read_all(data, steps, take), _read_all(data, [len(data) + 1], take)
    assert (cut_damage is None) == (whole_damage is None)
    # zlib finds a damaged gzip stream's bad checksum at its end, or the tar inside reads wrong
    # first: how many members a damaged gzip stream gives depends on the reads, nothing else does
    if whole_damage is None or data[:2] != b"\x1f\x8b":
        assert cut == whole


def _header(name: bytes, size_field: bytes, mtime_field: bytes = b"0" * 11 + b"\0", kind: bytes = b"0") -> bytes:
    """One ustar header with raw numeric fields (base-256 ones included) and a right checksum."""
    block = bytearray(512)
    block[0:len(name)] = name
    block[100:108] = b"0000644\0"
    block[124:136] = size_field
    block[136:148] = mtime_field
    block[148:156] = b" " * 8
    block[156:157] = kind
    block[257:263] = b"ustar\0"
    block[263:265] = b"00"
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def test_a_negative_base256_size_is_a_damaged_stream_not_an_endless_loop():
    minus_one = b"\xff" * 12
    stream = _header(b"a.txt", minus_one) + bytes(1024)
    found, damage = _read_all(stream, [3], [True])
    assert found == [] and "negative size" in damage


def test_an_mtime_too_large_for_a_float_or_a_clock_is_refused_or_kept_out_of_the_file(tmp_path):
    huge = b"\x80" + b"\xff" * 11  # base-256: 2**88 - 1 seconds
    stream = _header(b"a.txt", b"%011o\0" % 3, huge) + b"abc".ljust(512, b"\0") + bytes(1024)
    written, refused = extract_stream(io.BytesIO(stream), tmp_path, set())
    assert [p.read_bytes() for p in written] == [b"abc"] and refused == []
    pax = _pax_member({"mtime": "1e999"}, b"a.txt", b"abc")
    assert "bad mtime" in _read_all(pax, [len(pax)], [True])[1]


def _pax_member(records: dict, name: bytes, data: bytes) -> bytes:
    body = b"".join(_pax_record(k.encode(), v.encode("utf-8", "surrogateescape")) for k, v in records.items())
    head = _header(b"PaxHeader", b"%011o\0" % len(body), kind=b"x") + body.ljust(-(-len(body) // 512) * 512, b"\0")
    return head + _header(name, b"%011o\0" % len(data)) + data.ljust(512, b"\0") + bytes(1024)


def _pax_record(key: bytes, value: bytes) -> bytes:
    """A pax record: `LENGTH key=value` and a newline, LENGTH counting its own digits."""
    rest = b" " + key + b"=" + value + b"\n"
    length = len(rest) + 1
    while len(str(length)) + len(rest) != length:
        length = len(str(length)) + len(rest)
    return str(length).encode() + rest


def test_a_gzip_magic_split_over_two_reads_is_still_inflated():
    data = REAL_TARS[2]
    assert _read_all(data, [1, 1, 5], [True]) == _read_all(data, [len(data)], [True])
    assert _read_all(data, [1], [True])[1] is None


# --------------------------------------------------------------------------- unpacking


@FAST
@given(data=st.one_of(damaged_tars(), st.binary(max_size=2000)), secret=st.sampled_from(["", "hello", "xx"]))
def test_unpacking_any_stream_writes_only_inside_dest_and_raises_only_damaged_stream(data, secret):
    with tempfile.TemporaryDirectory() as top:
        dest = Path(top) / "dest"
        dest.mkdir()
        try:
            written, refused = extract_stream(io.BytesIO(data), dest, {secret} if secret else set())
        except DamagedStream:
            written, refused = [], []
        assert all(dest.resolve() in path.resolve().parents for path in written)
        assert [p.name for p in Path(top).iterdir()] == ["dest"]  # nothing beside dest
        assert all(isinstance(reason, str) for reason in refused)


def test_members_whose_names_clash_or_hold_a_nul_are_refused_not_fatal(tmp_path):
    stream = (_header(b"a", b"%011o\0" % 1) + b"1".ljust(512, b"\0")
              + _header(b"a/b", b"%011o\0" % 1) + b"2".ljust(512, b"\0")  # "a" is a file: no directory a/
              + _header(b"c/", b"%011o\0" % 0, kind=b"5") + _header(b"c", b"%011o\0" % 1) + b"3".ljust(512, b"\0")
              + _header(b".", b"%011o\0" % 1) + b"4".ljust(512, b"\0")  # a file that is dest itself
              + _pax_member({"path": "x\0y"}, b"x", b"5"))
    written, refused = extract_stream(io.BytesIO(stream), tmp_path, set())
    assert [p.name for p in written] == ["a"] and len(refused) == 4
    assert [p.name for p in tmp_path.parent.iterdir() if p.name.startswith(tmp_path.name)] == [tmp_path.name]


# --------------------------------------------------------------------------- collect's readers


@FAST
@given(stdout=REMOTE_TEXT, listing=REMOTE_TEXT)
@example(stdout="", listing=HUGE_LINE)
@example(stdout="", listing='{"more": {"link": 5, "x": true, "y": -1}}\n{"cut": 3, "why": "bound"}\n{"more": []}')
def test_the_survey_and_the_archive_report_of_any_output_parse_without_raising(stdout, listing):
    fetch.parse_survey(stdout)
    fetch.parse_survey(f"{BATCH_MARK}clusterctl-run-dirs\n{stdout}\n")
    report = fetch.parse_report(listing)
    assert all(isinstance(f.size, int) and f.size >= 0 and isinstance(f.mtime, float) for f in report.sent)
    assert all(isinstance(count, int) and count > 0 for _, count in report.more) and len(report.cut) <= 300
    fetch.archive_summary(report)
    fetch.archive_details(report)
    fetch.mask_env_listing(listing)


@FAST
@given(inspected=st.one_of(REMOTE_TEXT, JSON_VALUES.map(json.dumps)))
@example(inspected="[" * 100_000)
@example(inspected='[{"Config": {"Env": 5}}]')
@example(inspected='[{"Config": {"Env": "A=1"}}]')
def test_env_txt_comes_from_any_docker_inspect_output_or_is_left_out(inspected):
    sections = fetch.with_container_env({"docker-inspect.json": inspected})
    assert set(sections) <= {"docker-inspect.json", "env.txt"}
    assert isinstance(sections.get("env.txt", ""), str)


# --------------------------------------------------------------------------- the run's readers


@FAST
@given(stdout=REMOTE_TEXT)
@example(stdout="exit " + "9" * 5000)
@example(stdout="exit \u00b2")
@example(stdout=HUGE_LINE)
def test_the_agent_poll_reads_any_output_as_running_or_an_exit_code(stdout):
    code = parse_poll(stdout)
    assert code is None or isinstance(code, int)


@FAST
@given(line=REMOTE_TEXT)
@example(line="[node rank" + "1" * 5000 + "]: boom")
@example(line="[node rank\u0663]: arabic-indic digit")
def test_every_rank_prefix_that_matches_names_a_rank_int_can_read(line):
    match = RANK_PREFIX_RE.match(line)
    if match:
        assert 0 <= int(match.group("rank")) < 10**9
        assert line[match.end():] in line


def test_a_line_that_only_looks_like_a_rank_prefix_is_shown_unprefixed():
    assert RANK_PREFIX_RE.match("[node rank" + "1" * 5000 + "]: boom") is None
    assert RANK_PREFIX_RE.match("[node-a rank12]: loss 0.1").group("host", "rank") == ("node-a", "12")


@FAST
@given(stdout=REMOTE_TEXT)
@example(stdout="ours \u00b2 root python train.py")
@example(stdout="gpu 99999999999999999999999 root x\nport abc root y")
def test_the_stale_rank_scan_of_any_output_keeps_only_lines_with_a_pid(stdout):
    found = parse_scan(stdout)
    assert set(found) == {"ours", "gpu", "port"}
    assert all(isinstance(p["pid"], int) for entries in found.values() for p in entries)


# --------------------------------------------------------------------------- the Docker engine's replies


@FAST
@given(text=REMOTE_TEXT)
@example(text="\u00b2")
@example(text="9" * 5000)
def test_the_memlock_reply_is_unlimited_or_a_byte_count_docker_accepts(text):
    limit = memlock_limit(text)
    assert limit == -1 or 0 <= limit < 2**63


@FAST
@given(labels=st.one_of(JSON_VALUES, st.dictionaries(st.just("clusterctl.config"), st.one_of(REMOTE_TEXT, JSON_VALUES))))
@example(labels={"clusterctl.config": "[" * 100_000})
def test_a_container_label_that_is_not_our_config_reads_as_no_config(labels):
    assert isinstance(stored_config(labels), dict)


@FAST
@given(statuses=st.lists(JSON_VALUES, max_size=8))
@example(statuses=[{"id": "abc", "progressDetail": {"current": "1", "total": 10}}, {"id": "abc", "progressDetail": 3}])
def test_pull_stream_messages_of_any_shape_give_an_error_or_numeric_progress(statuses):
    layers: dict = {}
    for status in statuses:
        error = pull_status(status, layers)
        assert error is None or isinstance(error, str)
    assert all(isinstance(c, int) and isinstance(t, int) and t > 0 for c, t in layers.values())


@FAST
@given(message=REMOTE_TEXT, ref=st.text(max_size=40))
def test_a_pull_failure_of_any_wording_is_described(message, ref):
    assert pull_failure(ref, message).startswith(f"pull of {ref} failed")


# --------------------------------------------------------------------------- nccl-test's records


RECORDS = st.fixed_dictionaries(
    {"stage": st.sampled_from(["plan", "connect", "small", "full", "done", "error"])},
    optional={"size": JSON_VALUES, "sizes": JSON_VALUES, "time_us": JSON_VALUES, "busbw_gbps": JSON_VALUES,
              "algbw_gbps": JSON_VALUES, "correct": JSON_VALUES, "ok": JSON_VALUES, "world_size": JSON_VALUES,
              "error": JSON_VALUES, "init_s": JSON_VALUES})


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(RECORDS, max_size=6), noise=st.lists(REMOTE_TEXT, max_size=4), world=st.integers(1, 4))
@example(records=[{"stage": "error"}], noise=[], world=2)
@example(records=[{"stage": "small", "size": "8"}], noise=["NCCLTEST " + "[" * 100_000], world=2)
def test_nccl_test_reports_whatever_rank_zero_printed(records, noise, world):
    lines = [f"[n rank0]: NCCLTEST {json.dumps(r)}" for r in records] + noise
    parsed = nccl.parse_records(lines)
    link = nccl.link_class("nccl", world, 1, world)
    report = nccl.summarize(parsed, link)
    nccl.table_lines(report)
    nccl.stop_note(report)
    json.dumps(report)
