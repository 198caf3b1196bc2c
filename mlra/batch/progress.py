"""The batch's live display: rich progress bars on a terminal, plain lines elsewhere.

What happened to a run is told in words that may quote it (a run's id, a node's
refusal, the last line of its log): shown with control characters escaped
(mlra/terminal_text.py), and never read as Rich markup.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from mlra.batch.run_ids import without_mac
from mlra.batch.runner import Progress
from mlra.durations import format_duration
from mlra.terminal_text import printable_line


def summary(p: Progress) -> str:
    unscored = f"{p.count('unscored')} unscored · " if p.count("unscored") else ""
    retries = f" · {p.retries} {'retry' if p.retries == 1 else 'retries'}" if p.retries else ""
    retries += f" · {p.lost} lost with a node" if p.lost else ""
    return (
        f"{p.count('finished')}/{p.total} done · {unscored}{p.running} running · "
        f"{p.queued} queued · {p.gave_up} failed{retries} · {format_duration(p.elapsed_s)} · "
        f"${p.cost_usd:.2f}"
    )


EVERY_S = 30.0
"""While runs run with nothing printed, a line for each at least this often."""


def running_lines(p: Progress, *, short: bool = False) -> list[str]:
    """Each running run's clock and newest progress, as its log tells them; `short`: its
    id without the mac."""
    return [
        f"{printable_line(without_mac(s.run_id) if short else s.run_id)} running"
        + (f" {printable_line(s.glance)}" if s.glance else "")
        for s in sorted(p.statuses.values(), key=lambda s: s.run_id)
        if s.kind == "running"
    ]


class PlainProgress:
    """One line per run started or ended, and while runs go on with nothing to say, a
    line for each running run every `every_s`: readable in CI logs and when piped."""

    def __init__(self, stream: TextIO | None = None, *, every_s: float = EVERY_S) -> None:
        self.stream = stream or sys.stdout
        self.every_s = every_s
        self._shown = 0
        self._printed_at = 0.0

    def __call__(self, p: Progress) -> None:
        lines = [printable_line(event) for event in p.events[self._shown :]]
        self._shown = len(p.events)
        if not lines and p.elapsed_s - self._printed_at >= self.every_s:
            lines = running_lines(p)
        if not lines:
            return
        for line in lines:
            self.stream.write(f"[{summary(p)}] {line}\n")
        self._printed_at = p.elapsed_s
        self.stream.flush()

    def close(self) -> None:
        pass


class RichProgress:
    """Bars for done and failed runs, counts of running ones, elapsed time and cost."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        from rich.table import Column

        self.console = console or Console()
        self.bars = Progress(
            TextColumn("{task.description:<8}"),
            BarColumn(bar_width=24),  # the default 40 left one run's progress no room
            MofNCompleteColumn(),
            # The line of what happened gives way, cut with "…": left to Rich, a long one
            # (a run id or two) squeezed the bar away and cut the count to "1…".
            TextColumn(
                "{task.fields[info]}",
                markup=False,
                table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1),
            ),
            console=self.console,
            transient=False,
            expand=True,
        )
        self.done = self.bars.add_task("done", total=1, info="")
        self.failed = self.bars.add_task("failed", total=1, info="")
        self.bars.start()

    def __call__(self, p: Progress) -> None:
        info = f"{p.running} running · {p.queued} queued · {format_duration(p.elapsed_s)} · ${p.cost_usd:.2f}"
        running = running_lines(p, short=True)
        # One run: its progress beside the counts, in place of its start said again (the
        # id twice, whole, left a 160-column line no room for the progress).
        if p.last_event and not (len(running) == 1 and p.last_event.startswith("running ")):
            info += f" · {printable_line(p.last_event)}"
        if len(running) == 1:
            info += f" · {running[0]}"
        self.bars.update(self.done, total=p.total, completed=p.count("finished"), info=info)
        self.bars.update(self.failed, total=p.total, completed=p.gave_up, info="")

    def close(self) -> None:
        self.bars.stop()


def make_display(plain: bool) -> PlainProgress | RichProgress:
    if plain or not sys.stdout.isatty():
        return PlainProgress()
    return RichProgress()
