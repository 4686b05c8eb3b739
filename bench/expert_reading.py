"""How far a log alone can take anyone: blind expert readers against the same first-scored logs (issue 51).

    .venv/bin/python bench/expert_reading.py NAME KEY.json ANSWERS.json [ANSWERS.json ...]   # record a reading
    (docs/diagnosis.md's section is written by bench/score_batch.py / make diagnose-report from the records)

Each first-scored log's lines (its header, the answer key, removed) were given under an opaque id to separate
processes acting as an experienced engineer, with the cause vocabulary and nothing else: no rules, no code, no
search. Each named up to three vocabulary causes per log. Where the tool and the reader both miss a label that is
in the vocabulary, the log's lines do not carry its cause to a reader either; where the reader is right and the
tool wrong, the log holds a class the tool has still to learn. A record is bench/expert_reads/NAME.json.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
READS = REPO / "bench" / "expert_reads"
SCORES = REPO / "bench" / "first_scores"


def tool_rows() -> dict:
    """file -> its first-score row, over every scored batch."""
    return {row["file"]: row for path in SCORES.glob("*.json") for row in json.loads(path.read_text())["rows"]}


def record(name: str, key_path: Path, answer_paths: list) -> dict:
    key = json.loads(Path(key_path).read_text())
    answers: dict = {}
    for path in answer_paths:
        answers.update(json.loads(Path(path).read_text()))
    cases = {rid: {"file": v["file"], "batch": v["batch"]} for rid, v in sorted(key.items())}
    doc = {"name": name, "cases": cases, "answers": {rid: answers.get(rid, []) for rid in cases}}
    READS.mkdir(exist_ok=True)
    (READS / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def compare(doc: dict, rows: dict) -> dict:
    """Counts over the record's logs: the reader's and the tool's first scores, on all and in-vocabulary labels."""
    out = {"n": 0, "in_vocab": 0, "reader_top1": 0, "reader_top3": 0, "tool_top1": 0, "reader_unknown": 0,
           "iv_reader_top1": 0, "iv_tool_top1": 0, "iv_both_miss": 0, "iv_reader_only": [], "iv_tool_only": 0}
    for rid, case in doc["cases"].items():
        row = rows.get(case["file"])
        if row is None:
            continue
        named = [c for c in doc["answers"].get(rid, []) if isinstance(c, str)][:3]
        label = row["cause"]
        in_vocab = not label.startswith("other:")
        reader1, reader3 = in_vocab and bool(named) and named[0] == label, in_vocab and label in named
        out["n"] += 1
        out["reader_top1"] += reader1
        out["reader_top3"] += reader3
        out["tool_top1"] += row["top1"]
        out["reader_unknown"] += bool(named) and named[0] == "unknown"
        if in_vocab:
            out["in_vocab"] += 1
            out["iv_reader_top1"] += reader1
            out["iv_tool_top1"] += row["top1"]
            out["iv_both_miss"] += not reader1 and not row["top1"]
            out["iv_tool_only"] += row["top1"] and not reader1
            if reader1 and not row["top1"]:
                out["iv_reader_only"].append((case["file"], label, row["named"][:1]))
    return out


# batches collected before job_code_error, library_bug and mpi_pmi_missing joined the collectors' vocabulary
OLDER_VOCABULARY = (" The reader was given today's vocabulary, larger than batches 31-33's collectors had "
                    "(job_code_error, library_bug, mpi_pmi_missing): an answer in those three for a log of those "
                    "batches counts as a miss, as the tool's would.")


def pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f} %" if b else "-"


def section_text() -> str:
    """docs/diagnosis.md's paragraph on the expert readings, "" without any record."""
    rows, parts = tool_rows(), []
    for path in sorted(READS.glob("*.json")):
        doc = json.loads(path.read_text())
        c = compare(doc, rows)
        batches = ", ".join(f"batch {b}" for b in sorted({v["batch"] for v in doc["cases"].values()}))
        only = "; ".join(f"{Path(f).name} `{label}` (tool: {', '.join(named) or '-'})"
                         for f, label, named in c["iv_reader_only"])
        parts.append(
            f"**How far the log alone takes a reader** (`{doc['name']}`, bench/expert_reading.py): the {c['n']} "
            f"first-scored logs of {batches}, "
            f"their lines only, read by separate processes acting as an experienced engineer with the cause "
            f"vocabulary and nothing else (no rules, no code, no search). Reader top-1 {c['reader_top1']}/{c['n']} "
            f"({pct(c['reader_top1'], c['n'])}), top-3 {pct(c['reader_top3'], c['n'])}, `unknown` first "
            f"{c['reader_unknown']}; the tool's first scores on the same logs top-1 {c['tool_top1']}/{c['n']} "
            f"({pct(c['tool_top1'], c['n'])}). On the {c['in_vocab']} logs whose label is a vocabulary cause: reader "
            f"{c['iv_reader_top1']} ({pct(c['iv_reader_top1'], c['in_vocab'])}), tool {c['iv_tool_top1']} "
            f"({pct(c['iv_tool_top1'], c['in_vocab'])}); both wrong on {c['iv_both_miss']} (their lines do not carry "
            f"the label to a reader either), the tool alone right on {c['iv_tool_only']}, the reader alone right on "
            f"{len(c['iv_reader_only'])}: {only or 'none'}." + (OLDER_VOCABULARY if min(
                v["batch"] for v in doc["cases"].values()) < 34 else ""))
    return "\n\n".join(parts)


def main() -> int:
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    doc = record(sys.argv[1], Path(sys.argv[2]), sys.argv[3:])
    print(json.dumps({k: v for k, v in compare(doc, tool_rows()).items() if k != "iv_reader_only"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
