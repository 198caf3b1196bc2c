"""The Experiments pane: the validation score over time as a small chart, the best
so far highlighted, above the table of experiments (the worker's hypothesis and
change, the job, the score, when). It sits above the Resources pane's clock, so
how the score moves reads against the time left.

Everything comes from the run's state fold (agent/record/experiments.py), so a replay
shows the table as of the event under its cursor. The pane stays hidden until
the worker has noted or validated something: a run that never validates keeps
the layout it always had.
"""

from __future__ import annotations

from typing import Unpack

from rich.text import Text
from textual.widgets import Static

from mlra import events as ev
from mlra.agent.record.experiments import ExperimentTable
from mlra.agent.record.state import RunState
from mlra.console.panes import WidgetOptions, redraw
from mlra.durations import format_duration
from mlra.terminal_text import printable_line

BLOCKS = " ▁▂▃▄▅▆▇█"
CHART_ROWS = 3
ROWS_SHOWN = 3
"""Table rows in the pane: the best one always, then the latest."""
BEST = "bold green"
OUT_OF_TIME = "yellow"
"""A try its time ended before it was scored (a search's attempt out of time): marked ◷,
as the Attempts pane marks it, apart from a failed one's red ×."""
SHORT_BELOW = 36
"""Terminals lower than this get the short form: the summary, a one-line chart and the
best row, so the plan and the clock keep their room at 80x24."""


def score_text(score: float | None) -> str:
    return "—" if score is None else f"{score:.4g}"


def chart(table: ExperimentTable, width: int, rows: int = CHART_ROWS) -> list[Text]:
    """The scores as bars, oldest left, an experiment a column (up to three wide while few
    fit), the lowest score a quarter high so it still shows; best-so-far bars green, the
    others dim, a failed validation a red × at the bottom (a try out of time a yellow ◷)."""
    rows_shown = table.rows[-width:]
    series = table.series()[-width:]
    scores = [s for _, s, _ in series if s is not None]
    lines = [Text() for _ in range(rows)]
    if not series:
        return lines
    column = max(1, min(3, width // len(series)))
    bar, gap = (column - 1 or 1), (" " if column > 1 else "")
    low, high = (min(scores), max(scores)) if scores else (0.0, 0.0)
    eighths = len(BLOCKS) - 1
    levels = rows * eighths
    for row, (_, score, best) in zip(rows_shown, series, strict=True):
        if score is None:
            mark, style = ("◷", OUT_OF_TIME) if out_of_time(table, row) else ("×", "red")
            for i, line in enumerate(lines):
                line.append((mark if i == rows - 1 else " ") * bar + gap, style=style)
            continue
        frac = (score - low) / (high - low) if high > low else 1.0
        height = round((0.25 + 0.75 * frac) * levels)
        for i, line in enumerate(lines):
            fill = min(eighths, max(0, height - (rows - 1 - i) * eighths))
            line.append(BLOCKS[fill] * bar, style=BEST if best else "dim")
            line.append(gap)
    return lines


def summary(table: ExperimentTable, width: int = 80) -> Text:
    """One line: the best score, which experiment, how many, and the metric's direction
    (its name too where it fits)."""
    out = Text()
    best = table.best
    count = len(table.rows)
    if best is None or best.score is None:
        out.append("no score yet", style="dim")
    else:
        out.append("best ", style="bold")
        out.append(score_text(best.score), style=BEST)
        out.append(f" #{best.number}")
    arrow = "↑" if table.higher_is_better else "↓"
    # Each row is one validated try (of the run's work or an attempt's), not a run.
    runs = f" · {count} tr{'ies' if count != 1 else 'y'}"
    metric = f" · {printable_line(table.metric)} {arrow}" if table.metric else ""
    if len(out.plain) + len(runs) + len(metric) > width:
        metric = f" {arrow}" if table.metric else ""
    out.append(runs + metric, style="dim")
    return out


def short_row(table: ExperimentTable, row: ev.Experiment, width: int) -> Text:
    """A row on one line: number, score and what was tried."""
    best = row is table.best
    late = out_of_time(table, row)
    head = f"#{row.number}{'★' if best else ' '} {'◷' if late else score_text(row.score)} "
    what = row.hypothesis or row.change or _unnoted(table, row)
    out = Text(head, style=BEST if best else OUT_OF_TIME if late else "")
    out.append(_cut(what, width - len(head)), style="" if row.hypothesis else "dim")
    return out


def table_lines(table: ExperimentTable, width: int, shown: int = ROWS_SHOWN) -> Text:
    """The latest rows (and the best, where it is older), newest first, two lines each:
    number, score, run clock and job, then the hypothesis (or the change, where the note
    gave none)."""
    out = Text()
    best = table.best
    rows = table.rows[-shown:]
    if best is not None and best not in rows:
        rows = [best, *rows[1:]]
    for row in reversed(rows):
        style = BEST if row is best else ""
        mark = "★" if row is best else " "
        head = f"#{row.number}{mark}"
        out.append(f"{head:<5}{score_text(row.score):>8}  at {format_duration(row.t)}", style=style)
        if out_of_time(table, row):
            out.append("  out of time", style=OUT_OF_TIME)
        if row.job:
            out.append(f"  {printable_line(row.job)}", style="dim")
        out.append("\n")
        what = row.hypothesis or row.change or _unnoted(table, row)
        out.append(f"     {_cut(what, width - 5)}\n", style="" if row.hypothesis else "dim")
    if len(table.rows) > len(rows):
        out.append(f"… {len(table.rows) - len(rows)} earlier\n", style="dim")
    if table.pending is not None:
        out.append("next ", style="bold")
        out.append(f"{_cut(table.pending.hypothesis, width - 5)}\n", style="italic")
    return out


def _cut(text: str, room: int) -> str:
    """The worker's words on one line, cut to `room`, shown and not obeyed."""
    text = " ".join(text.split())
    room = max(4, room)
    return printable_line(text if len(text) <= room else text[: room - 1] + "…")


def out_of_time(table: ExperimentTable, row: ev.Experiment) -> bool:
    """The row's try ended unscored because its time ran out (`Validation.out_of_time`)."""
    validation = table.validation_of(row)
    return validation is not None and not validation.ok and validation.out_of_time


def _unnoted(table: ExperimentTable, row: ev.Experiment) -> str:
    validation = table.validation_of(row)
    if validation is not None and not validation.ok:
        word = "out of time: " if validation.out_of_time else "failed: "
        return word + (validation.error or "invalid")
    return "(no note)"


class ExperimentsPane(Static):
    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._shown: RunState | None = None

    def on_mount(self) -> None:
        self.border_title = "Experiments"
        self.display = False

    def on_resize(self) -> None:
        if self._shown is not None:
            self.call_after_refresh(self._reshow)

    def _reshow(self) -> None:
        if self._shown is not None and self.is_attached:
            self.show(self._shown)

    def show(self, state: RunState) -> None:
        self._shown = state
        table = state.experiments
        wanted = bool(table.rows or table.notes)
        if self.display != wanted:
            self.display = wanted
        if not wanted:
            return
        width = max(20, self.size.width or 38)
        out = summary(table, width)
        out.append("\n")
        if self.app.size.height < SHORT_BELOW:
            if table.rows:
                out.append_text(chart(table, width, rows=1)[0])
                out.append("\n")
                out.append_text(short_row(table, table.best or table.rows[-1], width))
            elif table.pending is not None:
                out.append(f"next {_cut(table.pending.hypothesis, width - 5)}", style="italic")
            redraw(self, out)
            return
        if table.rows:
            for line in chart(table, width):
                out.append_text(line)
                out.append("\n")
        out.append_text(table_lines(table, width))
        out.rstrip()
        redraw(self, out)
