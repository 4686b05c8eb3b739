""""Looks like a known case": the corpus entries nearest to a log, by TF-IDF over normalised lines.

Lines are normalised before they are compared (numbers, hex ids, addresses, paths, quoted names
become placeholders), so two logs of the same failure from different machines, ranks and runs
share their words; unigrams and bigrams of the remaining words are weighted by inverse document
frequency over the corpus and compared by cosine. A small own implementation (no scikit-learn: it
would triple the install for 260 documents; docs/diagnosis.md reports how often the nearest case
has the right cause). The index is built once per process from the packaged corpus (~20 ms).
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Optional

from clusterctl.diagnose import corpus
from clusterctl.documents import parts
from clusterctl.documents.convert import as_document

MIN_SCORE = 0.15
MIN_SHARED = 3  # terms a case must share with the log: one common word is not a likeness
# applied to the whole text at once (a call per line and pattern cost more than the rest of a big log's diagnosis):
# `^` is each line's start (MULTILINE) and no pattern crosses a line break ([^\S\n], not \s)
_NORMALISE = tuple((re.compile(p, re.IGNORECASE | re.MULTILINE), r) for p, r in (
    (r"\x1b\[[0-9;?]*[ -/]*[@-~]", " "),
    (r"^[^\S\n]*[\w.-]+:\d+:\d+ \[\d+\]", " "),  # NCCL's host:pid:tid [device]
    (r"^[^\S\n]*(?:\[[\w.-]+ r(?:ank)?\d+\]:?|\[rank\d+\]:|\[default\d+\]:|[\w.-]+: (?=\[))", " "),
    (r"https?://\S+", " url "),
    (r"(?:/[\w.@+-]+){2,}/?", " path "),
    (r"[A-Z]:\\\S+", " path "),
    (r"\b(?:\d{1,3}\.){3}\d{1,3}\b", " ip "),
    (r"\b[0-9a-f]{8,}\b|\b0x[0-9a-f]+\b", " hex "),
    (r"\d+", " "),
))
_WORD = re.compile(r"[a-z_][a-z_]+")
# ...and a sample program's greeting (MPI's and NCCL's hello-world tests print it on every rank): two logs that
# both say hello are not alike in their failure
STOP = frozenset("the and for with from that this was are not but you your was has have had its hello world".split())


@dataclass(frozen=True)
class Similar:
    source: str
    cause: str
    fix: str
    score: float

    def to_json(self) -> dict:
        return as_document(parts.SimilarCase, self)


def terms(text: str) -> Counter:
    """Unigrams and bigrams of the normalised words of `text`."""
    counts: Counter = Counter()
    text = "\n".join(text.lower().splitlines())  # every line break one "\n", for MULTILINE's `^`
    for pattern, replacement in _NORMALISE:
        text = pattern.sub(replacement, text)
    for line in text.split("\n"):
        words = [w for w in _WORD.findall(line) if w not in STOP]
        counts.update(words)
        counts.update(f"{a} {b}" for a, b in zip(words, words[1:]))
    return counts


@dataclass(frozen=True)
class Index:
    entries: tuple
    idf: dict
    vectors: tuple  # per entry: {term: weight}, L2-normalised


def build(entries: Iterable[corpus.CorpusEntry]) -> Index:
    entries = tuple(entries)
    counts = [terms(e.text) for e in entries]
    df: Counter = Counter()
    for c in counts:
        df.update(c.keys())
    n = len(entries)
    idf = {t: math.log((n + 1) / (d + 1)) + 1.0 for t, d in df.items()}
    return Index(entries, idf, tuple(_vector(c, idf) for c in counts))


def _vector(counts: Counter, idf: dict) -> dict:
    weights = {t: (1.0 + math.log(c)) * idf[t] for t, c in counts.items() if t in idf}
    norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
    return {t: w / norm for t, w in weights.items()}


@lru_cache(maxsize=1)
def packaged_index() -> Index:
    return build(corpus.load())


def similar_cases(text: str, k: int = 3, index: Optional[Index] = None,
                  exclude_sources: Iterable[str] = ()) -> list[Similar]:
    """The k corpus entries nearest to `text` (cosine >= MIN_SCORE), best first, one per source thread."""
    index = index or packaged_index()
    query = _vector(terms(text), index.idf)
    excluded = set(exclude_sources)
    scored = []
    for entry, vector in zip(index.entries, index.vectors):
        if entry.source in excluded:
            continue
        small, large = (query, vector) if len(query) < len(vector) else (vector, query)
        shared = [w * large[t] for t, w in small.items() if t in large]
        score = sum(shared)
        if score >= MIN_SCORE and len(shared) >= MIN_SHARED:
            scored.append((score, entry))
    scored.sort(key=lambda item: -item[0])
    out, seen = [], set()
    for score, entry in scored:
        if entry.source not in seen:
            seen.add(entry.source)
            out.append(Similar(entry.source, entry.cause, entry.fix, round(score, 3)))
        if len(out) == k:
            break
    return out
