"""A search's attempts' training curves for its shared page: each attempt's own log
(`attempts/a1/events.jsonl`) read for its `metrics` events (batch/curves.py
`attempt_metrics`, which `mlra compare` of a search reads its submitted attempt's by),
and one figure a series name with every attempt's line on it, as the console's Curves
view overlays them (`a1 loss`, `a2 loss`), each attempt found where the console finds
it (attempt_tree.py).

The search's own log holds no training points (its attempts trained, each in its own
run folder), so a page drawn from it alone showed one dot, the best score so far, and
none of the loss and validation curves a person watched in the console. Which series
are curves is agent/metrics/one_off.py's rule across the attempts (a name is a curve
where it moves in any attempt, batch/curves.py's `curve_names`), as for runs shown
together anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mlra.agent.metrics.one_off import is_curve
from mlra.agent.record.state import RunState
from mlra.batch.compare.overlay import COLOURS
from mlra.batch.curves import attempt_metrics
from mlra.batch.share.curves_svg import MAX_BUCKETS, Curves, Pt, Thinned, lines_svg
from mlra.batch.share.text import esc_line

MAX_ATTEMPTS = 24
"""Attempts drawn on a figure: past this the lines are a tangle (the rest are counted)."""


@dataclass
class AttemptCurves:
    """Each attempt's curves (attempt id, its Curves), in the order the search began them."""

    attempts: list[tuple[str, Curves]] = field(default_factory=lambda: [])
    left_out_attempts: int = 0

    def names(self) -> list[str]:
        """The series names that move in at least one attempt, in the order first read."""
        return _moving_names(self._by_name())

    def _by_name(self) -> list[tuple[str, dict[str, Thinned]]]:
        """Each attempt's series by shown name, named once for every figure drawn."""
        return [(attempt, dict(curves.all_named())) for attempt, curves in self.attempts]

    def figures(self, buckets: int = MAX_BUCKETS) -> list[str]:
        """One figure a series name, an attempt a line (its colour), with its legend."""
        by_name = self._by_name()
        out: list[str] = []
        for name in _moving_names(by_name):
            kept = [
                (index, attempt, series.points(buckets))
                for index, (attempt, named) in enumerate(by_name)
                if (series := named.get(name)) is not None
            ]
            over_steps = all(p[0] is not None for _, _, points in kept for p in points)
            lines: list[tuple[str, list[Pt]]] = []
            legend: list[str] = []
            for index, attempt, points in kept:
                lines.append((f"line c{index % len(COLOURS)}", _points(points, over_steps)))
                legend.append(f'<span class="c{index % len(COLOURS)}">■</span> {esc_line(attempt)}')
            title = f"{name}, by attempt"
            out.append(
                lines_svg(
                    title,
                    lines,
                    "step" if over_steps else "s",
                    legend="<br>" + " ".join(legend),
                )
            )
        return [f for f in out if f]

    def left_out(self, buckets: int = MAX_BUCKETS) -> int:
        return sum(curves.left_out(buckets) for _, curves in self.attempts)


def _moving_names(by_name: list[tuple[str, dict[str, Thinned]]]) -> list[str]:
    out: list[str] = []
    for _, named in by_name:
        for name, series in named.items():
            if name not in out and is_curve(p[2] for p in series.points()):
                out.append(name)
    return out


def _points(kept: list[tuple[float | None, float, float]], over_steps: bool) -> list[Pt]:
    pts: list[Pt] = [(float(p[0]) if over_steps and p[0] is not None else p[1], p[2]) for p in kept]
    return sorted(pts, key=lambda p: p[0]) if over_steps else pts


def read_attempt_curves(run_dir: Path, state: RunState) -> AttemptCurves:
    """Every attempt's curves from its own log; an attempt whose log is missing or
    unreadable has none (its lines that do not parse are skipped)."""
    out = AttemptCurves()
    for node in state.attempts.nodes.values():
        if len(out.attempts) >= MAX_ATTEMPTS:
            out.left_out_attempts += 1
            continue
        metrics = attempt_metrics(run_dir, node)
        if metrics is None:
            continue
        curves = Curves()
        for event in metrics:
            curves.feed(event)
        if curves.series:
            out.attempts.append((node.id, curves))
    return out
