"""The Curves view (`v`, live and in replay): the numbers the run's jobs and commands
printed or wrote (`metrics` events, folded in console/text/curves_data.py) as curves, with
the validation scores beside them.

A full screen of its own, so it reads at 80x24: the series on the left (Space picks
which are overlaid: a job's, a command's, a file's, each attempt's of a search), the
plot on the right, one panel a scale (losses above, accuracies and other scores below,
by the compare screen's rule, batch/compare/overlay.py's `panel_of`), so a loss of 4
never flattens an accuracy of 0.78 into one row. The console's own keys still work beneath it (a replay's arrows
move the cursor and the curves follow it; a live run's Space pauses it).

Where the curves come from is a `CurvesSource`: the live console's fold of its batched
events (`MlraApp.curves`, an attached console's too) with each attempt's own log read
as it grows, or a replay's events up to the cursor (`seq` at most the cursor's; an
attempt's log up to the cursor's time).
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Protocol
from weakref import WeakKeyDictionary

from rich.segment import Segment
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.strip import Strip
from textual.widgets import SelectionList, Static
from textual.widgets.selection_list import Selection
from textual_plotext import PlotextPlot

from mlra.agent.record.eventlog import EVENTS_FILE
from mlra.agent.record.state import RunState
from mlra.batch.compare.overlay import Panel, panel_of
from mlra.batch.curves import axis_range
from mlra.console.panes.attempts import AttemptsPane
from mlra.console.panes.host import PaneHost
from mlra.console.text.attempt_files import attempt_folder
from mlra.console.text.curves_data import (
    FOLDED,
    NO_CURVES,
    CurveSet,
    Drawn,
    LogCurves,
    Series,
    drawn,
    no_curve_yet,
    origin_of,
    validations_drawn,
    x_axis_is_step,
)
from mlra.console.text.replay import ReplayModel
from mlra.terminal_text import printable_line


class Console(PaneHost, Protocol):
    """What the view reads of the console that opens it (console/apps/app.py's MlraApp):
    what its panes read, and the run's curves."""

    curves: CurveSet


POLL_S = 0.5
"""How often the open view looks for new points (it redraws only when there are)."""
MIN_ROOM = 120
"""Points drawn a series at least, however narrow the plot (see curves_data.decimated)."""
BOX_COLUMNS = 6
"""The list's checkbox, its gap and the scrollbar beside each name."""
MINUTES_PAST_S = 600.0
"""Past this many run-clock seconds the time axis counts minutes."""


class CurvesSource(Protocol):
    def curves(self) -> tuple[CurveSet, object]:
        """The curves now, and a token that changes whenever they do."""
        ...


class _Attempts:
    """Each attempt's own log, read as it grows (console/text/attempt_files.py's folders)."""

    def __init__(self, run_dir: Path | None) -> None:
        self.run_dir = run_dir
        self.logs: dict[str, LogCurves] = {}

    def curves(self, state: RunState, cut_ts: float | None) -> list[CurveSet]:
        out: list[CurveSet] = []
        for node in state.attempts.nodes.values():
            log = self.logs.get(node.id)
            if log is None:
                folder = attempt_folder(self.run_dir, node)
                if folder is None:
                    continue
                log = self.logs[node.id] = LogCurves(folder / EVENTS_FILE, node.id)
            out.append(log.curves(cut_ts))
        return out


class LiveCurves:
    """A live (or attached) console's curves: what its batched events folded."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.attempts = _Attempts(console.run_dir)

    def curves(self) -> tuple[CurveSet, object]:
        parts = self.attempts.curves(self.console.state, None)
        own = self.console.curves
        token = (own.version, *(p.version for p in parts))
        return (own.merged(parts) if parts else own), token


class ReplayCurves:
    """A replay's curves as of its cursor: the run's `metrics` and `validation` events
    up to it (indexed once; moving forward folds only the new ones)."""

    def __init__(self, model: ReplayModel) -> None:
        self.model = model
        self.indices = [i for i, kind in enumerate(model.events.types) if kind in FOLDED]
        self.attempts = _Attempts(model.run_dir)
        self._own = CurveSet()
        self._upto = 0
        """How many of `indices` `_own` has folded."""

    def at(self, cursor: int) -> CurveSet:
        k = bisect.bisect_right(self.indices, cursor)
        if k < self._upto:
            self._own, self._upto = CurveSet(), 0
        for i in self.indices[self._upto : k]:
            self._own.feed(self.model.events[i])
        self._upto = k
        return self._own

    def curves(self) -> tuple[CurveSet, object]:
        cursor = self.model.cursor
        own = self.at(cursor)
        state = self.model.state
        parts = self.attempts.curves(state, self.model.event.ts) if state.attempts.nodes else []
        token = (cursor, own.version, *(p.version for p in parts))
        return (own.merged(parts) if parts else own), token


class SeriesList(SelectionList[str]):
    """The series, a box each that shows an `X` only where its series is drawn
    (Textual's shows the `X` in every box, told apart by colour alone)."""

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        index = self.scroll_offset.y + y
        if index >= self.option_count:
            return strip
        if self.get_option_at_index(index).value in self.selected:
            return strip
        segments = list(strip)
        if len(segments) > 1 and segments[1].text.strip():
            segments[1] = Segment(" " * len(segments[1].text), segments[1].style)
        return Strip(segments, strip.cell_length)


class CurvesScreen(Screen[None]):
    """The series list and the plot; Escape (or v) closes."""

    BINDINGS = [
        Binding("escape,v", "close", "Close"),
        Binding("l", "toggle_log", "Log scale"),
        Binding("t", "toggle_axis", "Step/time"),
    ]
    DEFAULT_CSS = """
    CurvesScreen { layout: vertical; }
    CurvesScreen #curves-title { height: 1; padding: 0 1; background: $panel; }
    CurvesScreen #curves-body { height: 1fr; }
    CurvesScreen #curves-series { width: 28; height: 1fr; border: none; padding: 0; }
    CurvesScreen #curves-plots { width: 1fr; height: 1fr; }
    CurvesScreen #curves-plots PlotextPlot { height: 1fr; }
    CurvesScreen #curves-empty { width: 1fr; height: 1fr; padding: 1 2; }
    CurvesScreen #curves-keys { height: 1; padding: 0 1; color: $text-muted; }
    """

    def __init__(self, source: CurvesSource, *, focus_origin: str | None = None) -> None:
        """`focus_origin`: an attempt's id whose series are picked at first; by default
        the one selected in the Attempts pane (a search), else the newest source's."""
        super().__init__()
        self.source = source
        self.focus_origin = focus_origin
        self.log_scale = False
        self.by_step = False
        """Asked for; honoured only while every shown series has steps."""
        self.picked: set[str] | None = None
        """Series labels overlaid; None until the first curves arrive."""
        self._auto_pick = True
        """The picked series follow the default until the person picks (Space)."""
        self._token: object = None
        self._listed: list[str] = []
        self._prompts: list[str] = []
        self.curve_set = CurveSet()

    def compose(self) -> ComposeResult:
        yield Static(id="curves-title")
        with Horizontal(id="curves-body"):
            yield SeriesList(id="curves-series")
            with Vertical(id="curves-plots"):
                yield PlotextPlot(id="curves-plot-loss")
                yield PlotextPlot(id="curves-plot-score")
            yield Static(NO_CURVES, id="curves-empty")
        yield Static(
            "Space pick · l log scale · t step/time · Esc close", id="curves-keys", markup=False
        )

    def on_mount(self) -> None:
        if self.focus_origin is None:
            for pane in self.app.query(AttemptsPane):
                self.focus_origin = pane.selected if pane.display else None
        self.redraw()
        self.query_one(SelectionList).focus()
        self.set_interval(POLL_S, self._poll)

    def _poll(self) -> None:
        if self.is_attached and self.app.screen is self:
            self.redraw(only_if_changed=True)

    # --- what is shown --------------------------------------------------------------

    def _default_pick(self, curves: CurveSet) -> set[str]:
        """The focused attempt's series, else the newest source's; of those, the ones
        that are curves (agent/metrics/one_off.py: their values change). A training
        script's one-off lines (`tokenizer: 2048 tokens`, `model: d=128, layers=2`) read
        as series that never change; picked beside a loss of 4 they set the axis to 2048
        and flatten the curve a person opened the view for."""
        candidates = [
            s
            for s in curves.series.values()
            if (s.source.startswith(f"{self.focus_origin} ") if self.focus_origin else False)
        ] or [s for s in curves.series.values() if s.source == curves.last_source]
        # Only curves: before a loss has moved, a script's one-off numbers alone would be
        # a chart of dots at 2048 and 128 (the view says no curve has come yet instead).
        picked = [s for s in candidates if s.is_curve]
        # A search: every attempt's curve of those names overlaid, so the attempts
        # read against each other without picking each by hand.
        names = {s.name for s in picked if s.is_curve}
        overlaid = [
            s for s in curves.series.values() if origin_of(s) and s.name in names and s.is_curve
        ]
        return {s.label for s in [*picked, *overlaid]}

    def shown_series(self) -> list[Series]:
        picked = self.picked or set()
        return [s for s in self.curve_set.series.values() if s.label in picked]

    def redraw(self, *, only_if_changed: bool = False) -> None:
        curves, token = self.source.curves()
        if only_if_changed and token == self._token:
            return
        self._token = token
        self.curve_set = curves
        if (self.picked is None or self._auto_pick) and curves.series:
            # Until the person picks, the default follows the run (a loss's second
            # point turns it into a curve worth showing).
            self.picked = self._default_pick(curves)
        self._list_series()
        self._plot()

    def _list_series(self) -> None:
        """One line a series: its name and its newest value (what a person reads off a
        curve first), updated in place as points come."""
        listing = self.query_one(SelectionList[str])
        series = list(self.curve_set.series.values())
        labels = [s.label for s in series]
        names = self.curve_set.names()
        # Wide enough for every name and value whole (a third of the screen at most),
        # for every name at least (two fifths); a value that has no room left is left
        # off, a name cut only where a word ends (Textual's list takes one line).
        whole = [_prompt(s, names[s.label], None) for s in series]
        widest = max((p.cell_len for p in whole), default=0) + BOX_COLUMNS
        width = max(24, min(widest, self.size.width // 3 or widest))
        longest = max((len(n) for n in names.values()), default=0) + BOX_COLUMNS
        if width < longest:
            width = max(width, min(longest, self.size.width * 2 // 5))
        listing.styles.width = width
        prompts = [_prompt(s, names[s.label], width - BOX_COLUMNS) for s in series]
        picked = self.picked or set()
        with listing.prevent(SelectionList.SelectedChanged):
            if labels[: len(self._listed)] != self._listed:
                listing.clear_options()
                self._listed, self._prompts = [], []
            for index, prompt in enumerate(prompts[: len(self._prompts)]):
                if prompt.plain != self._prompts[index]:
                    listing.replace_option_prompt_at_index(index, prompt)
            for label, prompt in list(zip(labels, prompts, strict=True))[len(self._listed) :]:
                listing.add_option(Selection(prompt, label, label in picked))
            if self._auto_pick and set(listing.selected) != picked & set(labels):
                listing.deselect_all()
                for label in picked & set(labels):
                    listing.select(label)
        self._listed = labels
        self._prompts = [p.plain for p in prompts]
        if listing.highlighted is None and labels:
            listing.highlighted = 0

    def on_selection_list_selected_changed(
        self, message: SelectionList.SelectedChanged[str]
    ) -> None:
        self.picked = set(message.selection_list.selected)
        self._auto_pick = False
        self._plot()

    def _plot(self) -> None:
        series = self.shown_series()
        panels: tuple[Panel, ...] = ("loss", "score")
        plots: dict[Panel, PlotextPlot] = {
            panel: self.query_one(f"#curves-plot-{panel}", PlotextPlot) for panel in panels
        }
        empty = self.query_one("#curves-empty", Static)
        one_offs = 0 if series or self.curve_set.validations else self.curve_set.one_offs_only()
        has_any = bool(self.curve_set.series or self.curve_set.validations) and not one_offs
        self.query_one("#curves-plots").display = has_any
        empty.display = not has_any
        empty.update(no_curve_yet(one_offs) if one_offs else NO_CURVES)
        by_step = self.by_step and x_axis_is_step(series)
        # A cell's lowest and highest point is what a braille curve shows of it; plotext
        # takes ~8 ms a series this way, not ~20 for 2,000 points.
        room = max(MIN_ROOM, 2 * plots["loss"].size.width)
        names = self.curve_set.names()
        lines = drawn(
            series,
            by_step=by_step,
            log=self.log_scale,
            room=room,
            names=lambda s: names.get(s.label, s.label),
        )
        checks = validations_drawn(self.curve_set, series, by_step=by_step, log=self.log_scale)
        minutes = not by_step and any(
            x > MINUTES_PAST_S for d in [*lines, *([checks] if checks else [])] for x in d.x
        )
        scale = 60.0 if minutes else 1.0
        by_panel: dict[Panel, list[Drawn]] = {"loss": [], "score": []}
        for s, d in zip(series, lines, strict=True):
            by_panel[panel_of(s.name, [p.value for p in s.shown()])].append(d)
        check_panel: Panel | None = None
        if checks is not None and checks.x:
            check_panel = panel_of(checks.label, checks.y)
        shown: list[Panel] = [p for p in panels if by_panel[p] or check_panel == p] or ["loss"]
        for panel, plot in plots.items():
            plot.display = panel in shown
            plt = plot.plt
            plt.clear_figure()
            for d in by_panel[panel]:
                if d.x:
                    plt.plot(
                        [x / scale for x in d.x],
                        d.y,
                        label=printable_line(d.label),
                        marker="braille",
                    )
            if checks is not None and check_panel == panel:
                plt.scatter(
                    [x / scale for x in checks.x],
                    checks.y,
                    label=printable_line(checks.label),
                    marker="x",
                )
            if self.log_scale:
                plt.yscale("log")
            else:
                ys = [y for d in by_panel[panel] for y in d.y]
                if checks is not None and check_panel == panel:
                    ys += checks.y
                if ys:  # an accuracy's axis within [0, 1], not plotext's 0.65 to 1.17
                    plt.ylim(*axis_range(ys))
            if panel == shown[-1]:  # the x axis named once, under the lowest panel
                plt.xlabel("step" if by_step else "run clock (min)" if minutes else "run clock (s)")
            plot.refresh()
        self._title(series, lines, checks, by_step)

    def _title(
        self, series: list[Series], lines: list[Drawn], checks: Drawn | None, by_step: bool
    ) -> None:
        left_out = sum(d.left_out for d in lines) + (checks.left_out if checks is not None else 0)
        every = list(self.curve_set.series.values())
        curves = sum(1 for s in every if s.is_curve)
        parts = [f"Curves · {len(series)} shown of {curves}"]
        if len(every) > curves:  # listed with their values, as the run's settings
            parts.append(f"{len(every) - curves} one-off numbers")
        axis = "step" if by_step else "time"
        if self.by_step and not by_step:
            axis += " (a series shown has no steps)"
        parts.append(f"x: {axis}")
        parts.append("y: log" if self.log_scale else "y: linear")
        if left_out:
            parts.append(f"{left_out} points ≤ 0 not on the log scale")
        if self.curve_set.left_out_series:
            parts.append(f"{self.curve_set.left_out_series} more series not kept")
        self.query_one("#curves-title", Static).update(Text(" · ".join(parts)))

    # --- keys -----------------------------------------------------------------------

    def action_close(self) -> None:
        self.dismiss(None)

    def action_toggle_log(self) -> None:
        self.log_scale = not self.log_scale
        self._plot()

    def action_toggle_axis(self) -> None:
        self.by_step = not self.by_step
        self._plot()


def _prompt(series: Series, name: str, room: int | None) -> Text:
    """The series' name and its newest value in `room` cells: the value left off where
    it has none, a name too long for it cut where a word of it ends (` `, `_`, `/`)."""
    last = series.last
    value = f"{last.value:.4g}" if last is not None else ""
    name = printable_line(name)
    if room is not None and len(name) > room:
        cut = max((name.rfind(sep, 0, room) for sep in " _/-."), default=-1)
        # a word longer than half the room is cut where the room ends
        name = (name[:cut] if cut >= room // 2 else name[: room - 1]) + "…"
    text = Text(name)
    if value and (room is None or len(name) + 1 + len(value) <= room):
        text.append(f" {value}", style="bold")
    return text


_SOURCES: WeakKeyDictionary[object, CurvesSource] = WeakKeyDictionary()
"""Each console's source, kept between openings (an attempt's log is read once)."""


def curves_source(console: Console) -> CurvesSource:
    """A replay's curves at its cursor (a console with a replay `model`), else live."""
    source = _SOURCES.get(console)
    if source is None:
        model = getattr(console, "model", None)
        source = ReplayCurves(model) if isinstance(model, ReplayModel) else LiveCurves(console)
        _SOURCES[console] = source
    return source


def curves_view(console: Console) -> CurvesScreen:
    """The Curves view of this console (live, attached or a replay), to push."""
    return CurvesScreen(curves_source(console))
