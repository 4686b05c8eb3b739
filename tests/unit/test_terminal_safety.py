"""Terminal safety (issue 16, part 4): remote text shown on the terminal has every control
character and escape sequence shown as a visible escape, and no rich markup of its own.

A rank that prints `ESC ]0;title BEL` retitles the operator's terminal, `ESC [2J` clears it,
and an OSC 52 sequence writes its clipboard: each must print as text (`\\x1b]0;title\\x07`).
Files on disk and `--json` keep what the node sent (JSON escapes control characters itself).
The escape sequences below are the standard ones (ECMA-48; xterm's ctlseqs for OSC 0 and 52).
"""
from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from clusterctl_helpers import examples
from hypothesis import strategies as st
from clusterctl.executor import Event
from clusterctl.models import CheckResult, CheckStatus, Finding, HostResult, HostStatus
from clusterctl.render import Renderer, emit_json, terminal_safe

PROPERTY = settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
# drawing every table twice per example is slow: fewer examples, the escapes above in each
DRAWING = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])

TITLE = "\x1b]0;pwned\x07"  # OSC 0: set the window title
CLEAR = "\x1b[2J"  # CSI 2 J: erase the whole screen
CLIPBOARD = "\x1b]52;c;aGVsbG8=\x07"  # OSC 52: write "hello" to the clipboard
CSI_8BIT = "\x9b31m"  # C1 CSI (U+009B): SGR red, for terminals that take 8-bit controls
DCS = "\x1bPq#0;2;0;0;0\x1b\\"  # DCS (sixel) ... ST
PAYLOAD = f"{TITLE}{CLEAR}{CLIPBOARD}{CSI_8BIT}{DCS}\x07\x7f\x00 [bold red]not red[/bold red] :smile: end\\\\\\"

# What must never reach the terminal raw: C0 but tab and newline, DEL, C1, and lone surrogates
# (which a UTF-8 stream cannot even encode).
RAW_CONTROLS = frozenset(chr(c) for c in (*range(0x20), 0x7f, *range(0x80, 0xa0)) if c not in (0x09, 0x0a))
ANY_TEXT = st.text(st.characters(blacklist_categories=()), max_size=200)
ESCAPES = st.sampled_from([TITLE, CLEAR, CLIPBOARD, CSI_8BIT, DCS, "\x1b", "\r", "\r\n", "\x07", "\x9b", "\udcff",
                           "[bold]", "[/]", "\\", "[link=file:///etc/passwd]x[/link]", ":smile:"])
REMOTE = st.one_of(ANY_TEXT, st.lists(st.one_of(ESCAPES, ANY_TEXT), max_size=12).map("".join))


def raw_controls(text: str) -> set:
    return {c for c in text if c in RAW_CONTROLS or 0xd800 <= ord(c) <= 0xdfff}


# --------------------------------------------------------------------------- the function


@PROPERTY
@given(text=ANY_TEXT)
def test_no_control_character_survives_terminal_safe_in_any_text(text):
    assert not raw_controls(terminal_safe(text))


@PROPERTY
@given(data=st.binary(max_size=300))
@example(data=b"\x9b2J \xc2\x9b \xff\xfe \x1b]0;t\x07")
def test_no_control_character_survives_terminal_safe_in_any_bytes(data):
    assert not raw_controls(terminal_safe(data))


@PROPERTY
@given(text=st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=200))
def test_printable_text_tabs_and_newlines_pass_unchanged(text):
    assert terminal_safe(text + "\tx\n") == text + "\tx\n"


@PROPERTY
@given(text=ANY_TEXT)
def test_safe_text_is_safe_already(text):
    assert terminal_safe(terminal_safe(text)) == terminal_safe(text)


@pytest.mark.parametrize("raw, shown", [
    (TITLE, "\\x1b]0;pwned\\x07"),
    (CLEAR, "\\x1b[2J"),
    (CLIPBOARD, "\\x1b]52;c;aGVsbG8=\\x07"),
    (CSI_8BIT, "\\x9b31m"),
    (DCS, "\\x1bPq#0;2;0;0;0\\x1b\\"),
    ("\x1b_app\x1b\\ \x1b^pm\x1b\\ \x1bXsos\x1b\\", "\\x1b_app\\x1b\\ \\x1b^pm\\x1b\\ \\x1bXsos\\x1b\\"),  # APC, PM, SOS
    ("lone \x1b", "lone \\x1b"),
    ("bell\x07 del\x7f nul\x00 bs\x08", "bell\\x07 del\\x7f nul\\x00 bs\\x08"),
    ("tab\tand\nnewline", "tab\tand\nnewline"),
    ("crlf line\r\nnext\r\n", "crlf line\nnext\n"),
    ("  10%|#   |\r  20%|##  |", "  10%|#   |\\r  20%|##  |"),
    (b"8-bit CSI \x9b2J, as UTF-8 \xc2\x9b2J, not UTF-8 \xff", "8-bit CSI \\x9b2J, as UTF-8 \\x9b2J, not UTF-8 \\xff"),
    ("surrogate-escaped byte \udc9b", "surrogate-escaped byte \\x9b"),
    (None, ""),
])
def test_each_kind_of_control_is_shown_as_a_visible_escape(raw, shown):
    assert terminal_safe(raw) == shown


# --------------------------------------------------------------------------- every rendering path


def _record(text: str) -> dict:
    return {"run_id": "r1", "exit_code": 1, "duration_s": 1.0, "outputs": text,
            "topology": [{"host": text, "ranks": [0, 1]}], "nodes": {text: {"lost": False, "exit_code": 1, "run_dir": text}},
            "first_failure": {"host": text, "rank": 1, "log_tail": [text, text],
                              "diagnosis": [{"cause": text, "evidence": text, "fix": text}]}}


def _topology(text: str) -> SimpleNamespace:
    """What `run --plan` draws of a Topology; the interface name and address come from the node."""
    node = SimpleNamespace(node_rank=0, host=SimpleNamespace(name=text), ranks=range(0, 2), gpu_ids=(0, 1),
                           nic=text, local_addr=text)
    return SimpleNamespace(nnodes=1, nproc_per_node=2, world_size=2, master_addr=text, port=29500, nodes=(node,),
                           notes=(text,))


def _draw_everything(renderer: Renderer, text: str) -> None:
    """Every Renderer path that can carry remote text, each given `text` where a node's words go."""
    renderer.on_event(Event("task", text=text, data={"hosts": [text]}))
    renderer.on_event(Event("line", text, text, {"stream": "stdout"}))
    renderer.on_event(Event("line", text, text, {"stream": "stderr", "prefix": f"[{text} r0]"}))
    renderer.on_event(Event("note", text, text))
    renderer.on_event(Event("error", text, text))
    failed = HostResult(text, HostStatus.FAILED, text, 1, text, text, log_path=text, data={"image": text, "gpus": text})
    renderer.on_event(Event("host_done", text, data={"result": failed}))
    renderer.on_event(Event("status", data={"nodes": {text: {"state": text, "ranks": text, "last": text}}}))
    renderer.stop_live()
    renderer.hosts_table(text, {text: failed}, extra_columns=("image", "gpus"))
    renderer.checks_table([CheckResult(text, text, CheckStatus.FAIL, text, text),
                           CheckResult(None, "gpus", CheckStatus.PASS, text)])
    renderer.findings([Finding(text, text, text, text, 3), Finding("unknown", text, text)], title=text)
    renderer.findings([], title=text)
    renderer.run_summary(_record(text))
    renderer.plan(_topology(text), {text: {"env": {"NCCL_SOCKET_IFNAME": text}, "command": text}})
    renderer.message(text, "yellow")
    renderer.message(text)
    renderer.error(text)


def _plain(stream) -> Renderer:
    return Renderer(stream=stream)  # not a terminal: rich writes no escape sequence of its own


def _terminal(stream) -> Renderer:
    from rich.console import Console

    renderer = Renderer(stream=stream)
    renderer.console = Console(file=stream, force_terminal=True, color_system="truecolor", width=100,
                               highlight=False, soft_wrap=True)
    return renderer


@DRAWING
@given(text=REMOTE)
@example(text=PAYLOAD)
def test_no_raw_control_reaches_the_output_stream_from_any_rendering_path(text):
    stream = io.StringIO()
    _draw_everything(_plain(stream), text)
    assert not raw_controls(stream.getvalue())


@DRAWING
@given(text=REMOTE)
@example(text=PAYLOAD)
def test_on_a_color_terminal_remote_text_draws_exactly_as_its_escaped_form(text):
    """rich writes its own SGR and cursor sequences there; the node's text adds none of its own:
    drawing the raw text gives the very bytes that drawing the already-escaped text gives."""
    assume(not text.endswith("\r"))  # a table's detail appends "\nlog: ...": that CR ends a CRLF line
    raw, escaped = io.StringIO(), io.StringIO()
    _draw_everything(_terminal(raw), text)
    _draw_everything(_terminal(escaped), terminal_safe(text))
    out = raw.getvalue()
    assert out == escaped.getvalue()
    assert "\x07" not in out and "\x1b]" not in out and "\x1bP" not in out
    assert not {chr(c) for c in range(0x80, 0xa0)} & set(out)


def test_the_concrete_payload_prints_visibly_escaped_with_its_markup_literal():
    stream = io.StringIO()
    _plain(stream).on_event(Event("line", "node-a", PAYLOAD, {"prefix": "[node-a r3]"}))
    assert stream.getvalue() == ("[node-a r3] \\x1b]0;pwned\\x07\\x1b[2J\\x1b]52;c;aGVsbG8=\\x07\\x9b31m"
                                 "\\x1bPq#0;2;0;0;0\\x1b\\\\x07\\x7f\\x00 [bold red]not red[/bold red] :smile: end\\\\\\\n")


def test_a_pull_progress_bar_named_by_the_node_draws_no_raw_control():
    stream = io.StringIO()
    renderer = _terminal(stream)
    renderer.on_event(Event("progress", "n", data={"key": "k", "description": f"pull [bold]{TITLE}{CLEAR}",
                                                   "completed": 1, "total": 2}))
    renderer.stop_progress()
    out = stream.getvalue()
    assert "\x07" not in out and "\x1b]" not in out and CLEAR not in out and "\\x1b[2J" in out


def test_json_output_stays_valid_json_for_controls_invalid_utf8_and_non_finite_numbers():
    stream = io.StringIO()
    emit_json({"ok": False, "stdout": PAYLOAD + "\udcff", "bytes": b"\x9b\xff", "nan": float("nan"),
               "inf": [float("inf")]}, stream)
    text = stream.getvalue()
    assert text.isascii() and not raw_controls(text.replace("\n", ""))
    document = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert document["stdout"] == PAYLOAD + "\udcff" and document["nan"] is None and document["inf"] == [None]
