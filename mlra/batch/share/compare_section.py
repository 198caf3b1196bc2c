"""The shared batch page's "Runs compared": what `mlra report`'s section of that name
holds (batch/compare/report_md.py), as HTML, with the curves drawn.

Per task with two runs or more (the first `MAX_RUNS`): the matrix, runs as columns
each marked by its colour, the settings that differ (with a count of the alike ones
hidden) and the best score starred; then the runs' curves overlaid, one fixed colour a
run as `mlra compare` gives it (batch/compare/overlay.py), and their best validation
so far. Above the tasks, the paired tables where two models (or settings) ran the same
tasks. Every text from a run is redacted and escaped as the rest of the page is
(text.py); the colours are mlra's own classes, never a run's text in an attribute.

The curves are thinned as a run's own page thins them (each bucket's extremes kept)
and drawn with fewer buckets while they would take more than their share of the
page's budget, none left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlra.batch.compare.matrix import BEST, Matrix, build
from mlra.batch.compare.overlay import COLOURS, Line, best_so_far, overlay
from mlra.batch.compare.paired import Paired, side_text
from mlra.batch.compare.report_md import compared
from mlra.batch.compare.runs import MAX_RUNS, ComparedRun
from mlra.batch.report_rows import RunRow
from mlra.batch.share.curves_svg import MAX_BUCKETS, Pt, Thinned, lines_svg
from mlra.batch.share.text import Redactor, esc_line

MIN_BUCKETS = 25


class _Text:
    """A run's text as page text: redacted, then escaped on one line."""

    def __init__(self, redact: Redactor) -> None:
        self.redact = redact

    def __call__(self, text: str) -> str:
        return esc_line(self.redact(text))


def _colour(index: int) -> str:
    """The run's colour class (page.py's style has one a colour of overlay.COLOURS)."""
    return f"c{index % len(COLOURS)}"


def _swatch(index: int) -> str:
    return f'<span class="{_colour(index)}">■</span>'


def _legend(runs: list[ComparedRun], line: _Text) -> str:
    return "<br>" + " ".join(f"{_swatch(i)} {line(r.label)}" for i, r in enumerate(runs))


def _matrix_html(m: Matrix, line: _Text) -> str:
    out = ["<table><tr><th></th>"]
    out += [f"<th>{_swatch(i)} {line(run_id)}</th>" for i, run_id in enumerate(m.runs)]
    out.append("</tr>")
    for row in m.rows:
        cells = []
        for i, cell in enumerate(row.cells):
            text = line(cell)
            best = row.name == m.metric and i in m.best
            cells.append(f"<td>{f'<b>{text}</b>' if best else text}</td>")
        kind = ' class="dim"' if row.section == "settings" else ""
        out.append(f"<tr><th{kind}>{line(row.name)}</th>{''.join(cells)}</tr>")
    out.append("</table>")
    notes = []
    if m.best:
        notes.append(f"{BEST} the best {line(m.metric)}{m.best_of}")
    if m.same_hidden:
        notes.append(f"{m.same_hidden} settings alike in every run, not shown")
    if notes:
        out.append(f'<p class="dim">{"; ".join(notes)}.</p>')
    return "".join(out) + "\n"


def _num(value: float | None, signed: bool = False) -> str:
    return "-" if value is None else f"{value:+.4g}" if signed else f"{value:.4g}"


def _paired_html(table: Paired, line: _Text) -> str:
    rows = "".join(
        f'<tr><td>{line(r.task)}</td><td class="num">{side_text(r.a, r.a_n, r.a_runs)}</td>'
        f'<td class="num">{side_text(r.b, r.b_n, r.b_runs)}</td>'
        f'<td class="num">{_num(r.diff, True)}</td>'
        f"<td>{r.outcome}</td></tr>"
        for r in table.rows
    )
    return (
        f"<h3>Paired by {table.by}: {line(table.b)} against {line(table.a)}</h3>"
        f"<p>{table.wins} wins, {table.losses} losses, {table.ties} ties "
        '<span class="dim">(per task: each side\'s mean score, second minus first)</span></p>'
        f"<table><tr><th>task</th><th>{line(table.a)}</th><th>{line(table.b)}</th>"
        f"<th>difference</th><th>outcome</th></tr>{rows}</table>\n"
    )


class _Curves:
    """One task's overlaid curves, each line thinned once, drawn at any bucket count."""

    def __init__(self, runs: list[ComparedRun]) -> None:
        over = overlay(runs, "time")
        self.figures: list[tuple[str, list[tuple[int, Thinned]], bool]] = []
        for panel, name in over.panels.items():
            lines = over.lines.get(panel, [])
            self.figures.append((name, [(ln.run, _thinned(ln)) for ln in lines], False))
        best = best_so_far(runs)
        if best:
            self.figures.append(
                ("best validation so far", [(b.run, _thinned(b)) for b in best], True)
            )

    def html(self, buckets: int, legend: str, line: _Text) -> str:
        out = []
        for title, lines, stairs in self.figures:
            drawn: list[tuple[str, list[Pt]]] = [
                (f"line {_colour(run)}", _points(t, buckets, stairs)) for run, t in lines
            ]
            out.append(lines_svg(line.redact(title), drawn, "s", legend=legend))
        return "".join(out)

    def left_out(self, buckets: int) -> int:
        """Points read but not drawn (the stairs are drawn whole)."""
        return sum(
            t.read - len(t.points(buckets))
            for _, lines, stairs in self.figures
            if not stairs
            for _, t in lines
        )


def _thinned(line: Line) -> Thinned:
    t = Thinned()
    for x, y in zip(line.x, line.y, strict=True):
        t.add(None, x, y)
    return t


def _points(t: Thinned, buckets: int, stairs: bool) -> list[Pt]:
    """A line's points; stairs (a best so far) are drawn whole, being few and a shape
    thinning would bend."""
    kept = t.points(len(t.buckets) if stairs else buckets)
    return sorted(((p[1], p[2]) for p in kept), key=lambda p: p[0])


def comparison(
    folder: Path, rows: list[RunRow], redact: Redactor, curves_budget: int
) -> tuple[str, dict[str, Any]]:
    """The section's HTML (empty where nothing compares) and its data for the page's
    JSON; the curves within about `curves_budget` bytes."""
    tasks, tables = compared(folder, rows)
    if not tasks and not tables:
        return "", {}
    line = _Text(redact)
    parts = [
        '<h2>Runs compared</h2><p class="dim">Each task\'s runs side by side, as '
        "<code>mlra compare</code> shows them: one colour a run in its column and its "
        "curves; the settings that differ; the best score starred.</p>\n"
    ]
    parts += [_paired_html(t, line) for t in tables]
    shown = {task: runs[:MAX_RUNS] for task, runs in tasks.items()}
    curves = {task: _Curves(runs) for task, runs in shown.items()}
    legends = {task: _legend(runs, line) for task, runs in shown.items()}
    buckets = MAX_BUCKETS
    while buckets > MIN_BUCKETS and curves_budget < sum(
        len(c.html(buckets, legends[t], line)) for t, c in curves.items()
    ):
        buckets //= 2  # many curves: each drawn from fewer buckets, none left out
    data: dict[str, Any] = {"tasks": {}, "paired": []}
    thinned = 0
    for task, runs in shown.items():
        m = build(runs)
        parts.append(f"<h3>{line(task or '(no task)')}</h3>")
        if len(tasks[task]) > MAX_RUNS:
            parts.append(f"<p>The first {MAX_RUNS} of its {len(tasks[task])} runs.</p>")
        parts.append(_matrix_html(m, line))
        parts.append(curves[task].html(buckets, legends[task], line) + "\n")
        thinned += curves[task].left_out(buckets)
        data["tasks"][redact(task)] = {
            "runs": [redact(r) for r in m.runs],
            "best": [redact(m.runs[i]) for i in sorted(m.best)],
        }
    if thinned:
        parts.append(
            f'<p class="dim">Curve points thinned, each bucket\'s extremes kept: {thinned:,}.</p>\n'
        )
    data["paired"] = [
        {"a": redact(t.a), "b": redact(t.b), "by": t.by, "wins": t.wins, "losses": t.losses,
         "ties": t.ties}
        for t in tables
    ]  # fmt: skip
    data["curve_points_thinned"] = thinned
    return "".join(parts), data
