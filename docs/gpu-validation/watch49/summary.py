"""One line per case of bench/stragglers.py's JSON files in a folder (the device's $OUT)."""
import json
import sys
from pathlib import Path

KEYS = ("share_held", "watch", "named", "right", "named_after_s", "ended_after_s", "ratio", "evidence", "exit_code",
        "first_failure", "failed", "load_1min")
for path in sorted(Path(sys.argv[1]).glob("stragglers_*.json")):
    report = json.loads(path.read_text())
    for part in ("slowed", "frozen", "healthy"):
        for case in report.get(part, []):
            print(path.stem, part, {k: case.get(k) for k in KEYS if case.get(k) is not None})
    for case in report.get("cost", []):
        print(path.stem, "cost", {k: v for k, v in case.items() if k != "rounds"})
