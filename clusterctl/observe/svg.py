"""Small inline SVG charts for the run report (issue 41), drawn here so the report needs no plotting
library, no script and no network: a line chart of series over time, and a timeline of spans with
markers. Every text is escaped; numbers are rounded to keep the file small. Pure."""
from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Optional, Sequence

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
MAX_POINTS = 400  # per series: longer ones are thinned (every n-th point, the last kept)


@dataclass(frozen=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]  # (seconds since the run started, value)


@dataclass(frozen=True)
class Span:
    start: float
    end: float
    color: str
    title: str  # shown on hover (an SVG <title>)
    label: str = ""


@dataclass(frozen=True)
class Marker:
    at: float
    color: str
    title: str


@dataclass(frozen=True)
class Row:
    label: str
    spans: tuple[Span, ...] = ()
    markers: tuple[Marker, ...] = ()


def thin(points: Sequence[tuple[float, float]], most: int = MAX_POINTS) -> tuple[tuple[float, float], ...]:
    if len(points) <= most:
        return tuple(points)
    step = -(-len(points) // most)
    kept = list(points[::step])
    if kept[-1] != points[-1]:
        kept.append(points[-1])
    return tuple(kept)


def segments(points: Sequence[tuple[float, float]], gap_factor: float = 5.0) -> list[tuple]:
    """`points` cut where no sample came for `gap_factor` times the usual interval (between two
    attempts, a node that was away): a chart draws no line across a gap."""
    if len(points) < 3:
        return [tuple(points)] if points else []
    steps = sorted(b[0] - a[0] for a, b in zip(points, points[1:]))
    usual = steps[len(steps) // 2] or 1e-9
    pieces, current = [], [points[0]]
    for before, point in zip(points, points[1:]):
        if point[0] - before[0] > gap_factor * usual:
            pieces.append(tuple(current))
            current = []
        current.append(point)
    return pieces + [tuple(current)]


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def seconds_label(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _x_axis(x0: float, x1: float, left: int, width: int, top: int, height: int) -> list[str]:
    parts = []
    for i in range(5):
        value = x0 + (x1 - x0) * i / 4
        x = left + width * i / 4
        parts.append(f'<line x1="{_fmt(x)}" y1="{top}" x2="{_fmt(x)}" y2="{top + height}" class="grid"/>'
                     f'<text x="{_fmt(x)}" y="{top + height + 14}" text-anchor="middle" class="tick">'
                     f'{escape(seconds_label(value))}</text>')
    return parts


def line_chart(title: str, series: Sequence[Series], x_range: tuple[float, float], unit: str = "",
               y_max: Optional[float] = None, width: int = 640, height: int = 180) -> str:
    """`series` over `x_range` (seconds); y from 0 to `y_max` (default: the largest value)."""
    left, top, plot_w, plot_h = 48, 24, width - 60, height - 52
    x0, x1 = x_range if x_range[1] > x_range[0] else (x_range[0], x_range[0] + 1)
    top_value = y_max or max((y for s in series for _, y in s.points), default=1.0) or 1.0
    total = height + 16 * -(-len(series) // 4)  # the legend: four series a line
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{total}" '
             f'viewBox="0 0 {width} {total}" role="img" aria-label="{escape(title)}">',
             f'<text x="{left}" y="14" class="title">{escape(title)}</text>']
    for i in range(3):
        value = top_value * i / 2
        y = top + plot_h - plot_h * i / 2
        parts.append(f'<line x1="{left}" y1="{_fmt(y)}" x2="{left + plot_w}" y2="{_fmt(y)}" class="grid"/>'
                     f'<text x="{left - 4}" y="{_fmt(y + 4)}" text-anchor="end" class="tick">{_fmt(value)}{escape(unit)}</text>')
    parts += _x_axis(x0, x1, left, plot_w, top, plot_h)
    for n, one in enumerate(series):
        color = PALETTE[n % len(PALETTE)]
        for piece in segments(thin(one.points)):
            coords = " ".join(f"{_fmt(left + plot_w * (x - x0) / (x1 - x0))},"
                              f"{_fmt(top + plot_h - plot_h * min(max(y, 0.0), top_value) / top_value)}"
                              for x, y in piece)
            parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="1.5">'
                         f'<title>{escape(one.label)}</title></polyline>')
        lx, ly = left + (n % 4) * (plot_w // 4), height + 10 + 16 * (n // 4)
        parts.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{lx + 14}" y="{ly}" class="legend">{escape(one.label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def timeline(title: str, rows: Sequence[Row], x_range: tuple[float, float], width: int = 900) -> str:
    """One band per row (an attempt, a node): its spans as bars, its markers as ticks."""
    label_w, top, band = 150, 24, 22
    plot_w = width - label_w - 16
    height = top + band * len(rows) + 24
    x0, x1 = x_range if x_range[1] > x_range[0] else (x_range[0], x_range[0] + 1)

    def x_of(value: float) -> float:
        return label_w + plot_w * (min(max(value, x0), x1) - x0) / (x1 - x0)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
             f'<text x="4" y="14" class="title">{escape(title)}</text>']
    parts += _x_axis(x0, x1, label_w, plot_w, top, band * len(rows))
    for i, row in enumerate(rows):
        y = top + band * i
        parts.append(f'<text x="4" y="{y + 15}" class="label">{escape(row.label[:24])}</text>')
        for span in row.spans:
            start, end = x_of(span.start), x_of(span.end)
            parts.append(f'<rect x="{_fmt(start)}" y="{y + 3}" width="{_fmt(max(end - start, 2.0))}" height="{band - 6}" '
                         f'fill="{span.color}" rx="3"><title>{escape(span.title)}</title></rect>')
            if span.label and end - start > 7 * len(span.label):
                parts.append(f'<text x="{_fmt(start + 4)}" y="{y + 15}" class="onbar">{escape(span.label)}</text>')
        for marker in row.markers:
            x = _fmt(x_of(marker.at))
            parts.append(f'<path d="M{x},{y + 1} l5,-0 l-5,8 l-5,-8 z" fill="{marker.color}"/>'
                         f'<line x1="{x}" y1="{y + 1}" x2="{x}" y2="{y + band - 1}" stroke="{marker.color}" '
                         f'stroke-width="2"><title>{escape(marker.title)}</title></line>')
    parts.append("</svg>")
    return "".join(parts)
