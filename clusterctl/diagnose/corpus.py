"""The diagnosis corpus: real failure logs from public issue threads, one file per entry.

An entry is `corpus/<cause>/<name>.log`: a header of `# key: value` lines (source, cause,
confirmed, fix, optional thread, family and collected), one blank line, then the log lines exactly as the thread
shows them (whole lines, some omitted, none reworded). The corpus ships with the package
(package data, ~400 KB) because `similar` needs it at run time.

The frozen test split is chosen by a seeded hash of the source URL (every entry of one
thread lands on the same side) and recorded in `corpus/TEST_SPLIT.txt`; rules are tuned on
the other 70 % only.

Issue 51's batch logs (`collected: ... first-scored, train side`) were scored once before anyone
read them and tuned on after: they are training entries whatever their hash (`first_scored`).

`family` names the kind of source (`tracker-pytorch`, `tracker-slurm`, `vendor-kb`, ...), so that
accuracy can be reported per kind of source; entries without one are the issue-18 collection
(GitHub issue threads gathered by one hand, `ORIGINAL_FAMILY`). `collected` is the date an entry
was added, when it was added after that collection.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator

CORPUS_DIR = Path(__file__).with_name("corpus")
TEST_SPLIT_FILE = CORPUS_DIR / "TEST_SPLIT.txt"
SPLIT_SEED = "clusterctl-diagnosis-split-v1"
TEST_FRACTION = 0.30
HEADER_KEYS = ("source", "cause", "confirmed", "fix", "thread", "family", "collected")
ORIGINAL_FAMILY = "issue18-github"


@dataclass(frozen=True)
class CorpusEntry:
    path: str  # relative to the corpus directory: "<cause>/<name>.log"
    source: str
    cause: str
    confirmed: bool
    fix: str
    text: str  # the log lines only, header removed
    thread: str = ""
    family: str = ORIGINAL_FAMILY  # the kind of source, for accuracy per kind
    collected: str = ""  # the date it was added, for entries added after the issue-18 collection


def split_hash(source: str) -> int:
    """A seeded hash of the source URL (stable across machines, runs and Python versions)."""
    return int(hashlib.sha256(f"{SPLIT_SEED}|{source.strip()}".encode()).hexdigest()[:8], 16)


def first_scored(entry: "CorpusEntry") -> bool:
    """An issue-51 batch log: scored once on arrival (docs/diagnosis.md "First scores"), then read and
    tuned on, so it joins the training side whatever its URL's hash says."""
    return "first-scored" in entry.collected


def in_test_split(source: str, cutoff: "int | None" = None) -> bool:
    """True when the URL's seeded hash is at or below the cutoff frozen in TEST_SPLIT.txt: the
    lowest-hash threads that made up 30 % of the entries when the split was frozen."""
    return split_hash(source) <= (frozen_cutoff() if cutoff is None else cutoff)


def frozen_cutoff(root: Path = CORPUS_DIR) -> int:
    split_file = root / TEST_SPLIT_FILE.name
    text = split_file.read_text() if split_file.is_file() else ""
    match = re.search(r"^# cutoff: (0x[0-9a-f]+)$", text, re.MULTILINE)
    return int(match.group(1), 16) if match else int(TEST_FRACTION * 0x1_0000_0000)


def parse_entry(raw: str, path: str = "") -> CorpusEntry:
    """One entry file's text -> CorpusEntry; ValueError naming the file and the missing key."""
    header, body = split_header(raw)
    missing = [k for k in ("source", "cause", "confirmed", "fix") if k not in header]
    if missing:
        raise ValueError(f"{path}: corpus entry header lacks {', '.join(missing)}")
    return CorpusEntry(path, header["source"], header["cause"], header["confirmed"] == "yes",
                       header["fix"], body, header.get("thread", ""), header.get("family") or ORIGINAL_FAMILY,
                       header.get("collected", ""))


def split_header(raw: str) -> tuple[dict, str]:
    """The leading `# key: value` block (known keys only) and the text after it."""
    header: dict = {}
    lines = raw.split("\n")
    index = 0
    while index < len(lines) and lines[index].startswith("# "):
        key, sep, value = lines[index][2:].partition(": ")
        if not sep or key not in HEADER_KEYS:
            break
        header[key] = value.strip()
        index += 1
    if header and index < len(lines) and not lines[index].strip():
        index += 1
    return header, "\n".join(lines[index:])


def entries(root: Path = CORPUS_DIR) -> Iterator[CorpusEntry]:
    for path in sorted(root.glob("*/*.log")):
        yield parse_entry(path.read_text(encoding="utf-8", errors="replace"), str(path.relative_to(root)))


@lru_cache(maxsize=1)
def load() -> tuple[CorpusEntry, ...]:
    return tuple(entries())


def frozen_test_paths(root: Path = CORPUS_DIR) -> set[str]:
    """The committed test split (paths relative to the corpus directory)."""
    split_file = root / TEST_SPLIT_FILE.name
    if not split_file.is_file():
        return set()
    return {line.strip() for line in split_file.read_text().splitlines() if line.strip() and not line.startswith("#")}
