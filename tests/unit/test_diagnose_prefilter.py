"""The diagnosis' pre-filters find what the plain search finds, only faster (issue 51's speed goal: a 10 MB log whose
lines are all distinct took 3.8 s; the pre-filters bring it under 1 s, bench/diagnose_bench.py measures it).

Three filters, each checked against the corpus' real logs and with properties over generated text:
- a signal's required literals (`textmatch.required_literals`), now also from a required group's alternatives
  (`(?:exit code|return code)\\s*-9`), so no signal of the rule table is tried on every line;
- the evidence parsers' gate words (`textmatch.gated`): extract() runs a parser only on lines holding one, found
  for the whole log at once;
- a log-wide pattern searched around its literals' hits (`textmatch.in_lowered`)."""
from __future__ import annotations

import re

import pytest
from clusterctl_helpers import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from clusterctl.diagnose import corpus, evidence, matching
from clusterctl.diagnose.logformat import parse_lines
from clusterctl.diagnose.rules import HOST_MEMORY_SHORT, OOM_RECORD, RULES
from clusterctl.diagnose.textmatch import compiled, in_lowered, lines_holding, required_literals

ENTRIES = corpus.load()
LOG_WIDE = sorted({p for rule in RULES for s in rule.signals for p in (s.requires, s.unless_log) if p}
                  | {OOM_RECORD, HOST_MEMORY_SHORT})


def test_every_signal_of_the_rule_table_has_literals_to_filter_on():
    # a signal without literals is searched on every line of every log: 18 of them were 40 % of a big log's time
    assert matching.ALWAYS_TRIED == ()


def test_a_required_groups_alternatives_are_the_literals():
    pattern = r"(?:exitcode|exit code|return code)\s*[:=]?\s*-9\b"
    assert required_literals(pattern) == ("exitcode", "exit code", "return code")


@pytest.mark.parametrize("pattern", [r"(?:abc|defg)?xy", r"(?:abc|defg)*xy", r"(?:abc|defg){0,2}xy",
                                     r"(?!abcd)xy", r"(?<!abcd)xy", r"(?i)xy", r"(?:ab|cd)xy"])
def test_optional_negative_and_short_groups_give_no_literals(pattern):
    assert required_literals(pattern) is None


def test_a_groups_literals_through_a_named_group_and_a_plus():
    assert required_literals(r"(?P<what>oom-kill|oom_reaper)+ \d") == ("oom-kill", "oom_reaper")


PIECES = st.sampled_from(["abc", "xyz", "ab", "q", r"\d", r"\s", r"\W", ".", "[a-c]", "[^x]", "-", "\\n"])


@st.composite
def patterns(draw, depth=0):
    """Alternatives of sequences of pieces and (possibly optional) groups: the shapes the rule table is made of."""
    alternatives = []
    for _ in range(draw(st.integers(1, 3))):
        parts = []
        for _ in range(draw(st.integers(1, 4))):
            if depth < 2 and draw(st.booleans()):
                inner = draw(patterns(depth + 1))
                opener = draw(st.sampled_from(["(?:", "(", "(?P<g%d>" % len(parts), "(?=", "(?!"]))
                # an unbounded repeat of a group that repeats inside (`(?:.*)+`) backtracks exponentially on a text
                # it fails to match (a unit run hung in re.search on a generated one): none here
                repeats = ["", "", "?", "{0,2}", "{2}"] + ([] if re.search(r"[*+]", inner) else ["*", "+"])
                parts.append(opener + inner + ")" + draw(st.sampled_from(repeats)))
            else:
                parts.append(draw(PIECES) + draw(st.sampled_from(["", "", "", "?", "*", "+"])))
        alternatives.append("".join(parts))
    return "|".join(alternatives) if depth else _at_most_two_unbounded("|".join(alternatives))


def _at_most_two_unbounded(pattern: str) -> str:
    """The third and later `*`/`+` bounded (`{0,2}`/`{1,2}`): k unbounded repeats in a row cost up to n^k steps on a
    text they fail to match; two keep a search of these texts (up to ~250 characters) in milliseconds."""
    count = 0

    def bound(match):
        nonlocal count
        count += 1
        return match.group(0) if count <= 2 else {"*": "{0,2}", "+": "{1,2}"}[match.group(0)]
    return re.sub(r"[*+]", bound, pattern)


TEXTS = st.text(alphabet="abcxyzq-1 \n", max_size=40)


@settings(max_examples=examples(600), deadline=None)
@given(patterns(), TEXTS)
def test_a_match_always_holds_one_of_the_literals(pattern, text):
    try:
        regex = re.compile(pattern, re.IGNORECASE)
    except re.error:
        assume(False)
    literals = required_literals(pattern)
    if literals is not None and regex.search(text):
        assert any(literal in text.lower() for literal in literals), (pattern, text, literals)


@settings(max_examples=examples(600), deadline=None)
@given(patterns(), st.lists(TEXTS, min_size=1, max_size=6))
def test_searching_around_the_literals_finds_what_the_whole_search_finds(pattern, lines):
    try:
        re.compile(pattern, re.IGNORECASE)
    except re.error:
        assume(False)
    lowered = "\n".join(lines).lower()
    assert in_lowered(pattern, lowered) == (compiled(pattern).search(lowered) is not None), (pattern, lowered)


def test_the_log_wide_patterns_agree_with_the_whole_search_on_every_corpus_log():
    for entry in ENTRIES:
        lowered = "\n".join(line.text for line in parse_lines(entry.text)[0]).lower()
        for pattern in LOG_WIDE:
            assert in_lowered(pattern, lowered) == (compiled(pattern).search(lowered) is not None), \
                (entry.path, pattern)


def test_extract_finds_the_records_every_parser_finds_on_every_line():
    # extract() finds the gate words of the whole log at once and skips the parsers a line holds none of; the
    # parsers themselves (their wrappers check their gate words) run on every line here
    for entry in ENTRIES:
        lines = parse_lines(entry.text)[0]
        plain, last_frame = [], ""
        for line in lines:
            frame = evidence._FRAME.match(line.text[:evidence.MAX_LINE]) \
                if line.text.lstrip().startswith("File ") else None
            if frame:
                last_frame = evidence.frame_module(frame.group("path"))
                continue
            lowered = line.text[:evidence.MAX_LINE].lower()
            for parser in evidence.PER_LINE:
                plain.extend(parser(line, lowered))
            if any(word in lowered for word in evidence.EXCEPTION_GATE):
                found = evidence.py_exception(line, last_frame)
                if found:
                    plain.extend(found)
                    last_frame = ""
        assert evidence.extract(lines) == plain, entry.path


WORDS = st.lists(st.text(alphabet="abc: ", min_size=1, max_size=4), min_size=1, max_size=12)


@settings(max_examples=examples(400), deadline=None)
@given(st.lists(st.text(alphabet="abc: x", max_size=12), min_size=1, max_size=30), WORDS)
def test_the_lines_holding_each_word_are_those_a_per_line_test_finds(texts, words):
    # a word is looked for on its shorter parent's lines when the parent is rare: the same answer as a test per line
    naive = {index: {w for w in words if w in text} for index, text in enumerate(texts)}
    assert lines_holding(texts, words) == {index: found for index, found in naive.items() if found}
