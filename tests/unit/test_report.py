"""`clusterctl report` (issue 41): one self-contained HTML file of a run, opened in a real headless browser
(Debian's chromium through /usr/bin/chromedriver: tests/browser.py). The run is a real collected bundle of a
rehearsal run (tests/fixtures/report/README.md)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from clusterctl_helpers import Cli, examples
from clusterctl.observe.metrics_file import node_metrics, parse_sample, read_samples
from clusterctl.observe.report_data import load
from clusterctl.observe.report_html import render
from clusterctl.observe.svg import Row, Series, Span, line_chart, thin, timeline

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "report" / "failed-own-error"


@pytest.fixture
def bundle(tmp_path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(FIXTURE, copy)
    return copy


def _record(bundle: Path) -> dict:
    return json.loads((bundle / "run.json").read_text())


def test_a_report_written_elsewhere_links_the_logs_relative_to_where_it_is(bundle, tmp_path):
    out = tmp_path / "elsewhere" / "deep" / "run.html"
    code, made = Cli(tmp_path / "state").json("report", str(bundle), "-o", str(out))
    assert code == 0, made
    hrefs = re.findall(r'href="([^"]+)"', out.read_text())
    assert "../../bundle/node2/logs/node2-r1.log" in hrefs
    assert all((out.parent / href).resolve().is_file() for href in hrefs)


def test_the_report_holds_no_script_and_reaches_for_nothing_outside_itself(bundle):
    text = render(load(_NoState(), str(bundle), None))
    assert "<script" not in text.lower() and "@import" not in text and "url(" not in text
    assert not re.findall(r'(?:src|href)="(?:https?:)?//', text)


def test_hostile_text_from_a_log_is_shown_as_text_never_run(bundle):
    record = _record(bundle)
    record["first_failure"]["diagnosis"][0]["evidence"] = '<script>alert(1)</script><img src=x onerror="boom()">'
    record["topology"][0]["host"] = 'node1"><svg onload=alert(1)>'
    (bundle / "run.json").write_text(json.dumps(record))
    text = render(load(_NoState(), str(bundle), None))
    assert "<script>alert" not in text and "<img" not in text and "<svg onload" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_a_run_without_a_bundle_is_reported_from_its_record_alone(tmp_path, monkeypatch):
    cli = Cli(tmp_path / "state")
    run_dir = cli.state_dir / "runs" / "20261127-080200-ef7021"
    run_dir.mkdir(parents=True)
    shutil.copy(FIXTURE / "run.json", run_dir / "run.json")
    monkeypatch.chdir(tmp_path)
    code, made = cli.json("report")
    assert code == 0 and made["bundle"] is None, made
    text = (tmp_path / "report-20261127-080200-ef7021.html").read_text()
    assert "no collected bundle" in text and "no metrics.jsonl" in text and "own error of rank 1" in text


def test_a_run_id_that_has_no_record_is_one_error_with_the_fix(tmp_path):
    code, doc = Cli(tmp_path / "state").json("report", "20990101-000000-000000")
    assert code == 2 and "no record of run" in json.dumps(doc), doc


# --------------------------------------------------------------------------- pieces


class _NoState:
    root = Path("/nonexistent-clusterctl-state")


def test_a_sample_missing_keys_keeps_what_it_has():
    sample = parse_sample('{"t": 5, "host": "n1", "gpus": [{"util_pct": 7}, "junk", {"index": 3, "power_w": null}]}', "x")
    assert (sample.t, sample.host, sample.cpu_pct, sample.mem_pct) == (5.0, "n1", None, None)
    assert [(g.index, g.util_pct, g.power_w) for g in sample.gpus] == [(0, 7.0, None), (3, None, None)]


def test_lines_that_are_not_samples_are_skipped_and_counted():
    samples, skipped = read_samples(['{"t": 2}', '{"t": 1, "cpu_pct": 3}', "", '{"t": 3, "cp', "[1]", '{"x": 1}'], "n")
    assert [s.t for s in samples] == [1.0, 2.0] and skipped == 3


def test_a_bundle_without_metrics_has_none_and_one_with_them_finds_each_node(bundle):
    assert node_metrics(None, ["node1"], "r") == []
    found = node_metrics(bundle, ["node1", "node2", "node9"], _record(bundle)["run_id"])
    assert [m.host for m in found] == ["node1", "node2"] and all(m.samples for m in found)


@settings(max_examples=examples(200), deadline=None)
@given(st.text(max_size=300))
def test_any_line_read_from_a_node_is_a_sample_or_nothing_never_an_error(line):
    sample = parse_sample(line, "n")
    assert sample is None or isinstance(sample.t, float)


@settings(max_examples=examples(100), deadline=None)
@given(st.dictionaries(st.sampled_from(["t", "host", "cpu_pct", "mem_used_mb", "mem_total_mb", "gpus"]),
                       st.one_of(st.none(), st.booleans(), st.floats(), st.integers(), st.text(max_size=5),
                                 st.lists(st.dictionaries(st.sampled_from(["index", "util_pct", "temp_c"]),
                                                          st.one_of(st.none(), st.floats(), st.integers()))))))
def test_any_json_object_is_a_sample_or_nothing_and_its_chart_draws(data):
    sample = parse_sample(json.dumps(data), "n")
    if sample is not None:
        points = tuple((sample.t, g.util_pct) for g in sample.gpus if g.util_pct is not None)
        assert line_chart("t", [Series("g", points)], (0.0, 1.0), "%", 100.0).startswith("<svg")


def test_a_long_series_is_thinned_keeping_its_last_point():
    points = [(float(i), float(i)) for i in range(1001)]
    kept = thin(points, 400)
    assert len(kept) <= 401 and kept[0] == (0.0, 0.0) and kept[-1] == (1000.0, 1000.0)


def test_a_timeline_escapes_its_labels_and_titles():
    svg = timeline("a<b", [Row("n<1", (Span(0, 1, "#000", "t&<", "l"),))], (0.0, 2.0))
    assert "a&lt;b" in svg and "n&lt;1" in svg and "t&amp;&lt;" in svg and "<b" not in svg.replace("<svg", "")


def test_a_chart_draws_no_line_across_a_gap_between_attempts():
    from clusterctl.observe.svg import segments

    points = [(0.0, 1.0), (0.5, 1.0), (1.0, 1.0), (12.0, 1.0), (12.5, 1.0)]
    assert segments(points) == [((0.0, 1.0), (0.5, 1.0), (1.0, 1.0)), ((12.0, 1.0), (12.5, 1.0))]
    assert line_chart("t", [Series("s", tuple(points))], (0.0, 13.0)).count("<polyline") == 2


def _crafted(bundle: Path, host: str) -> None:
    """node1 of the bundle renamed `host`, in its record and on disk (a crafted bundle, issue 47)."""
    record = _record(bundle)
    for node in record["topology"]:
        if node["host"] == "node1":
            node["host"] = host
    (bundle / "run.json").write_text(json.dumps(record))
    logs = bundle / host / "logs"
    logs.mkdir(parents=True)
    for old in (bundle / "node1" / "logs").iterdir():
        (logs / old.name.replace("node1", host)).write_bytes(old.read_bytes())


@pytest.mark.parametrize("host", ["javascript:alert(1)", "data:text", "JaVaScRiPt:x"])
def test_a_host_named_like_a_scheme_gives_a_relative_link_inside_the_bundle_never_a_scheme(bundle, host):
    _crafted(bundle, host)
    text = render(load(_NoState(), str(bundle), None))
    hrefs = re.findall(r'href="([^"]+)"', text)
    assert hrefs and all(h.startswith(("./", "../")) for h in hrefs), hrefs
    assert not any(re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", h) for h in hrefs)
    assert any("%3A" in h for h in hrefs)


def test_a_link_is_made_only_to_a_regular_file_inside_the_bundle(bundle, tmp_path):
    from clusterctl.observe.report_data import bundle_href

    outside = tmp_path / "secret.txt"
    outside.write_text("x")
    (bundle / "node1" / "logs" / "link.log").symlink_to(outside)
    assert bundle_href(bundle / ".." / "secret.txt", bundle, bundle) is None
    assert bundle_href(bundle / "node1" / "logs" / "link.log", bundle, bundle) is None
    assert bundle_href(bundle / "node1" / "logs", bundle, bundle) is None
    assert bundle_href(bundle / "node1" / "logs" / "node1-agent.log", bundle, bundle) == "./node1/logs/node1-agent.log"


def test_a_crafted_bundle_host_name_reads_no_metrics_outside_the_bundle(tmp_path):
    """run.json names the hosts, and a crafted bundle chooses them: `../outside` or a linked metrics file
    must not make the report read a file outside the bundle (issue 47)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "metrics.jsonl").write_text('{"t": 1, "gpus": []}\n')
    bundle = tmp_path / "bundle"
    (bundle / "node1").mkdir(parents=True)
    (bundle / "node1" / "metrics.jsonl").symlink_to(outside / "metrics.jsonl")
    assert node_metrics(bundle, ["../outside", "node1", "/", ".."], "r1") == []
