"""A run's curves for the shared page: gathered as the log is read, thinned to a bounded
number of points that keeps each bucket's lowest and highest value, and drawn by mlra as
inline SVG (no plotting script, nothing fetched).

Thinned as read because a long training run prints millions of points: the page keeps
at most `MAX_BUCKETS` buckets a series, each holding its first point and its extremes,
so a spike or a divergence survives thinning where an average or a stride would hide it.
Series are named as batch/curves.py names them (`loss`, or `j1/loss` where two sources
of the run have a `loss`), and a series whose values never change is a one-off number
(agent/metrics/one_off.py), not drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mlra import events as ev
from mlra.agent.metrics.one_off import is_curve
from mlra.batch.curves import axis_range, source_label
from mlra.batch.share.text import esc_line

MAX_BUCKETS = 400
"""Buckets a series keeps (each at most two points: its extremes)."""

Pt = tuple[float, float]
"""(x, value): x the step where every point has one, else run-clock seconds."""


@dataclass
class Thinned:
    """One series' points, merged pairwise into wider buckets whenever there are too many."""

    width: int = 1
    """Points read into each bucket."""
    buckets: list[list[tuple[float | None, float, float]]] = field(default_factory=list)
    """Each bucket's kept points (step, wall, value): its lowest and highest."""
    filling: int = 0
    read: int = 0
    thinned_by_source: int = 0
    """Points the run's own reader already left out of the log (`metrics.thinned`)."""

    def add(self, step: float | None, wall: float, value: float) -> None:
        self.read += 1
        if not math.isfinite(value):
            return
        point = (step, wall, value)
        if not self.buckets or self.filling >= self.width:
            self.buckets.append([point])
            self.filling = 1
            if len(self.buckets) > MAX_BUCKETS:
                self._merge()
            return
        self.buckets[-1] = _extremes([*self.buckets[-1], point])
        self.filling += 1

    def _merge(self) -> None:
        last = self.buckets.pop()
        merged = [
            _extremes(self.buckets[i] + self.buckets[i + 1]) for i in range(0, len(self.buckets), 2)
        ]
        self.buckets = [*merged, last]
        self.width *= 2
        self.filling = 1

    def points(self, buckets: int = MAX_BUCKETS) -> list[tuple[float | None, float, float]]:
        """The kept points, merged pairwise into at most `buckets` buckets (a page short of
        room draws its curves with fewer, each still with its extremes)."""
        kept = self.buckets
        while len(kept) > buckets:
            kept = [_extremes(kept[i] + kept[i + 1]) if i + 1 < len(kept) else kept[i]
                    for i in range(0, len(kept), 2)]  # fmt: skip
        return [p for b in kept for p in b]


def _extremes(
    points: list[tuple[float | None, float, float]],
) -> list[tuple[float | None, float, float]]:
    low = min(points, key=lambda p: p[2])
    high = max(points, key=lambda p: p[2])
    if low is high:
        return [low]
    return [low, high] if points.index(low) < points.index(high) else [high, low]


class Curves:
    """Every series of a run, fed one `metrics` event at a time."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, str], Thinned] = {}

    def feed(self, event: ev.Metrics) -> None:
        seen: set[str] = set()
        for p in event.points:
            series = self.series.setdefault((event.source, p.name), Thinned())
            series.add(p.step, p.wall, p.value)
            seen.add(p.name)
        for name in seen:
            self.series[event.source, name].thinned_by_source += event.thinned

    def all_named(self) -> list[tuple[str, Thinned]]:
        """Each series under its shown name, in the order first read, one-offs too."""
        sources_of: dict[str, int] = {}
        for _, name in self.series:
            sources_of[name] = sources_of.get(name, 0) + 1
        return [
            (f"{source_label(source)}/{name}" if sources_of[name] > 1 else name, series)
            for (source, name), series in self.series.items()
        ]

    def named(self) -> list[tuple[str, Thinned]]:
        """Each series under its shown name, in the order first read; one-offs left out."""
        return [(n, s) for n, s in self.all_named() if is_curve(p[2] for p in s.points())]

    def left_out(self, buckets: int = MAX_BUCKETS) -> int:
        """Points read but not drawn (thinned here)."""
        return sum(s.read - len(s.points(buckets)) for s in self.series.values())


W, H, PAD_L, PAD_B, PAD_T, PAD_R = 460, 170, 56, 26, 10, 10


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def svg(title: str, points: list[Pt], x_label: str, *, step_line: bool = False) -> str:
    """One curve as an inline `<svg>` (title and labels escaped; numbers only otherwise)."""
    return lines_svg(title, [("line", points)], x_label, step_line=step_line)


def lines_svg(
    title: str,
    lines: list[tuple[str, list[Pt]]],
    x_label: str,
    *,
    step_line: bool = False,
    legend: str = "",
) -> str:
    """Curves on one axis as an inline `<svg>`, each `(its CSS classes, its points)`: the
    classes are mlra's own (`line c3`, a run's colour), never text from a run; the
    title is escaped here, `legend` is HTML already escaped."""
    lines = [(cls, pts) for cls, pts in lines if pts]
    if not lines:
        return ""
    xs = [p[0] for _, pts in lines for p in pts]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:  # one instant: the point in the middle of a small span, not at an edge
        x0, x1 = x0 - 1, x1 + 1
    y0, y1 = axis_range([p[1] for _, pts in lines for p in pts])

    def sx(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * (W - PAD_L - PAD_R)

    def sy(y: float) -> float:
        return PAD_T + (1 - (y - y0) / (y1 - y0)) * (H - PAD_T - PAD_B)

    polylines = []
    for cls, points in lines:
        if len(points) == 1:  # one reading: a dot, not a line from nowhere
            (x, y), dot = points[0], cls.replace("line", "dot", 1)
            polylines.append(f'<circle class="{dot}" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3"/>')
            continue
        coords: list[str] = []
        for i, (x, y) in enumerate(points):
            if step_line and i:
                coords.append(f"{sx(x):.1f},{sy(points[i - 1][1]):.1f}")
            coords.append(f"{sx(x):.1f},{sy(y):.1f}")
        polylines.append(f'<polyline class="{cls}" points="{" ".join(coords)}"/>')
    name = esc_line(title)
    count = sum(len(pts) for _, pts in lines)
    counted = "1 point" if count == 1 else f"{count} points"
    return (
        f'<figure class="curve"><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" '
        f'width="{W}" height="{H}" role="img" aria-label="{name}">'
        f'<rect class="plot" x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" '
        f'height="{H - PAD_T - PAD_B}"/>'
        f'<text class="tick" x="{PAD_L - 4}" y="{PAD_T + 10}" text-anchor="end">{_fmt(y1)}</text>'
        f'<text class="tick" x="{PAD_L - 4}" y="{H - PAD_B}" text-anchor="end">{_fmt(y0)}</text>'
        f'<text class="tick" x="{PAD_L}" y="{H - 8}">{_fmt(x0)}</text>'
        f'<text class="tick" x="{W - PAD_R}" y="{H - 8}" text-anchor="end">{_fmt(x1)} '
        f"{x_label}</text>"
        f"{''.join(polylines)}</svg>"
        f'<figcaption>{name} <span class="dim">({counted})</span>{legend}</figcaption>'
        "</figure>"
    )


def series_svg(name: str, series: Thinned, buckets: int = MAX_BUCKETS) -> str:
    kept = series.points(buckets)
    over_steps = all(p[0] is not None for p in kept)
    pts: list[Pt] = [(float(p[0]) if over_steps and p[0] is not None else p[1], p[2]) for p in kept]
    if over_steps:
        pts.sort(key=lambda p: p[0])
    return svg(name, pts, "step" if over_steps else "s")
