"""The replay's own versions of two live panes: a status line that says where the
cursor is in the run, and a transcript whose arrow keys are left to the replay.

Apart from the replay app (console/replay_app.py), which is about moving the cursor;
these are about drawing what is there.
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding

from mlra.agent.state import RunState
from mlra.console.event_lines import score_line
from mlra.console.panes.status import PHASES, StatusBar
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.replay import ReplayModel
from mlra.durations import format_duration
from mlra.terminal_text import printable_line


class ReplayStatusBar(StatusBar):
    def show_replay(self, state: RunState, model: ReplayModel, playing: str | None) -> None:
        pos = model.position()
        label, style = PHASES.get(state.phase, (state.phase.upper(), "reverse"))
        text = Text()
        text.append(" mlra ", style="bold white on grey23")
        text.append(f" {printable_line(state.task) or '…'} ", style="bold")
        text.append(f"· {printable_line(state.model) or '…'} ", style="")
        text.append(" REPLAY ", style="black on medium_purple1")
        if state.forked_from:
            text.append(f" fork of {printable_line(state.forked_from)} ", style="bold cyan")
        text.append(
            f" replay: step {pos.step} of {pos.steps}, event {pos.event:,} of {pos.events:,} ",
            style="bold",
        )
        text.append(f"{format_duration(model.event.t)} · {model.event.type} ", style="dim")
        text.append(f" {label} ", style=style)
        badge = state.sandbox is not None and state.sandbox.isolation == "none"
        if badge:
            text.append(" UNISOLATED ", style="bold black on yellow")
        if playing:
            text.append(f"  ▶ {playing}", style="bold green")
        if state.evaluation is not None:
            text.append("  score: ", style="bold")
            text.append(
                score_line(state.evaluation, unisolated=not badge),
                style="bold green" if state.evaluation.ok else "bold red",
            )
        self.update(text, layout=False)  # one line, always: no layout pass per step


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
