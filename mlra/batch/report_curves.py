"""The batch report's training curves: each run's series (what its jobs, commands and
files printed or wrote, from its `metrics` events: batch/curves.py), in report.json
whole, in report.md a line a series (points, first → last, best), and a PNG a task
(`curves-<task>.png`) with every run of the task laid over each other, a panel a series
name, a colour a model.

Only curves are drawn and tabled as curves: a series whose values never change in any
run of the task (`d=128`, `tokenizer: 2048 tokens` printed once by tiny-lm's train.py;
agent/metrics/one_off.py's rule, batch/curves.py's `curve_names`) is a one-off number,
listed with its value in a table of its own and marked `"curve": false` in report.json,
so the panels go to what moved (tiny-lm's `loss` and `valid`).

A run is read from its current folder (`runs/<id>/` of a batch, `<id>/` of a plain
runs folder): the attempt whose numbers the report's rows show last. A curve is drawn
over its training steps where every point states one, else over the run clock; on a
log scale where all its values are positive and span more than a decade (a loss).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mlra.agent.record.eventlog import EVENTS_FILE, LogDamage, read_events
from mlra.batch.curves import Series, curve_names, run_series
from mlra.batch.report_text import md_cell as _cell
from mlra.batch.report_text import plot_text
from mlra.batch.state import RUNS

PANELS = 4
"""The most curve names a task's PNG draws (the most common first, `loss` before the
rest): more would be unreadable; report.json holds them all."""


class _Row(Protocol):
    run_id: str
    task: str
    model: str
    seed: int | None


@dataclass
class RunCurves:
    run_id: str
    task: str
    model: str
    seed: int | None
    series: list[Series]


def read_curves(out: Path, rows: Sequence[_Row]) -> list[RunCurves]:
    """Each run's curves (runs with none left out), in the rows' order."""
    runs_dir = out / RUNS if (out / RUNS).is_dir() else out
    found: list[RunCurves] = []
    seen: set[str] = set()
    for row in rows:
        if row.run_id in seen:
            continue
        seen.add(row.run_id)
        log = runs_dir / row.run_id / EVENTS_FILE
        if not log.is_file():
            continue
        try:
            series = run_series(read_events(log))
        except LogDamage:
            continue  # the report's rows say what is wrong with it
        if series:
            found.append(RunCurves(row.run_id, row.task, row.model, row.seed, series))
    return found


def _task_curves(curves: list[RunCurves]) -> dict[str, set[str]]:
    """Each task's curve names: a name is a curve in all the task's runs or in none."""
    tasks = {c.task for c in curves}
    return {t: curve_names(c.series for c in curves if c.task == t) for t in tasks}


def curves_json(curves: list[RunCurves]) -> list[dict[str, Any]]:
    """report.json's `curves`: every point, `[step or null, run-clock seconds, value]`;
    `curve` false for a one-off number."""
    names = _task_curves(curves)
    return [
        {
            "run_id": c.run_id,
            "task": c.task,
            "model": c.model,
            "seed": c.seed,
            "series": [
                {
                    "name": s.name,
                    "source": s.source,
                    "curve": s.name in names[c.task],
                    "thinned": s.thinned,
                    "points": [[p.step, p.wall, p.value] for p in s.points],
                }
                for s in c.series
            ],
        }
        for c in curves
    ]


def png_name(task: str) -> str:
    """A task's curves file: its name with anything but `[A-Za-z0-9._-]` as `_`."""
    return f"curves-{re.sub(r'[^A-Za-z0-9._-]', '_', task) or 'task'}.png"


def curves_markdown(curves: list[RunCurves], plotted: bool) -> str:
    """report.md's section (empty where no run has a series): a row a curve, and the
    one-off numbers in a table of their own."""
    if not curves:
        return ""
    names = _task_curves(curves)
    lines = [
        "",
        "## Training curves",
        "",
        "Read from what each run's jobs and commands printed and the metrics files they "
        "wrote (a sample where `thinned` counts points left out).",
        "",
    ]
    drawn = sorted(t for t in names if names[t]) if plotted else []
    for task in drawn:
        lines.append(f"![curves: {_cell(task)}]({png_name(task)})")
    if drawn:
        lines.append("")
    rows = [(c, s) for c in curves for s in c.series if s.name in names[c.task]]
    if rows:
        lines += [
            "| run | series | source | points | first → last | min | max | thinned |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
    for c, s in rows:
        values = [p.value for p in s.points]
        lines.append(
            f"| {_cell(c.run_id)} | {_cell(s.name)} | {_cell(s.source)} | {len(values)} | "
            f"{values[0]:.4g} → {values[-1]:.4g} | {min(values):.4g} | {max(values):.4g} "
            f"| {s.thinned} |"
        )
    once = [(c, s) for c in curves for s in c.series if s.name not in names[c.task]]
    if once:
        lines += [
            *([""] if rows else []),
            "One-off numbers: read once, or the same at every reading (a setting or a size "
            "a script printed, `d=128`), so listed here rather than drawn.",
            "",
            "| run | number | source | value | readings |",
            "| --- | --- | --- | --- | --- |",
        ]
        for c, s in once:
            lines.append(
                f"| {_cell(c.run_id)} | {_cell(s.name)} | {_cell(s.source)} | "
                f"{s.points[-1].value:.4g} | {len(s.points)} |"
            )
    return "\n".join(lines) + "\n"


def panel_names(runs: list[RunCurves]) -> list[str]:
    """A task's panels: its curve names only (a one-off number is a dot, and took the
    panel of tiny-lm's `valid`), the most common first, `loss` before the rest."""
    curves = curve_names(c.series for c in runs)
    counts: dict[str, int] = {}
    for c in runs:
        for s in c.series:
            if s.name in curves:
                counts[s.name] = counts.get(s.name, 0) + 1
    return sorted(counts, key=lambda n: (-counts[n], "loss" not in n, n))[:PANELS]


def plot_curves(out: Path, curves: list[RunCurves]) -> list[str]:
    """`curves-<task>.png` for each task with a curve (one-off numbers alone draw
    none); the names written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[str] = []
    colours = {m: f"C{i % 10}" for i, m in enumerate(sorted({c.model for c in curves}))}
    for task in sorted({c.task for c in curves}):
        runs = [c for c in curves if c.task == task]
        names = panel_names(runs)
        if not names:
            continue
        fig, axes = plt.subplots(
            1, len(names), figsize=(max(4.5, 4.0 * len(names)), 3.5), squeeze=False
        )
        for ax, name in zip(axes[0], names, strict=True):
            labelled: set[str] = set()
            values: list[float] = []
            steps = True
            for c in runs:
                for s in (s for s in c.series if s.name == name):
                    steps = steps and s.has_steps
            for c in runs:
                for s in (s for s in c.series if s.name == name):
                    xs = [p.step if steps and p.step is not None else p.wall / 60 for p in s.points]
                    ys = [p.value for p in s.points]
                    values += ys
                    label = plot_text(c.model) if c.model not in labelled else None
                    labelled.add(c.model)
                    # A run's single reading of a curve (it stopped there): a dot.
                    marker = "o" if len(xs) == 1 else None
                    ax.plot(xs, ys, color=colours[c.model], alpha=0.8, label=label, marker=marker)
            if values and min(values) > 0 and max(values) > 10 * min(values):
                ax.set_yscale("log")
            ax.set_title(plot_text(name, 60), fontsize=9)
            ax.set_xlabel("step" if steps else "run clock (minutes)")
            if labelled:
                ax.legend(fontsize=7)
        fig.suptitle(plot_text(task, 80), fontsize=10)
        fig.tight_layout()
        fig.savefig(out / png_name(task), dpi=100)
        plt.close(fig)
        written.append(png_name(task))
    return written
