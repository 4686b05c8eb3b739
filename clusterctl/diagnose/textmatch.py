"""Pattern helpers shared by the rule table and the engine: compiling, the cheap literal
pre-filter, fix templates, and the line classes that are not causes (cascades, lost peers,
suspicious lines, values quoted by fixes). Pure functions over text."""
from __future__ import annotations

import re
from bisect import bisect_right
from functools import lru_cache, wraps
from typing import Optional, Pattern

UNKNOWN_FIX = ("no known failure signature matched: start from the quoted lines; rerun with NCCL_DEBUG=INFO "
               "and TORCH_DISTRIBUTED_DEBUG=DETAIL in job.env, and `clusterctl collect-logs` to add node "
               "diagnostics")

# NCCL's fixed description of its system error class (printed with every one; torch quotes it): the calls it lists
# are examples, not a transport that failed nor a sign of a network (after batch 12: read as a socket failure)
NCCL_CLASS_DESCRIPTION = re.compile(r"System call \(socket, malloc, munmap, etc\) failed\.?", re.IGNORECASE)


@lru_cache(maxsize=None)
def compiled(pattern: str) -> Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def compile_all(patterns) -> tuple[Pattern[str], ...]:
    return tuple(compiled(p) for p in patterns)


def compile_kinds(pairs) -> tuple[tuple[str, Pattern[str]], ...]:
    """((kind, pattern), ...) -> ((kind, compiled), ...): the evidence parsers' classification tables."""
    return tuple((kind, compiled(pattern)) for kind, pattern in pairs)


def first_kind(kinds, text: str, default: str = "") -> str:
    """The first kind of a compile_kinds table whose pattern is found in `text`."""
    return next((kind for kind, regex in kinds if regex.search(text)), default)


# Lines that are consequences of another rank's failure: never the root cause by themselves.
CASCADE_PATTERNS = compile_all((
    r"ChildFailedError", r"Connection reset by peer", r"Broken pipe", r"RendezvousClosedError",
    r"closing signal SIG(?:TERM|KILL|INT)", r"Watchdog caught collective", r"exception raised from",
    r"Connection closed by (?:remote )?peer", r"caused by a remote worker crashing", r"no word from the controller",
    r"DistBackendError: NCCL error.*(?:remote process exited|unhandled system error)",
    r"Killing subprocess \d+", r"Some NCCL operations have failed or timed out",
))

# The narrower subset saying that this rank's peer went away (it did not fail by itself).
PEER_LOST_PATTERNS = compile_all((
    r"Connection (?:closed|reset) by (?:remote )?peer", r"caused by a remote worker crashing", r"Broken pipe",
    r"DistBackendError: NCCL error.*remote process exited",
))

# Lines worth quoting when no rule matched.
SUSPICIOUS = re.compile(
    r"\b(?:\w+Error|\w+Exception|Traceback|FAILED|failed|fatal|Killed|Aborted|Segmentation fault|"
    r"error|denied|refused|unreachable)\b", re.IGNORECASE)
EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit)\b:?")

# Values read anywhere in the logs, for the fix templates (first match wins).
CONTEXT_PATTERNS: dict[str, tuple[Pattern[str], ...]] = {
    "nproc": compile_all((r"--nproc[-_]per[-_]node[= ](\d+)", r"nproc_per_node\s*[:=]\s*(\d+)")),
    "gpus": compile_all((r"Attached GPUs\s*:\s*(\d+)", r"nvidia\.com/gpu\W+(\d+)")),
    "ulysses": compile_all((r"args\.ulysses_size\W+(\d+)", r"--ulysses_size[= ](\d+)")),
    "world": compile_all((r"===world_size===\W+(\d+)", r"\bworld[_ ]size\W{1,4}(\d+)")),
    "driver": compile_all((r"Driver Version\s*:\s*([\d.]+)",)),
    "nccl_version": compile_all((r"NCCL version (\d+\.\d+\.\d+)",)),
}


# --------------------------------------------------------------------------- fix templates


def template_values(values: dict) -> dict:
    """Known values plus the ones fixes derive from them (divisors, CUDA version, ...)."""
    values = {k: v for k, v in values.items() if v not in (None, "")}
    if "heads" in values and "size" in values:
        values["near_divisors"] = _near_divisors(int(values["heads"]), int(values["size"]))
    if "rank" in values:
        values["rank_name"] = f"rank {values['rank']}"
    if "gpus" in values:
        values["gpus_phrase"] = f"{values['gpus']} GPU" + ("" if str(values["gpus"]) == "1" else "s")
    if "found" in values and len(values["found"]) >= 4:
        found = int(values["found"])
        values["found_cuda"] = f"{found // 1000}.{found % 1000 // 10}"
    return values


def _near_divisors(heads: int, size: int) -> str:
    below = [d for d in range(1, size + 1) if heads % d == 0][-2:]
    above = [d for d in range(size + 1, heads + 1) if heads % d == 0][:1]
    picks = [str(d) for d in below if d > 1] or [str(d) for d in above]
    return " or ".join(picks) if picks else str(heads)


_PLACEHOLDER = re.compile(r"\{(\w+)(?:\|([^{}]*))?\}")
_OPTIONAL = re.compile(r"\[([^\[\]]*\{[^\[\]]*)\]")  # only brackets holding a placeholder


def render_fix(template: str, values: dict) -> str:
    """`{name}` -> value, `{name|fallback}`, `[...]` dropped when a value inside is unknown."""
    template = template.replace("{{", "\0").replace("}}", "\1")

    def optional(match: re.Match) -> str:
        names = [m.group(1) for m in _PLACEHOLDER.finditer(match.group(1)) if m.group(2) is None]
        return match.group(1) if all(n in values for n in names) else ""

    def placeholder(match: re.Match) -> str:
        value = values.get(match.group(1))
        return str(value) if value is not None else (match.group(2) or match.group(1))

    text = _PLACEHOLDER.sub(placeholder, _OPTIONAL.sub(optional, template))
    return re.sub(r"  +", " ", text).replace("\0", "{").replace("\1", "}").strip()


# --------------------------------------------------------------------------- pre-filter


@lru_cache(maxsize=None)
def required_literals(pattern: str) -> Optional[tuple[str, ...]]:
    """The longest plain-text run of each top-level alternative of `pattern`, a cheap pre-filter:
    a line can only match when it contains one of them (lower-case). None: no usable literal."""
    literals: list[str] = []
    for alternative in _top_level(pattern, "|"):
        best = max(_literal_runs(alternative), key=len, default="")
        if len(best) >= 3:
            literals.append(best.lower())
            continue
        inner = _required_group_literals(alternative)
        if inner is None:
            return None
        literals.extend(literal for literal in inner if literal not in literals)
    return tuple(literals)


def gated(*words: str):
    """A per-line evidence parser that finds nothing on a line holding none of `words` (lower-case). The wrapper
    checks them; `.parse` skips the check for a caller that knows a word is there (evidence.extract, which finds
    every gate word in one C-speed pass over the whole log instead of a test per line and parser)."""
    def wrap(parser):
        @wraps(parser)
        def checked(line, lowered: str) -> list:
            return parser(line, lowered) if any(word in lowered for word in words) else []
        checked.gate = frozenset(words)
        checked.parse = parser
        return checked
    return wrap


def lines_holding(texts: list[str], words) -> dict[int, set]:
    """line index -> the `words` that line of `texts` holds (all lower-case). A word is found by one `find` pass
    over the joined text, or, when a shorter word inside it was found on few lines, by looking on those lines only
    (`error` on 200 lines answers `error:` and `cuda error` there): a per-line test of hundreds of words costs more
    than the rules themselves, and so do hundreds of passes over a big log."""
    whole = "\n".join(texts)
    starts, offset = [], 0
    for text in texts:
        starts.append(offset)
        offset += len(text) + 1
    few = max(1, len(texts) // FEW_LINES_DIVISOR)
    lines_of: dict[str, list[int]] = {}
    for word, parents in _word_parents(tuple(sorted(set(words), key=lambda w: (len(w), w)))):
        parent = min(parents, key=lambda p: len(lines_of[p]), default=None)
        if parent is not None and len(lines_of[parent]) <= few:
            lines_of[word] = [index for index in lines_of[parent] if word in texts[index]]
            continue
        found, at = [], whole.find(word)
        while at != -1:
            index = bisect_right(starts, at) - 1
            if at + len(word) <= starts[index] + len(texts[index]):  # not across a line break
                found.append(index)
            at = whole.find(word, at + 1)
        lines_of[word] = list(dict.fromkeys(found))  # a word twice on a line is one line
    holding: dict[int, set] = {}
    for word, indexes in lines_of.items():
        for index in indexes:
            holding.setdefault(index, set()).add(word)
    return holding


FEW_LINES_DIVISOR = 8  # a parent word on fewer than 1/8 of the lines is looked through instead of a pass


@lru_cache(maxsize=8)
def _word_parents(words: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each word (shortest first) with the shorter words inside it."""
    return tuple((word, tuple(other for other in words[:position] if len(other) < len(word) and other in word))
                 for position, word in enumerate(words))


def in_lowered(pattern: str, lowered: str) -> bool:
    """`pattern` found in the lower-cased text `lowered`. Its literals are looked for first (one C-speed pass each;
    a pattern of many alternatives costs ~50 ms per megabyte of text searched), then the pattern only around them:
    on their own line when it cannot span lines, else within SPAN characters (a rule's match is a line or a few:
    MAX_LINE is 4096). The whole text is searched past WINDOWED_HITS hits or for a pattern anchored to its ends."""
    literals = required_literals(pattern)
    regex = compiled(pattern)
    if literals is None:
        return regex.search(lowered) is not None
    hits = _hits(literals, lowered)
    if not hits:
        return False
    if len(hits) > WINDOWED_HITS or _ANCHORED.search(pattern):
        return regex.search(lowered) is not None
    if _MAY_SPAN_LINES.search(pattern):
        windows = {(max(0, at - SPAN), min(len(lowered), at + SPAN)) for at in hits}
    else:
        windows = {_line_around(lowered, at) for at in hits}
    return any(regex.search(lowered, start, end) for start, end in sorted(windows))


def any_line_matches(pattern: str, texts: list[str], lowered: str) -> bool:
    """`pattern` on one of `texts` (whose lower-cased join is `lowered`): searched only on the lines holding one of
    its literals, every line past WINDOWED_HITS hits."""
    literals = required_literals(pattern)
    regex = compiled(pattern)
    hits = _hits(literals, lowered) if literals is not None else None
    if hits is None or len(hits) > WINDOWED_HITS:
        return any(regex.search(text) for text in texts)
    return any(regex.search(lowered[start:end]) for start, end in {_line_around(lowered, at) for at in hits})


WINDOWED_HITS = 256
SPAN = 8192
_ANCHORED = re.compile(r"\\[AZ]|\$")  # `$` at a window's end would match where the text has none
# what can match a line break: such a pattern is searched in a window around each hit, not on the hit's line
_MAY_SPAN_LINES = re.compile(r"\\[sSWDn]|\[\^|\^|\(\?[a-zA-Z]*s")


def _line_around(text: str, at: int) -> tuple[int, int]:
    end = text.find("\n", at)
    return text.rfind("\n", 0, at) + 1, len(text) if end == -1 else end


def _hits(literals: tuple[str, ...], lowered: str) -> list[int]:
    """Where the literals occur, up to WINDOWED_HITS + 1 of them."""
    hits: list[int] = []
    for literal in literals:
        at = lowered.find(literal)
        while at != -1 and len(hits) <= WINDOWED_HITS:
            hits.append(at)
            at = lowered.find(literal, at + 1)
    return hits


MIN_GROUP_LITERAL = 3  # as for a plain run: shorter literals filter little


def _required_group_literals(alternative: str) -> Optional[tuple[str, ...]]:
    """The literals of a group the alternative cannot match without (`(?:exit code|return code)\\s*-9`): the
    one whose shortest literal is longest; None when no required group has usable literals. Negative
    look-arounds and optional groups (`?`, `*`, `{0,n}`) are not required; a group's `+` or `{2}` still is."""
    tokens = list(_tokens(alternative))
    best: Optional[tuple[str, ...]] = None
    for index, (token, depth) in enumerate(tokens):
        if token != "(" or depth != 0:
            continue
        end = next(i for i in range(index + 1, len(tokens) + 1) if i == len(tokens) or
                   (tokens[i][0] == ")" and tokens[i][1] == 0))
        following = tokens[end + 1][0] if end + 1 < len(tokens) else ""
        if following in ("?", "*") or following.startswith("{0"):
            continue
        body = "".join(token for token, _ in tokens[index + 1:end])
        opener = _GROUP_OPENER.match(body)
        if opener is None:  # (?!...), (?<!...), (?#...), a bare flag group (?i)
            continue
        found = required_literals(body[opener.end():])
        if found and min(map(len, found)) >= MIN_GROUP_LITERAL and \
                (best is None or min(map(len, found)) > min(map(len, best))):
            best = found
    return best


_GROUP_OPENER = re.compile(r"(?:\?(?::|P<\w+>|=|<=|[aiLmsux-]+:))?(?!\?)")


_QUANTIFIER = re.compile(r"\{\d*(?:,\d*)?\}")


def _tokens(pattern: str):
    """(token, depth) pairs: escapes, character classes and `{m,n}` quantifiers are single tokens (a quantifier's
    digits are no text a line must hold: `.{0,40}` once made "0,40" a signal's only literal, and it never fired)."""
    depth, index = 0, 0
    while index < len(pattern):
        char = pattern[index]
        quantifier = _QUANTIFIER.match(pattern, index) if char == "{" else None
        if char == "\\":
            token = pattern[index:index + 2]
        elif char == "[":
            token = pattern[index:_class_end(pattern, index) + 1]
        elif quantifier:
            token = quantifier.group(0)
        else:
            token = char
        depth -= token == ")"
        yield token, depth
        depth += token == "("
        index += len(token)


def _class_end(pattern: str, start: int) -> int:
    """The index of the `]` closing the character class opened at `start` (a `]` right after `[` or `[^` is a
    member, `\\x` an escape, so `[/\\\\]` ends at its own bracket); the pattern's last index if it never closes."""
    index = start + 1 + (pattern[start + 1:start + 2] == "^")
    index += pattern[index:index + 1] == "]"
    while index < len(pattern):
        if pattern[index] == "\\":
            index += 2
            continue
        if pattern[index] == "]":
            return index
        index += 1
    return len(pattern) - 1


def _top_level(pattern: str, separator: str) -> list[str]:
    parts, current = [], ""
    for token, depth in _tokens(pattern):
        if token == separator and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += token
    return parts + [current]


def _literal_runs(alternative: str) -> list[str]:
    tokens = list(_tokens(alternative))
    runs, current = [], ""
    for index, (token, depth) in enumerate(tokens):
        following = tokens[index + 1][0] if index + 1 < len(tokens) else ""
        literal = token[1] if token.startswith("\\") and not token[1:].isalnum() else token
        plain = len(literal) == 1 and (literal.isalnum() or literal in " _-:/,'\"=<>`!@%&~;.()[]")
        if depth == 0 and plain and (token == literal or token.startswith("\\")) and token not in "()[]." \
                and following not in ("?", "*") and not following.startswith("{"):
            current += literal
        else:
            runs.append(current)
            current = ""
    return runs + [current]
