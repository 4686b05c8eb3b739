"""The confidence a finding prints: the share of such first answers that were right on public logs nobody
here had read (issue 51: the first scores of frozen batches, docs/diagnosis.md "Calibration").

Three monotone maps, composed, each fitted once on first scores and then left alone so that later batches
test it: FIRST (2026-11, 122 cases) from the engine's raw value (evidence strength times its share among
the ranked answers), OBSERVED (2026-12-01, 823 cases scored after FIRST) from FIRST's value to how often
an answer printed at it was right, and RECENT (2026-12-01, the 184 first places OBSERVED printed, batches
31-35) from OBSERVED's value to how often those were right. FIRST alone was under-confident: printed
0.07-0.20, right 34 % of the time; printed 0.35-0.48, 76 %; printed 0.88, 98 %. OBSERVED was over-confident
on the later, harder batches: printed 0.19-0.48, right 27 %; 0.88-0.97, 93 %. `unknown` keeps FIRST's value
(0 of its 108 first places was right: raising it would say otherwise).
"""
from __future__ import annotations

Knots = tuple[tuple[float, float], ...]

# raw -> value; raw < 0.5 was right 0 of 42 times (mostly `unknown` first), 0.5-0.7 7 of 24, 0.7 and up 47 of 56
FIRST: Knots = ((0.0, 0.02), (0.5, 0.08), (0.6, 0.3), (0.7, 0.7), (0.85, 0.82), (1.0, 0.88))

# FIRST's value -> observed top-1 share: pool-adjacent-violators over the 823 first places that were not
# `unknown` (blocks of >= 20 cases, each knot at its block's mean value): 0.04-0.06 24 % (50 cases),
# 0.07-0.20 34 % (185), 0.21-0.24 35 % (20), 0.25-0.28 48 % (21), 0.29-0.33 49 % (47), 0.35-0.48 76 % (21),
# 0.49-0.84 80 % (190), 0.85-0.86 89 % (114), 0.87 92 % (73), 0.88 98 % (102; printed 0.97).
OBSERVED: Knots = ((0.0, 0.2), (0.06, 0.24), (0.11, 0.33), (0.22, 0.35), (0.27, 0.48), (0.31, 0.49), (0.41, 0.76),
                   (0.77, 0.8), (0.86, 0.89), (0.87, 0.92), (0.88, 0.97), (1.0, 0.97))


# OBSERVED's value -> observed top-1 share: pool-adjacent-violators over batches 31-35's 184 first places that were
# not `unknown` (blocks of >= 15 cases, each knot at its block's mean value): 0.19-0.48 27 % (77 cases), 0.49-0.83
# 70 % (33), 0.85-0.87 85 % (20), 0.88-0.97 93 % (54). OBSERVED prints 0.2 at the least, hence the first knot.
RECENT: Knots = ((0.0, 0.2), (0.2, 0.2), (0.31, 0.27), (0.73, 0.7), (0.86, 0.85), (0.94, 0.93), (1.0, 0.93))


def through(knots: Knots, x: float) -> float:
    """Linear between knots, flat beyond them, two decimals."""
    for (x0, y0), (x1, y1) in zip(knots, knots[1:]):
        if x <= x1:
            return round(y0 + (y1 - y0) * (max(x, x0) - x0) / (x1 - x0), 2)
    return knots[-1][1]


def calibrated(raw: float, cause: str = "") -> float:
    """What a finding of `cause` with the engine's raw value prints."""
    first = through(FIRST, raw)
    return first if cause == "unknown" else through(RECENT, through(OBSERVED, first))


def resembling(value: float) -> float:
    """What a cause known only from a resembling case prints (engine.with_similar_causes: half its similarity,
    a value on FIRST's scale, which OBSERVED was fitted on alike)."""
    return through(RECENT, through(OBSERVED, value))
