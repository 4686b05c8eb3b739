"""collect-logs' report from a node is bounded at its source (issue 47, M2's remainder): node/node_archive.py
lists at most NOTED_MAX links, skips and renames of each kind (the rest counted), cuts long targets, and
stops archiving before its report could pass REPORT_MAX, which is under what the controller reads
(collect/fetch.REPORT_CAP). Before: 40k symlinks with long targets made a report past the 64 MiB the
controller reads: its end (DONE) was dropped and every collect of that run failed."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from clusterctl.collect import fetch
from clusterctl.node import node_archive


def _archive(base: Path, roots: list[str], known: dict | None = None):
    """node_archive as collect runs it on a node (a real process): (member names, report, report bytes)."""
    command = fetch.archive_command(str(base), roots, None, sys.executable, "", known or {}, compress=False)
    done = subprocess.run(command.argv, input=command.stdin, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    with tarfile.open(fileobj=io.BytesIO(done.stdout), mode="r|") as tar:
        names = [m.name for m in tar if m.isfile()]
    return names, fetch.parse_report(done.stderr.decode("utf-8", "replace")), len(done.stderr)


def test_forty_thousand_links_with_long_targets_make_a_bounded_report_that_ends_and_counts_them(tmp_path):
    run = tmp_path / "outputs" / "logs" / "r1" / "node1"
    run.mkdir(parents=True)
    (run / "agent.log").write_text("torchrun\n")
    target = "/" + "t" * 4000
    for i in range(40_000):
        os.symlink(target + str(i), run / f"link-{i:05d}")
    names, report, size = _archive(tmp_path / "outputs", ["logs/r1/node1"])
    assert report.done and not report.cut and names == ["logs/r1/node1/agent.log"], report.errors
    assert len(report.links) == node_archive.NOTED_MAX and dict(report.more) == {"link": 40_000 - node_archive.NOTED_MAX}
    assert all(len(t) <= node_archive.FIELD_MAX for _, t in report.links)
    assert size < node_archive.NOTES_MAX + (1 << 20) < fetch.REPORT_CAP  # was 160 MB: past the cap, DONE dropped
    assert "40000 symlink(s) not followed" in fetch.archive_summary(report)
    assert "39000 more not listed" in fetch.archive_summary(report)


def test_a_report_that_would_pass_its_bound_stops_archiving_whole_and_the_next_collect_sends_the_rest(
        tmp_path, monkeypatch):
    run = tmp_path / "outputs" / "logs" / "r1" / "node1"
    run.mkdir(parents=True)
    for i in range(40):
        (run / f"f{i:02d}-{'n' * 200}").write_text(str(i))
    monkeypatch.setattr(node_archive, "REPORT_MAX", node_archive.LINE_MAX + 10 * 260)  # room for ~10 files' lines
    known, rounds, collected = {}, 0, []
    while True:
        out, err = io.BytesIO(), io.StringIO()
        monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(known)))
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out))
        monkeypatch.setattr(sys, "stderr", err)
        node_archive.main(["node_archive", str(tmp_path / "outputs"), "", "none", "logs/r1/node1"])
        sys.stdout.flush()
        monkeypatch.setattr(sys, "stderr", sys.__stderr__)
        report = fetch.parse_report(err.getvalue())
        with tarfile.open(fileobj=io.BytesIO(out.getvalue()), mode="r|") as tar:
            names = [m.name for m in tar if m.isfile()]  # a whole tar stream, cut or not
        assert report.done and names == [s.path for s in report.sent], report
        collected += names
        known.update({s.path: [s.size, s.mtime] for s in report.sent})
        rounds += 1
        if not report.cut:
            break
        assert "left for the next collect" in report.cut and 0 < len(names) < 40
    assert rounds > 2 and sorted(collected) == sorted(f"logs/r1/node1/{p.name}" for p in run.iterdir())
