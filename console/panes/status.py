"""The status line: task, model, run state and, at the end, the score."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from mlra.agent.ending import UNSUBMITTED
from mlra.agent.state import RunState
from mlra.console.headless import score_line

PHASES = {
    "starting": ("STARTING", "black on grey70"),
    "running": ("RUNNING", "black on green3"),
    "paused": ("PAUSED", "black on yellow"),
    "awaiting_approval": ("WAITING FOR APPROVAL", "black on dark_orange"),
    "evaluating": ("EVALUATING", "black on cyan"),
    "finished": ("FINISHED", "black on dodger_blue1"),
    "stopped": ("STOPPED", "black on grey70"),
    "error": ("ERROR", "white on red3"),
}

HINTS = {
    "paused": "Space resume · n step",
    "awaiting_approval": "a approve · e edit · r reject",
    "finished": "q quit",
    "stopped": "q quit",
    "error": "q quit",
}


class StatusBar(Static):
    def show(self, state: RunState, *, provider_error: str | None = None) -> None:
        label, style = PHASES.get(state.phase, (state.phase.upper(), "reverse"))
        text = Text()
        text.append(" mlra ", style="bold white on grey23")
        text.append(f" {state.task or '…'} ", style="bold")
        text.append(f"· {state.model or '…'} ", style="")
        if state.phase == "awaiting_approval" and state.paused:
            label = "PAUSED · " + label
        text.append(f" {label} ", style=style)
        if state.sandbox is not None and state.sandbox.isolation == "none":
            # First, so no width cuts it: nothing this run scores is confined.
            text.append(" UNISOLATED ", style="bold black on yellow")
        if state.phase == "paused" and provider_error:
            text.append(f" model provider failing: {provider_error[:80]} ", style="red")
        hint = HINTS.get(state.phase)
        if hint:
            text.append(f"  {hint}", style="dim")
        if state.evaluation is not None:
            text.append("  score: ", style="bold")
            text.append(
                score_line(state.evaluation),
                style="bold green" if state.evaluation.ok else "bold red",
            )
        elif state.finished is not None and state.finished.status == "error":
            text.append(f"  {state.finished.message[:120]}", style="red")
        elif state.finished is not None and state.finished.reason in UNSUBMITTED:
            # Ended without a submission: nothing was graded, and the bar says why.
            text.append(f"  not submitted: {state.finished.message[:120]}", style="yellow")
        self.update(text)
