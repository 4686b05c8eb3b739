"""The one masking of secrets, applied to the final encoded text of everything this process writes out.

Issue 47: a run record (State.write_json), a `--json` document (render.emit_json), what the screen
shows (render.Renderer), a notification (observe/notify.py), the HTML report, a log line printed.

A secret is masked in every form an encoder of clusterctl (or of a program whose output it passes
on) may have given it: `ENCODINGS`, each alone and each after another (Slack's `& < >` escape, then
JSON; HTML, then JSON...), so that masking after the last encoding finds it whatever came before.
`OUTBOUND` holds every secret this process was given (each inventory it loaded adds its own): the
places above mask with it, so no caller has to remember to.
"""
from __future__ import annotations

import html
import json
import re
import threading
from typing import Callable, Iterable

from clusterctl.models import MASK, Inventory, secret_values


def _json(ascii_only: bool) -> Callable[[str], str]:
    return lambda text: json.dumps(text, ensure_ascii=ascii_only)[1:-1]


def _go_json(text: str) -> str:
    """Go's encoder (`docker inspect`): JSON with <, >, &, U+2028 and U+2029 as \\u escapes."""
    escaped = json.dumps(text)[1:-1]
    for char, code in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                       ("\u2029", "\\u2029")):
        escaped = escaped.replace(char, code)
    return escaped


# Every encoding a secret may pass through on its way out, as a function of the text (each maps a
# text piecewise, so the form of a secret is found inside the form of a longer text).
ENCODINGS: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("as is", lambda text: text),
    ("JSON", _json(False)),
    ("JSON, ASCII", _json(True)),
    ("JSON, slashes escaped", lambda text: _json(True)(text).replace("/", "\\/")),
    ("JSON, as Go writes it", _go_json),
    ("Slack's & < > escape", lambda text: text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")),
    ("HTML", lambda text: html.escape(text, quote=True)),
    ("inside shell single quotes", lambda text: text.replace("'", "'\"'\"'")),
)


def written_forms(secrets: Iterable[str]) -> set[str]:
    """Each secret as any one or two of ENCODINGS in a row write it."""
    forms = set()
    for secret in secrets:
        for _, first in ENCODINGS:
            once = first(secret)
            forms |= {then(once) for _, then in ENCODINGS}
    return {form for form in forms if form}


class Masker:
    """A set of secrets, masked in every written form; `add` more at any time (thread-safe)."""

    def __init__(self, secrets: Iterable[str] = ()):
        self._lock, self._secrets, self._forms = threading.Lock(), set(), ()
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> "Masker":
        with self._lock:
            new = set(secrets) - self._secrets
            if new:
                self._secrets |= new
                self._forms = tuple(sorted(written_forms(self._secrets), key=len, reverse=True))  # longest first
        return self

    @property
    def forms(self) -> tuple[str, ...]:
        return self._forms

    def __call__(self, text: str) -> str:
        for form in self._forms:
            if form in text:
                text = text.replace(form, MASK)
        return text

    def json_text(self, text: str) -> str:
        """A JSON document's text with every string token masked inside (its syntax kept whatever a
        secret spells: `true`, a key's name, the digits of a `\\u0000` escape)."""
        if not self._forms:
            return text
        return _STRING.sub(lambda match: self._json_string(match.group(1)), text)

    def _json_string(self, raw: str) -> str:
        """One string token, masked in its decoded value and written again: masking its escaped text in place
        could cut an escape in two (a secret `0000` inside `\\u0000`) and leave a document no parser reads."""
        try:
            value = json.loads(f'"{raw}"')
        except ValueError:  # not a JSON string after all (a text that only looks like one): masked as text
            return f'"{self(raw)}"'
        masked = self(value)
        if masked == value and self(raw) == raw:
            return f'"{raw}"'  # nothing to mask: the token as it was written, byte for byte
        return json.dumps(masked, ensure_ascii=raw.isascii())


_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"', re.DOTALL)

OUTBOUND = Masker()  # every secret of every inventory this process loaded


def masker(inventory: Inventory) -> Masker:
    """The inventory's secret values, in every form they may be written, masked in a text (the supervisor's
    log tails, a notification, what `logs` and `attach` print); OUTBOUND learns them too."""
    values = secret_values(inventory)
    OUTBOUND.add(values)
    return Masker(values)
