"""`mlra compare`'s console screen: the matrix (runs as columns, each run's letter in
its colour), the runs' curves overlaid (one panel a scale, one colour a run, the same
colour in every view), the best validation so far against time, and on keys the diffs
of two runs' submitted files, prompts and settings.

What is shown is batch/compare/'s (pure functions over the runs' logs, the same the
`--no-tui` tables print); this module only draws it. Everything a run's log says is
drawn as text (never read as markup), with its control characters escaped. plotext is
imported with this module, which the command line imports only when the screen opens.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import ContentSwitcher, Static
from textual_plotext import PlotextPlot

from mlra.batch.compare import matrix as matrix_of
from mlra.batch.compare.diffs import prompts_diff, settings_diff
from mlra.batch.compare.overlay import (
    Line,
    X,
    best_so_far,
    colour,
    curves_from_attempts,
    overlay,
    rgb,
)
from mlra.batch.compare.paired import paired, side_text
from mlra.batch.compare.runs import ComparedRun
from mlra.console.screens.attempt_screens import PickAttemptScreen
from mlra.console.screens.screens import DiffScreen
from mlra.console.text.attempt_files import workspaces_diff
from mlra.console.text.compare_text import MAX_NAME, letter, name_cut
from mlra.console.text.curves_data import decimated
from mlra.terminal_text import printable_line

KEYS = "m matrix · c curves · b best val · x step/time · a all · d/p/s diff · q quit"
MIN_ROOM = 120
"""Points drawn a line at least, however narrow the plot (curves_data.decimated)."""
MINUTES_PAST_S = 600.0
"""Past this many run-clock seconds the time axis counts minutes."""


def matrix_table(runs: list[ComparedRun], metric: str | None, *, all_settings: bool) -> Group:
    """The legend (each run's letter, colour and id) above the matrix, and the paired
    tables under it."""
    m = matrix_of.build(runs, metric, all_settings=all_settings)
    legend = Text()
    for i, run in enumerate(runs):
        legend.append(f"■ {letter(i)} ", style=f"bold {colour(i)}")
        legend.append(printable_line(run.label) + "\n")
    table = Table(box=None, pad_edge=False, expand=False, show_edge=False)
    table.add_column("", no_wrap=True, style="bold", max_width=MAX_NAME, overflow="ellipsis")
    for i in range(len(runs)):
        table.add_column(
            Text(letter(i), style=f"bold {colour(i)}"), no_wrap=True, overflow="ellipsis"
        )
    section = "outcome"
    for row in m.rows:
        if row.section != section:
            section = row.section
            table.add_row(Text("settings", style="italic"))
        star = row.name == m.metric
        cells = [
            Text(printable_line(c), style="bold" if star and i in m.best else "")
            for i, c in enumerate(row.cells)
        ]
        table.add_row(Text(name_cut(row.name, MAX_NAME)), *cells)
    parts: list[Text | Table] = [legend, table]
    notes = Text()
    if m.best:
        notes.append(f"\n* best {m.metric}{m.best_of}")
    if m.tasks_apart:
        notes.append(f"\n{printable_line(m.tasks_apart)}")
    if m.same_hidden:
        notes.append(f"\n{m.same_hidden} settings alike in every run, not shown (a shows them)")
    parts.append(notes)
    for t in paired(runs, metric):
        lines = Text(
            f"\npaired by {t.by}, {printable_line(t.b)} against {printable_line(t.a)}: "
            f"{t.wins} wins, {t.losses} losses, {t.ties} ties\n"
        )
        for r in t.rows:
            diff = "-" if r.diff is None else f"{r.diff:+.4g}"
            sides = f"{side_text(r.a, r.a_n, r.a_runs)} → {side_text(r.b, r.b_n, r.b_runs)}"
            lines.append(f"  {printable_line(r.task)}  {sides}  {diff}  {r.outcome}\n")
        parts.append(lines)
    return Group(*parts)


class CompareApp(App[int]):
    """The comparison; q quits."""

    CSS_PATH = str(Path(__file__).parent.parent / "mlra.tcss")
    BINDINGS = [
        Binding("q,escape", "quit_compare", "Quit"),
        Binding("m", "show('matrix')", "Matrix"),
        Binding("c", "show('curves')", "Curves"),
        Binding("b", "show('best')", "Best validation"),
        Binding("x", "toggle_x", "Step/time"),
        Binding("a", "toggle_all", "All settings"),
        Binding("d", "diff('files')", "Files diff"),
        Binding("p", "diff('prompts')", "Prompts diff"),
        Binding("s", "diff('settings')", "Settings diff"),
    ]
    DEFAULT_CSS = """
    #compare-title { height: 1; padding: 0 1; background: $panel; }
    #compare-views { height: 1fr; }
    #compare-matrix { padding: 0 1; }
    #compare-curves PlotextPlot { height: 1fr; }
    #compare-best PlotextPlot { height: 1fr; }
    #compare-keys { height: 1; padding: 0 1; color: $text-muted; }
    """

    def __init__(
        self,
        runs: list[ComparedRun],
        *,
        metric: str | None = None,
        x: X = "time",
        all_settings: bool = False,
    ) -> None:
        super().__init__()
        self.runs = runs
        self.metric = metric
        self.x: X = x
        self.all_settings = all_settings
        self.view = "matrix"

    def compose(self) -> ComposeResult:
        yield Static(id="compare-title", markup=False)
        with ContentSwitcher(initial="compare-matrix-view", id="compare-views"):
            with VerticalScroll(id="compare-matrix-view"):
                yield Static(id="compare-matrix")
            with Vertical(id="compare-curves"):
                yield PlotextPlot(id="plot-loss")
                yield PlotextPlot(id="plot-score")
            with Vertical(id="compare-best"):
                yield PlotextPlot(id="best-0")
        yield Static(KEYS, id="compare-keys", markup=False)

    def on_mount(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        table = matrix_table(self.runs, self.metric, all_settings=self.all_settings)
        self.query_one("#compare-matrix", Static).update(table)
        shown = overlay(self.runs, self.x, self.metric)
        # One plot a panel: loss and score, or each task's where the runs have several.
        panels = [p for p in shown.panels if shown.lines.get(p)] or ["loss"]
        for plot, panel in zip(self._plots("compare-curves", len(panels)), panels, strict=True):
            name = shown.panels.get(panel, "")
            title = name + panel.partition(" · ")[1] + panel.partition(" · ")[2]
            self._plot(
                plot, shown.lines.get(panel, []), title if name else "no curves recorded",
                by_step=self.x == "step",
            )  # fmt: skip
        # Each task's validations apart, as its curves: two tasks' metrics are no one scale.
        tasks = list(dict.fromkeys(r.task for r in self.runs))
        best = best_so_far(self.runs)
        groups = [("", best)]
        if len(tasks) > 1:
            by_task = [(t, [b for b in best if self.runs[b.run].task == t]) for t in tasks]
            groups = [(t, lines) for t, lines in by_task if lines] or groups
        for plot, (task, lines) in zip(
            self._plots("compare-best", len(groups)), groups, strict=True
        ):
            title = "best validation so far" if lines else "no validation recorded"
            if task:
                title = f"best {lines[0].label} so far · {task}"
            self._plot(plot, lines, title, by_step=False)
        title = f"Compare · {len(self.runs)} runs · {self.view}"
        if self.view == "curves":
            title += f" · x: {self.x}"
            if shown.no_steps:
                title += f" · {shown.no_steps} series without steps left out"
            letters = [letter(i) for i in range(len(self.runs))]
            if said := curves_from_attempts(self.runs, letters):
                title += f" · curves of {said}"
        self.query_one("#compare-title", Static).update(Text(title))

    def _plots(self, box_id: str, n: int) -> list[PlotextPlot]:
        """The first `n` plots of a view (made as needed), the rest hidden."""
        box = self.query_one(f"#{box_id}", Vertical)
        plots = list(box.query(PlotextPlot))
        for i in range(len(plots), n):
            plots.append(PlotextPlot(id=f"{box_id}-{i}"))
            box.mount(plots[-1])
        for i, plot in enumerate(plots):
            plot.display = i < n
        return plots[:n]

    def _plot(self, plot: PlotextPlot, lines: list[Line], title: str, *, by_step: bool) -> None:
        minutes = not by_step and any(x > MINUTES_PAST_S for line in lines for x in line.x)
        scale = 60.0 if minutes else 1.0
        # Each cell's lowest and highest point, as the Curves view draws (plotext's cost
        # grows with the points: 10 runs of 50,000 points each draw in a blink so).
        room = max(MIN_ROOM, 2 * plot.size.width)
        plt = plot.plt
        plt.clear_figure()
        plt.title(printable_line(title))
        for line in lines:
            xs, ys = decimated(line.x, line.y, room)
            if xs:
                plt.plot(
                    [x / scale for x in xs],
                    ys,
                    label=letter(line.run),
                    color=rgb(line.run),
                    marker="braille",
                )
        plt.xlabel("step" if by_step else "run clock (min)" if minutes else "run clock (s)")
        plot.refresh()

    # --- keys -------------------------------------------------------------------------

    def action_quit_compare(self) -> None:
        self.exit(0)

    def action_show(self, view: str) -> None:
        self.view = view
        target = {"matrix": "compare-matrix-view", "curves": "compare-curves"}
        self.query_one(ContentSwitcher).current = target.get(view, "compare-best")
        self.redraw()

    def action_toggle_x(self) -> None:
        self.x = "time" if self.x == "step" else "step"
        self.redraw()

    def action_toggle_all(self) -> None:
        self.all_settings = not self.all_settings
        self.redraw()

    def action_diff(self, what: str) -> None:
        """The first run against another: the second where there are two, else the one
        picked."""
        first = self.runs[0]
        if len(self.runs) == 2:
            self._show_diff(what, first, self.runs[1])
            return
        choices = [
            (str(i), Text(f"{letter(i)} {printable_line(r.id)}"))
            for i, r in enumerate(self.runs)
            if i
        ]

        def chosen(picked: str | None) -> None:
            if picked is not None:
                self._show_diff(what, first, self.runs[int(picked)])

        self.push_screen(PickAttemptScreen(f"Diff {letter(0)} ({what}) with…", choices), chosen)

    def _show_diff(self, what: str, a: ComparedRun, b: ComparedRun) -> None:
        la, lb = letter(self.runs.index(a)), letter(self.runs.index(b))
        title = f"{la} → {lb}: their {'submitted files' if what == 'files' else what}"
        if what == "prompts":
            self.push_screen(DiffScreen(title, prompts_diff(a, b), key="p"))
        elif what == "settings":
            self.push_screen(DiffScreen(title, settings_diff(a, b), key="s"))
        else:
            self.run_worker(
                self._files_diff(title, a, b), group="compare-diff", exit_on_error=False
            )

    async def _files_diff(self, title: str, a: ComparedRun, b: ComparedRun) -> None:
        if not a.submission_dir.is_dir() and not b.submission_dir.is_dir():
            self.notify("neither run submitted files", severity="warning", markup=False)
            return
        diff = await asyncio.to_thread(
            workspaces_diff, a.submission_dir, b.submission_dir, a.id, b.id
        )
        self.push_screen(DiffScreen(title, diff or "(the same files)"))
