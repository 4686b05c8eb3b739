"""`clusterctl report` (issue 41): one self-contained HTML file of a run, opened in a real headless browser
(Debian's chromium through /usr/bin/chromedriver: tests/browser.py). The run is a real collected bundle of a
rehearsal run (tests/fixtures/report/README.md)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from browser import open_report
from clusterctl_helpers import Cli

from unit.test_report import FIXTURE, _record, bundle


def _with_gpus(bundle: Path, host: str = "node1") -> None:
    """Two GPUs added to each of `host`'s samples (synthetic values in the shared format)."""
    path = next((bundle / host).rglob("metrics.jsonl"))
    lines = []
    for n, line in enumerate(path.read_text().splitlines()):
        sample = json.loads(line)
        sample["gpus"] = [{"index": i, "uuid": None, "util_pct": 50.0 + 10 * i + n % 5, "mem_used_mb": 30000.0 + 100 * n,
                           "mem_total_mb": 81559.0, "power_w": 300.0 + n, "temp_c": 60.0 + i, "sm_clock_mhz": 1980.0,
                           "throttle": [], "ecc_volatile_uncorrected": 0} for i in range(2)]
        lines.append(json.dumps(sample))
    path.write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- in the browser


def test_the_report_of_a_collected_run_opens_with_no_console_error_showing_the_failure_and_charts(bundle, tmp_path):
    _with_gpus(bundle)
    code, made = Cli(tmp_path / "state").json("report", str(bundle))
    assert code == 0, made
    assert made["report"] == str(bundle / "report.html") and made["metrics_of"] == ["node1", "node2", "node3"]
    seen = open_report(bundle / "report.html")
    assert seen.severe == [], seen.severe
    first = _record(bundle)["first_failure"]
    assert f"{first['diagnosis'][0]['cause']} on {first['host']}, rank {first['rank']}" in seen.text
    assert "own error of rank 1: the input shard is missing" in seen.text
    assert "fix: " + first["diagnosis"][0]["fix"] in seen.text
    for title in ("attempts and nodes over the run", "node1: utilisation (%)", "node1: GPU power (W)",
                  "node1: GPU temperature (C)", "node3: memory used (%)"):
        assert title in seen.text, title
    assert seen.svg_count == 1 + 4 + 2 + 2
    assert sorted(link.rsplit("/", 1)[-1] for link in seen.links) == sorted(
        ["node1-agent.log", "node1-r0.log", "node2-agent.log", "node2-r1.log", "node3-agent.log", "node3-r2.log"])


def test_a_healing_run_shows_each_attempt_and_a_straggler_on_its_node(bundle, tmp_path):
    record = _record(bundle)
    t0 = record["started"]
    record["attempts"] = [  # the shape backends/healing.py writes
        {"attempt": 1, "started": t0 - 40, "ended": t0 - 20, "hosts": ["node1", "node2"], "exit_code": 1,
         "first_failure": {"host": "node2", "rank": 1, "diagnosis": [{"cause": "node_unreachable", "fix": "x"}]},
         "excluded": [{"host": "node2", "cause": "node_unreachable"}], "relaunch_s": None, "checkpoint": None},
        {"attempt": 2, "started": t0, "ended": record["ended"], "hosts": ["node1", "node3"], "exit_code": 1,
         "first_failure": record["first_failure"], "excluded": [], "relaunch_s": 20.0, "checkpoint": None}]
    record["stragglers"] = [{"host": "node3", "rank": 2, "gpu": None, "lag_s": 0.41, "lag_share": 0.3, "ratio": 2.1,
                             "since": t0 + 2, "evidence": "40 of the last 40 samples working", "until": None}]
    (bundle / "run.json").write_text(json.dumps(record))
    code, made = Cli(tmp_path / "state").json("report", str(bundle))
    assert code == 0, made
    seen = open_report(bundle / "report.html")
    assert seen.severe == []
    for words in ("attempt 1", "attempt 2", "Stragglers", "+0.41 s/step", "40 of the last 40 samples working"):
        assert words in seen.text, words


def test_a_run_that_healed_itself_shows_the_relaunched_attempts_failure_and_both_attempts(tmp_path):
    record = json.loads((FIXTURE.parent / "healed-killed-rank" / "run.json").read_text())
    cli = Cli(tmp_path / "state")
    (cli.state_dir / "runs" / record["run_id"]).mkdir(parents=True)
    (cli.state_dir / "runs" / record["run_id"] / "run.json").write_text(json.dumps(record))
    from clusterctl.health.events import Event
    from clusterctl.health.fleet import record_events
    from clusterctl.inventory.load import parse_inventory
    from clusterctl.state import State

    inventory = parse_inventory("name: sandbox\nhosts:\n  - {name: node2, address: 10.0.0.2}\n", "s.yaml")
    left_out = Event("node2", "heal_excluded", "heal", evidence=f"left out of run {record['run_id']}: killed_by_signal",
                     cause="killed_by_signal", run_id=record["run_id"], at=record["attempts"][0]["ended"])
    assert record_events(State(cli.state_dir).health_db, inventory, [left_out]) is None  # as backends/healing.py does
    out = tmp_path / "healed.html"
    code, made = cli.json("report", record["run_id"], "-o", str(out))
    assert code == 0, made
    seen = open_report(out)
    assert seen.severe == []
    assert "heal_excluded" in seen.text and "left out of run" in seen.text
    assert "attempt 1: killed_by_signal on node2, rank 1 (exit code 1) (relaunched; node2 left out)" in seen.text
    assert "succeeded" in seen.text and re.search(r"duration\s+24 s", seen.text), seen.text[:500]


def test_a_crafted_host_name_gives_the_browser_no_javascript_link_only_files_of_the_bundle(bundle, tmp_path):
    from unit.test_report import _crafted

    _crafted(bundle, "javascript:alert(1)")
    code, made = Cli(tmp_path / "state").json("report", str(bundle))
    assert code == 0, made
    seen = open_report(bundle / "report.html")
    assert seen.links and all(link.startswith(bundle.resolve().as_uri() + "/") for link in seen.links), seen.links
    assert any(link.endswith("/javascript%3Aalert%281%29-agent.log") for link in seen.links), seen.links
