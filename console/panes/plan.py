"""The Plan pane: the supervisor's plan with each step's status, the current
subtask highlighted, and the supervisor's latest messages and revisions.

The supervisor's failed calls (an `update_plan` with arguments it cannot read, an
`assign_subtask` of a step the plan lacks) show among its messages: the
transcript leaves its calls out, and a supervisor going round in circles should
be seen. Once the run has ended no step shows as still going: the marks are read
from the ending (`run_finished`), so a replay shows the same as the live console.
"""

from __future__ import annotations

from collections import deque
from typing import Unpack

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from mlra import events as ev
from mlra.agent.recording import KILLED_BY_RUN_END
from mlra.agent.state import RunState
from mlra.console.panes import WidgetOptions, redraw
from mlra.durations import format_duration

MARKS = {
    "pending": ("○", "dim"),
    "in_progress": ("▶", "bold yellow"),
    "done": ("✓", "green"),
    "failed": ("✗", "red"),
    "skipped": ("–", "dim"),
}
MAX_MESSAGES = 30
ENDED_MARKS = {
    "in_progress": ("■", "red", "not finished: the run ended ({reason})"),
    "pending": ("○", "dim", "not started: the run ended ({reason})"),
}
"""A step still open when the run ended without submitting, and what it says."""
SUBMITTED_MARKS = {
    "in_progress": ("✓", "green", "open when the run submitted"),
    "pending": ("–", "dim", "not started: the run submitted"),
}
"""A step still open when the agent submitted: the work it was on went in."""


def step_mark(step: ev.PlanStep, finished: ev.RunFinished | None) -> tuple[str, str, str]:
    """(mark, style, note) of a plan step, as the run's ending leaves it."""
    mark, style = MARKS[step.status]
    if finished is None or step.status not in ("in_progress", "pending"):
        return mark, style, ""
    if finished.reason == "submitted":
        return SUBMITTED_MARKS[step.status]
    ended_mark, ended_style, note = ENDED_MARKS[step.status]
    return ended_mark, ended_style, note.format(reason=finished.reason)


def wrapped_lines(plan: list[ev.PlanStep], width: int) -> int:
    """About how many lines the steps take wrapped at `width` (mark, note and ending included)."""
    if width <= 0:
        return 0
    return sum(-(-(len(s.id) + len(s.title) + len(s.note) + 16) // width) for s in plan)


class PlanPane(Vertical):
    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._messages: deque[Text] = deque(maxlen=MAX_MESSAGES)
        self._revision = ""
        self._dirty = True

    def compose(self) -> ComposeResult:
        yield Static(id="plan-steps")
        with VerticalScroll(id="plan-messages"):
            yield Static(id="plan-log")

    def on_mount(self) -> None:
        self.border_title = "Plan"
        self.query_one("#plan-messages").anchor()

    def feed(self, event: ev.Event) -> None:
        t = format_duration(event.t)
        match event:
            case ev.PlanUpdated():
                self._revision = f"{t} · {event.reason or 'revised'}"
                self._note(t, f"plan: {event.reason or 'revised'}", "cyan")
            case ev.SupervisorMessage():
                self._note(t, event.text.strip(), "")
            case ev.SubtaskStarted():
                self._note(
                    t,
                    f"→ subtask {event.subtask} [{event.step_id}]: {event.instructions.strip()}",
                    "magenta",
                )
            case ev.SubtaskFinished():
                self._note(t, f"← report ({event.outcome}): {event.report.strip()}", "magenta")
            case ev.Review() if event.guidance:
                self._note(t, f"review: {event.guidance}", "yellow")
            case ev.Control() if event.action == "inject" and event.target == "supervisor":
                self._note(t, f"you: {event.text}", "bold")
            case ev.ToolResult() if event.agent == "supervisor" and not event.ok:
                if event.error == KILLED_BY_RUN_END:
                    return  # the run's ending, which the plan's marks say
                first = next((ln for ln in event.output.splitlines() if ln.strip()), "")
                self._note(t, f"✗ {event.tool} failed: {first.strip() or event.error}", "red")
            case ev.RunFinished() | ev.RunResumed() | ev.RunForked():
                self._dirty = True  # the marks change with the ending
                return
            case _:
                return
        self._dirty = True

    def clear(self) -> None:
        """Forget the messages: a replay feeds those of another point of the run."""
        self._messages.clear()
        self._revision = ""
        self._dirty = True

    def _note(self, t: str, text: str, style: str) -> None:
        line = Text(f"{t} ", style="dim")
        line.append(text if len(text) < 600 else text[:600] + "…", style=style)
        self._messages.append(line)

    def show(self, state: RunState) -> None:
        if not self._dirty:
            return
        self._dirty = False
        steps = Text()
        if not state.plan:
            steps.append("no plan yet", style="dim")
        for step in state.plan:
            mark, style, ended = step_mark(step, state.finished)
            current = step.id == state.subtask_step_id and state.finished is None
            line_style = "bold reverse" if current else ""
            steps.append(f"{mark} ", style=style)
            steps.append(f"{step.id}. {step.title}", style=line_style)
            if step.note:
                steps.append(f" — {step.note}", style="dim")
            if ended:
                steps.append(f" ({ended})", style="dim" if style == "green" else style)
            steps.append("\n")
        if self._revision:
            steps.append(f"revised {self._revision}", style="dim italic")
        log = (
            Text("\n").join(self._messages)
            if self._messages
            else Text("supervisor messages appear here", style="dim")
        )
        redraw(self.query_one("#plan-steps", Static), steps)
        redraw(self.query_one("#plan-log", Static), log)
