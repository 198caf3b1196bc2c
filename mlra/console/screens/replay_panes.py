"""The replay's own versions of two live panes: a status line that says where the
cursor is in the run, and a transcript whose arrow keys are left to the replay; and
the verdict panel, the run's ending in a few lines, shown where the replay opens.

Apart from the replay app (console/apps/replay_app.py), which is about moving the cursor;
these are about drawing what is there.
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Static

from mlra.agent.record.attempt_tree import summary_of
from mlra.agent.record.state import RunState
from mlra.console.panes import redraw
from mlra.console.panes.status import PHASES, Part, StatusBar, fit, glance, run_name
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.text.event_lines import score_line
from mlra.console.text.replay import ReplayModel
from mlra.durations import format_duration
from mlra.terminal_text import printable_line


def step_words(state: RunState) -> str:
    """What the run's numbered steps are: a worker's, or in a search the search's own
    actions (its attempts' workers number their steps in their own logs)."""
    return "search step" if state.searches or state.attempts else "worker step"


class ReplayStatusBar(StatusBar):
    _replayed: tuple[RunState, ReplayModel, str | None] | None = None

    def on_resize(self) -> None:
        if self._replayed is not None:
            self.show_replay(*self._replayed)

    def show_replay(self, state: RunState, model: ReplayModel, playing: str | None) -> None:
        """The live line's parts, where the replay's cursor stands in place of what the
        run is doing: each part shortened or left out as the live line's are, so the
        phase, the score and the time stay whole at 80 columns."""
        self._replayed = (state, model, playing)
        pos = model.position()
        label, style = PHASES.get(state.phase, (state.phase.upper(), "reverse"))
        parts = [
            Part([Text(" mlra ", style="bold white on grey23")], rank=9),
            run_name(state),
            Part([Text(f"· {printable_line(state.model) or '…'} ")], rank=8),
            Part([Text(" REPLAY ", style="black on medium_purple1")], rank=0, droppable=False),
        ]
        if state.forked_from:
            fork = f" fork of {printable_line(state.forked_from)} "
            parts.append(Part([Text(fork, style="bold cyan")], rank=4))
        parts.append(
            Part(
                [
                    Text(
                        f" replay: step {pos.step} of {pos.steps}, event {pos.event:,} of "
                        f"{pos.events:,} ",
                        style="bold",
                    ),
                    Text(f" step {pos.step}/{pos.steps} ", style="bold"),
                ],
                # Where the cursor is: shortened last, after the score, left whole
                # only before the run's name is left out (1.5).
                rank=1.6,
            )
        )
        parts.append(
            Part(
                [Text(f"{format_duration(model.event.t)} · {model.event.type} ", style="dim")],
                rank=6,
            )
        )
        parts.append(Part([Text(f" {label} ", style=style)], rank=0, droppable=False))
        badge = state.sandbox is not None and state.sandbox.isolation == "none"
        if badge:
            parts.append(
                Part([Text(" UNISOLATED ", style="bold black on yellow")], rank=0, droppable=False)
            )
        if playing:
            parts.append(Part([Text(f"  ▶ {playing}", style="bold green")], rank=5))
        parts += glance(state, model.event.t, unisolated=not badge)
        width = self.size.width or self.app.size.width or 160
        self.update(fit(parts, width), layout=False)  # one line, always: no layout pass per step


class ReplayTranscript(TranscriptPane, inherit_bindings=False):
    """The transcript, scrolled with the vertical keys only: ←, →, Home and End move
    the replay from here (in the Files tree Home and End go to its first and last
    file)."""

    BINDINGS = [
        Binding("up", "scroll_up", "Scroll up", show=False),
        Binding("down", "scroll_down", "Scroll down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
    ]


def verdict_text(state: RunState, notes: int) -> Text:
    """How the run ended: its state, score and verdict, then what it took (attempts,
    cost, time) and how many notes people left on it."""
    label, style = PHASES.get(state.phase, (state.phase.upper(), "reverse"))
    text = Text()
    text.append(f" {label} ", style=style)
    if state.finished is not None:
        text.append(f" {state.finished.reason}", style="bold")
        if state.finished.message:
            text.append(f": {printable_line(state.finished.message)}", style="")
    text.append("\n")
    text.append("score ", style="bold")
    e = state.evaluation
    if e is None:
        text.append("not graded\n", style="dim")
    else:
        text.append(score_line(e) + "\n", style="bold green" if e.ok else "bold red")
    figures = []
    searched = summary_of(state.attempts, None, None)
    if searched is not None:  # counted as result.json counts them, in the same words
        best = f", best {printable_line(searched.best)}" if searched.best else ""
        figures.append(f"attempts {searched.in_words}{best}")
    about = "~" if state.estimated_tokens and state.cost_usd else ""
    figures.append(f"cost {about}${state.cost_usd:.2f}")
    figures.append(f"time {format_duration(state.elapsed_s)}")
    figures.append(f"{notes} note{'' if notes == 1 else 's'}")
    text.append(" · ".join(figures))
    text.append("  Home: from the start", style="dim")
    return text


class VerdictPanel(Static):
    """The run's ending, shown while the cursor is on a finished run's last event (where
    `mlra replay` opens); hidden elsewhere, so every other point shows the run as it was."""

    def on_mount(self) -> None:
        self.border_title = "How the run ended"

    def show(self, state: RunState, model: ReplayModel) -> None:
        at_end = state.finished is not None and model.cursor == len(model.events) - 1
        if at_end:
            redraw(self, verdict_text(state, len(model.annotations)))
        if self.display != at_end:
            self.display = at_end
