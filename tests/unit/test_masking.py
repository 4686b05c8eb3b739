"""The one masking (clusterctl/ground/masking.py, issue 47): a secret never appears in what leaves the
process, whatever encodings it went through before the final text was masked."""
from __future__ import annotations

import io
import json
from pathlib import Path

from hypothesis import assume, given, strategies as st

from clusterctl.ground.masking import ENCODINGS, OUTBOUND, Masker, written_forms
from clusterctl.models import MASK
from clusterctl.observe.messages import Message, payload
from clusterctl.render import Renderer, emit_json

PAIRS = [(f"{a} then {b}", first, then) for a, first in ENCODINGS for b, then in ENCODINGS]


@given(secret=st.text(min_size=4, max_size=24), before=st.text(max_size=12), after=st.text(max_size=12),
       pair=st.sampled_from(PAIRS))
def test_for_any_secret_and_any_two_encodings_the_masked_final_text_holds_no_form_of_it(secret, before, after, pair):
    assume("*" not in secret)  # the mask's own character: a secret spelled with it can spell the mask
    _, first, then = pair
    encoded = then(first(before + secret + after))
    masked = Masker([secret])(encoded)
    assert then(first(secret)) not in masked and secret not in masked


@given(secret=st.text(st.characters(blacklist_categories=("Cs",)), min_size=4, max_size=24),
       key=st.text(min_size=1, max_size=8))
def test_a_masked_json_document_stays_json_with_the_secret_nowhere_in_it(secret, key):
    assume("*" not in secret)
    assume(secret not in "[1, true, null]")  # a JSON keyword stays (the document stays JSON): the test below
    document = {key: f"token {secret} end", "n": [1, True, None], secret: secret}
    for ascii_only in (True, False):
        text = Masker([secret]).json_text(json.dumps(document, ensure_ascii=ascii_only))
        parsed = json.loads(text)  # syntax kept, whatever the secret spells
        assert not any(secret in string for string in _strings(parsed)), (secret, key, text)


def _strings(value):
    """Every key and string value of a parsed JSON document, decoded (a key "\\x00" is written \\u0000: the
    digits of its escape are no secret's)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


def test_a_secret_spelling_part_of_an_escape_leaves_the_document_json():
    """Found by hypothesis: the secret `0000` with a key NUL (written `\\u0000`) cut the escape in two."""
    document = {"\x00": "token 0000 end", "0000": "0000", "nl": "a\nnnnn"}
    for ascii_only in (True, False):
        for secret in ("0000", "nnnn", "u000"):
            parsed = json.loads(Masker([secret]).json_text(json.dumps(document, ensure_ascii=ascii_only)))
            assert not any(secret in string for string in _strings(parsed)), (secret, parsed)
    assert Masker(["0000"]).json_text('{"a": "\\u00e9 x"}') == '{"a": "\\u00e9 x"}'  # nothing to mask: as written


def test_a_json_keyword_as_a_secret_leaves_the_document_json():
    text = Masker(["true", "null"]).json_text(json.dumps({"a": True, "b": None, "c": "true story"}))
    assert json.loads(text) == {"a": True, "b": None, "c": "*** story"}


def test_a_slack_message_escapes_before_it_is_masked_and_still_loses_the_secret():
    secret = "p<ss&w>rd"
    message = Message("failure", "r1", "lab", ("n1",), "failed", 1.0, f"failed: token {secret}",
                      detail={"evidence": f"key={secret}"})
    body = Masker([secret])(json.dumps(payload(message, "slack")))
    assert "p&lt;ss&amp;w&gt;rd" not in body and secret not in body and MASK in body


def test_everything_written_out_is_masked_with_the_secrets_the_process_was_given(tmp_path):
    from clusterctl.state import State

    OUTBOUND.add(["outbound-secret-<&>"])
    state = State(tmp_path)
    state.write_json(tmp_path / "facts.json", {"evidence": "leaked outbound-secret-<&> here"})
    assert "outbound-secret" not in (tmp_path / "facts.json").read_text()
    out = io.StringIO()
    emit_json({"a": "x outbound-secret-<&> y"}, out)
    assert "outbound-secret" not in out.getvalue() and json.loads(out.getvalue()) == {"a": "x *** y"}
    screen = io.StringIO()
    Renderer(stream=screen).message("said outbound-secret-<&>")
    assert "outbound-secret" not in screen.getvalue() and MASK in screen.getvalue()


def test_each_encoding_alone_is_among_the_written_forms():
    forms = written_forms(["a/b<c>&'d\u2028é"])
    for _, encode in ENCODINGS:
        assert encode("a/b<c>&'d\u2028é") in forms


def test_a_detached_healing_runs_failed_attempt_evidence_reaches_neither_run_json_nor_the_report(tmp_path):
    """Issue 47: the supervisor's attempts (heal/detached.attempts_of) carry a rank's log line with a secret;
    once the run's inventory is loaded, the record written and the report drawn from it hold no form of it."""
    from clusterctl.ground.records import RunStore
    from clusterctl.ground.run_record import RunRecord
    from clusterctl.inventory.load import load_inventory
    from clusterctl.observe.report_data import load
    from clusterctl.observe.report_html import render
    from clusterctl.state import State

    secret = "tok&<en>-9f8e7d"
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("name: t\nhosts:\n  - {name: n1, connection: local}\njob:\n  command: [x.py]\n  env:\n"
                         f"    API_TOKEN: {{value: '{secret}', secret: true}}\n")
    load_inventory(inventory)
    record = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "report" / "healed-killed-rank"
                         / "run.json").read_text())  # a real record of a run that healed itself
    evidence = record["attempts"][0]["first_failure"]["diagnosis"][0]
    evidence["evidence"] = f"bad token {secret} " + evidence["evidence"]
    record.update(run_id="r1", inventory=str(inventory))
    store = State(tmp_path / "state")
    RunStore(store).write(RunRecord.from_json(record, "r1"))
    written = (tmp_path / "state" / "runs" / "r1" / "run.json").read_text()
    html = render(load(store, "r1", tmp_path / "r.html"))
    for text in (written, OUTBOUND(html)):
        assert not any(form in text for form in written_forms([secret])), text[:400]
