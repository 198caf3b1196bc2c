"""A run's training curves, gathered from its `metrics` events: one series a source and
name, named so that runs can be laid over each other.

The exports (batch/export/) and the report's curves (batch/report_curves.py) read them
from here, so a curve is named and ordered the same wherever it is shown. A series is
named by what the source calls it (`loss`) where one source of the run has that name,
so the same curve of two runs meets under one name in a tracker; where two sources of
one run have it (two jobs each printing `loss`), each is named `<source>/<name>`
(`j1/loss`, `metrics.jsonl/loss`), never merged into one zigzag.

Which series are curves and which one-off numbers (`d=128` printed once) is
agent/metrics/one_off.py's rule; `curve_names` applies it to runs shown together.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from mlra import events as ev
from mlra.agent.metrics.one_off import is_curve
from mlra.agent.record.attempt_tree import AttemptNode
from mlra.agent.record.eventlog import EVENTS_FILE
from mlra.agent.record.state import RunState


@dataclass
class Point:
    value: float
    step: int | None
    wall: float
    """Run-clock seconds when it was read."""


@dataclass
class Series:
    name: str
    source: str
    """`job:<id>`, `command:<call_id>` or `file:<path>`, as the events name it."""
    points: list[Point] = field(default_factory=list)
    thinned: int = 0
    """Points read but left out of the log past its bound (the curve is a sample)."""

    @property
    def has_steps(self) -> bool:
        """Every point states its training step: a curve over steps, else over time."""
        return bool(self.points) and all(p.step is not None for p in self.points)

    @property
    def is_curve(self) -> bool:
        """Its values change (agent/metrics/one_off.py): else a one-off number."""
        return is_curve(p.value for p in self.points)


def source_label(source: str) -> str:
    """`job:j1` → `j1`, `file:out/metrics.jsonl` → `out/metrics.jsonl`: the source's
    own name, short enough to stand before a series' name."""
    _, sep, rest = source.partition(":")
    return rest if sep and rest else source


def run_series(events: Iterable[ev.Event]) -> list[Series]:
    """Every series of a run, in the order first read; empty where nothing was read."""
    by_key: dict[tuple[str, str], Series] = {}
    for event in events:
        if not isinstance(event, ev.Metrics):
            continue
        seen: set[str] = set()
        for p in event.points:
            series = by_key.setdefault((event.source, p.name), Series(p.name, event.source))
            series.points.append(Point(p.value, p.step, p.wall))
            seen.add(p.name)
        for name in seen:  # the event's count of points left out, shared by its series
            by_key[event.source, name].thinned += event.thinned
    sources_of: dict[str, set[str]] = {}
    for source, name in by_key:
        sources_of.setdefault(name, set()).add(source)
    named: list[Series] = []
    for (source, name), series in by_key.items():
        if len(sources_of[name]) > 1:
            series.name = f"{source_label(source)}/{name}"
        named.append(series)
    return named


def attempt_metrics(run_dir: Path, node: AttemptNode) -> list[ev.Metrics] | None:
    """A search's attempt's `metrics` events, from its own log (`attempts/a1/events.jsonl`)
    found where the console finds it (attempt_tree.py `folder_in`): the search's own log
    holds no training points, its attempts trained. The shared page's "by attempt"
    figures and `mlra compare` of a search read them here. None where its folder lies
    outside the search's or its log cannot be read; a line that does not parse (a log
    being written) is skipped."""
    events = attempt_events(run_dir, node, (b"metrics",))
    return None if events is None else [e for e in events if isinstance(e, ev.Metrics)]


def attempt_events(
    run_dir: Path, node: AttemptNode, types: tuple[bytes, ...]
) -> list[ev.Event] | None:
    """The events of these `types` (`b"metrics"`, `b"validation"`) of an attempt's own
    log, read as `attempt_metrics` reads them (the rest of its lines are not parsed)."""
    folder = node.folder_in(run_dir)
    if folder is None:
        return None
    marks = [b'"type":"' + t + b'"' for t in types]
    out: list[ev.Event] = []
    try:
        with open(folder / EVENTS_FILE, "rb") as f:
            for line in f:
                if not any(m in line[:200] for m in marks) or not line.endswith(b"\n"):
                    continue
                try:
                    out.append(ev.parse_event(line))
                except (ValidationError, ValueError):
                    continue
    except OSError:
        return None
    return out


def graded_attempt(state: RunState) -> tuple[AttemptNode, str] | None:
    """The attempt that stands for a search where its curves are drawn or exported (its
    own log holds none: its attempts trained): the one it submitted, else the one it
    graded as nothing was (its deadline, a budget, a stop), with which of the two
    ("submitted", "graded"). None: a run that handed in no attempt."""
    submission = state.submission
    if submission is None or submission.attempt is None:
        return None
    node = state.attempts.nodes.get(submission.attempt)
    if node is None:
        return None
    return node, "submitted" if submission.by in ("agent", "user") else "graded"


def curve_names(runs: Iterable[Iterable[Series]]) -> set[str]:
    """The names that are a curve in at least one of these runs: shown or exported
    together, a name is a curve in every run or in none, so one run's loss that stuck
    at one value, or stopped after a reading, still meets the others' on their panel
    or chart, and `d` printed once by every run is a curve in none."""
    return {s.name for series in runs for s in series if s.is_curve}


def axis_range(values: Iterable[float]) -> tuple[float, float]:
    """A y axis for these values, as the console's and the shared page's plots take it:
    the data's range padded by a twentieth, and where every value lies in [0, 1] (an
    accuracy, a score) kept within [0, 1], so an accuracy of 0.91 is never drawn on an
    axis up to 1.17. One value (or all equal) gets a span around it: a tenth of the unit
    interval for a fraction, a tenth of its size otherwise."""
    ys = list(values)
    if not ys:
        return 0.0, 1.0
    lo, hi = min(ys), max(ys)
    fraction = 0.0 <= lo and hi <= 1.0
    if hi > lo:
        pad = (hi - lo) / 20
    else:
        pad = 0.1 if fraction else max(abs(lo) / 10, 0.5 if lo == 0 else 0.0)
    lo, hi = lo - pad, hi + pad
    if fraction:
        lo, hi = max(0.0, lo), min(1.0, hi)
    return lo, hi


def validation_points(events: Iterable[ev.Event]) -> list[tuple[float, ev.Validation]]:
    """Each graded validation (run clock, event): the points a curve's axes share."""
    return [(e.t, e) for e in events if isinstance(e, ev.Validation) and e.score is not None]
