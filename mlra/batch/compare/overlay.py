"""The runs' curves laid over each other: one fixed colour a run in every view, the
step or the run clock across, and one panel a scale (losses apart from accuracies, so
a loss of 4 never flattens an accuracy of 0.8), and each run's best validation so far
against time.

Which panel a series goes to is a rule by its name, else by its values: a name that
says loss or error (`loss`, `val_err`, `perplexity`) is a loss, one that says a score
(`acc`, `f1`, `auc`) a score, and any other is a score where all its values lie in
[0, 1], a loss where they do not. Runs of several tasks get each task's panels apart
(`loss · tiny-lm`): two tasks' losses are no one scale, as their scores are not (a
language model's loss of 5 flattened a classifier's 0.2 to a line at the bottom).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mlra.batch.compare.matrix import higher_by_name_or_values
from mlra.batch.compare.runs import ComparedRun
from mlra.batch.curves import Series, curve_names

COLOURS = (
    "#4cc9f0",
    "#f8961e",
    "#90be6d",
    "#f72585",
    "#f9c74f",
    "#577590",
    "#f94144",
    "#b5b5b5",
    "#9d4edd",
    "#43aa8b",
)
"""The runs' colours, in the order named (`mlra compare A B`: A cyan, B orange), as
hex: Rich takes them so, plotext as RGB (`rgb`), the same colour in every view."""

X = Literal["step", "time"]
Panel = str
"""`loss` or `score`, followed by ` · TASK` where the runs have several tasks."""
KINDS = ("loss", "score")


def colour(index: int) -> str:
    return COLOURS[index % len(COLOURS)]


def rgb(index: int) -> tuple[int, int, int]:
    """The run's colour as plotext takes it."""
    hexa = colour(index).lstrip("#")
    return int(hexa[0:2], 16), int(hexa[2:4], 16), int(hexa[4:6], 16)


def panel_of(name: str, values: list[float]) -> Literal["loss", "score"]:
    """A series' panel, by the rule `mlra compare --metric` takes its direction by."""
    return "score" if higher_by_name_or_values(name, values) else "loss"


@dataclass
class Line:
    run: int
    """The run's column (its colour)."""
    label: str
    x: list[float]
    y: list[float]


@dataclass
class Overlay:
    x: X
    panels: dict[Panel, str] = field(default_factory=dict)
    """Each panel's series name (the one most runs have), each task's loss before its
    score, the tasks in the order their runs are named."""
    lines: dict[Panel, list[Line]] = field(default_factory=dict)
    no_steps: int = 0
    """Series left off a step axis because their points state no steps."""


def _series_by_name(run: ComparedRun, name: str) -> list[Series]:
    return [s for s in run.series if s.name == name]


def overlay(runs: list[ComparedRun], x: X = "time", metric: str | None = None) -> Overlay:
    """Each panel's most common curve (or `metric`'s, where a run has it), every run's
    series of that name as one line of its colour; a task's panels apart from
    another's."""
    out = Overlay(x)
    tasks = list(dict.fromkeys(r.task for r in runs))
    for task in tasks:
        members = [(i, r) for i, r in enumerate(runs) if r.task == task]
        _add_panels(out, members, metric, f" · {task}" if len(tasks) > 1 else "")
    return out


def _add_panels(
    out: Overlay, members: list[tuple[int, ComparedRun]], metric: str | None, suffix: str
) -> None:
    runs = [r for _, r in members]
    names = curve_names(r.series for r in runs)
    if metric is not None and any(_series_by_name(r, metric) for r in runs):
        names = {metric}
    counts: dict[str, int] = {}
    for run in runs:
        for name in {s.name for s in run.series if s.name in names}:
            counts[name] = counts.get(name, 0) + 1
    chosen: dict[str, str] = {}
    for name in sorted(counts, key=lambda n: (-counts[n], n)):
        values = [p.value for r in runs for s in _series_by_name(r, name) for p in s.points]
        chosen.setdefault(panel_of(name, values), name)
    for kind in KINDS:
        if kind not in chosen:
            continue
        name = chosen[kind]
        lines: list[Line] = []
        for i, run in members:
            for s in _series_by_name(run, name):
                if out.x == "step" and not s.has_steps:
                    out.no_steps += 1
                    continue
                xs = [float(p.step or 0) if out.x == "step" else p.wall for p in s.points]
                lines.append(Line(i, s.name, xs, [p.value for p in s.points]))
        out.panels[kind + suffix] = name
        out.lines[kind + suffix] = lines


def curves_from_attempts(runs: list[ComparedRun], letters: list[str]) -> str:
    """Which runs' curves are an attempt's (a search's: `A: its submitted attempt a2`),
    "" where none are: said beside the curves, so a search's line is not read as its
    own log's."""
    return "; ".join(
        f"{name}: its {run.curves_why} attempt {run.curves_of}"
        for name, run in zip(letters, runs, strict=True)
        if run.curves_of
    )


def best_so_far(runs: list[ComparedRun]) -> list[Line]:
    """Each run's best validation score so far against the run clock (by the direction
    its validations state), drawn as stairs: a line a run with no validation leaves out."""
    lines = []
    for i, run in enumerate(runs):
        if not run.validations:
            continue
        higher = run.validation_higher_is_better is not False
        xs, ys = [], []
        best: float | None = None
        for t, score in run.validations:
            if best is None or (score > best if higher else score < best):
                if best is not None:  # a stair: the old best held until now
                    xs.append(t)
                    ys.append(best)
                best = score
            xs.append(t)
            ys.append(best)
        lines.append(Line(i, run.validation_metric or "validation", xs, ys))
    return lines
