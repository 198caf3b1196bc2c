"""The Plan pane: the supervisor's plan with each step's status, the current
subtask highlighted, and the supervisor's latest messages and revisions.

The supervisor's failed calls (an `update_plan` with arguments it cannot read, an
`assign_subtask` of a step the plan lacks) show among its messages: the
transcript leaves its calls out, and a supervisor going round in circles should
be seen. Once the run has ended no step shows as still going: the marks are read
from the ending (`run_finished`), so a replay shows the same as the live console.

While the supervisor writes, the tail of what it has written so far shows below its
messages (`supervisor writing: …`): the transcript leaves its words out, and a local
model's first plan can take minutes to write, with nothing else on the screen moving.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Unpack

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.widget import Widget
from textual.widgets import Static

from mlra import events as ev
from mlra.agent.record.recording import KILLED_BY_RUN_END
from mlra.agent.record.state import RunState
from mlra.console.panes import WidgetOptions, redraw
from mlra.console.text.written_calls import AnswerNotes
from mlra.durations import format_duration
from mlra.terminal_text import printable, printable_line

MARKS = {
    "pending": ("○", "dim"),
    "in_progress": ("▶", "bold yellow"),
    "done": ("✓", "green"),
    "failed": ("✗", "red"),
    "skipped": ("–", "dim"),
}
MAX_MESSAGES = 30
MESSAGES_LINES = 16
"""The most lines the messages below the steps take; they scroll."""
WRITING_TAIL = 240
"""How much of the supervisor's answer in progress is shown: its newest characters."""
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
SUBMIT_STEP = re.compile(r"\bsubmit", re.IGNORECASE)
"""A plan step about submitting: a submitted run did it, whatever its status says (a
supervisor submits before it marks the step done)."""


def step_mark(step: ev.PlanStep, finished: ev.RunFinished | None) -> tuple[str, str, str]:
    """(mark, style, note) of a plan step, as the run's ending leaves it."""
    mark, style = MARKS[step.status]
    if finished is None or step.status not in ("in_progress", "pending"):
        return mark, style, ""
    if finished.reason == "submitted":
        if SUBMIT_STEP.search(step.title):
            return "✓", "green", "done: the run submitted"  # its submission was this step
        return SUBMITTED_MARKS[step.status]
    ended_mark, ended_style, note = ENDED_MARKS[step.status]
    if finished.reason == "attempt_ended":
        # An attempt hands nothing in: its search submits the one it picks. Its own
        # plan's open steps (a recipe's "Submit ...") are left as the attempt left them.
        return (
            ended_mark,
            ended_style,
            note.replace("the run ended ({reason})", "the attempt ended"),
        )
    return ended_mark, ended_style, note.format(reason=finished.reason)


def wrapped_lines(plan: list[ev.PlanStep], width: int) -> int:
    """About how many lines the steps take wrapped at `width` (mark, note and ending included)."""
    if width <= 0:
        return 0
    return sum(-(-(len(s.id) + len(s.title) + len(s.note) + 16) // width) for s in plan)


def plan_window(state: RunState, room: int) -> tuple[list[ev.PlanStep], int, int]:
    """The steps to list when only `room` lines fit (0: no limit), with how many were
    left out before and after: the current step (else the first not yet done) is
    always among them."""
    plan = state.plan
    if room <= 0 or len(plan) <= room:
        return list(plan), 0, 0
    room = max(1, room - 2)  # the two summary lines
    ids = [s.id for s in plan]
    if state.subtask_step_id in ids:
        at = ids.index(state.subtask_step_id)
    else:
        at = next((i for i, s in enumerate(plan) if s.status in ("pending", "in_progress")), 0)
    start = max(0, min(at - 1, len(plan) - room))  # one done step for context
    return plan[start : start + room], start, max(0, len(plan) - start - room)


def _ended(outcome: ev.SubtaskOutcome) -> str:
    """How the plan's notes introduce a finished subtask's text: only a report is one."""
    if outcome == "reported":
        return "report (reported)"
    return f"subtask ended ({ev.subtask_outcome_words(outcome)})"


class PlanPane(Vertical):
    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._messages: deque[Text] = deque(maxlen=MAX_MESSAGES)
        self._revision = ""
        self._writing = ""
        self._dirty = True
        self._state: RunState | None = None
        self._answer_notes = AnswerNotes("supervisor")

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
            case ev.TextDelta() if event.agent == "supervisor":
                written = event.text if event.whole else self._writing + event.text
                self._writing = written[-4 * WRITING_TAIL :]
            case ev.ModelError() if event.agent == "supervisor" and event.cut_off:
                # No answer came of it (the deadline, a stop, a lost connection): what it
                # had written stays, marked, as the transcript keeps a worker's; a local
                # model's ten minutes of plan vanished at the deadline, leaving "no plan yet".
                if written := " ".join(self._writing.split()):
                    tail = (
                        written if len(written) <= WRITING_TAIL else "…" + written[-WRITING_TAIL:]
                    )
                    self._note(t, f"cut off: {tail}", "yellow")
                self._writing = ""
            case ev.ModelCall() | ev.ModelError() if event.agent == "supervisor":
                self._writing = ""  # its answer is in: what it did shows as its own lines
            case ev.PlanUpdated():
                # Without a reason, the time alone (it read "revised 1m02s · revised").
                why = f" · {printable_line(event.reason)}" if event.reason else ""
                self._revision = f"{t}{why}"
                self._note(t, f"plan: {event.reason or 'revised'}", "cyan")
            case ev.SupervisorMessage():
                self._note(t, event.text.strip(), "")
                if said := self._answer_notes.line(event):  # a call it wrote that never ran
                    self._note(t, *said)
            case ev.RunStarted():
                self._answer_notes.line(event)  # its agents' tools
            case ev.Notice():
                self._answer_notes.line(event)  # its unread call: said under its answer
                return
            case ev.SubtaskStarted():
                self._note(
                    t,
                    f"→ subtask {event.subtask}{f' [{event.step_id}]' if event.step_id else ''}: "
                    f"{event.instructions.strip()}",
                    "magenta",
                )
            case ev.SubtaskFinished():
                self._note(t, f"← {_ended(event.outcome)}: {event.report.strip()}", "magenta")
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
                self._writing = ""  # an answer cut off by the ending is not being written
                self._dirty = True  # the marks change with the ending
                return
            case _:
                return
        self._dirty = True

    def clear(self) -> None:
        """Forget the messages: a replay feeds those of another point of the run."""
        self._messages.clear()
        self._revision = ""
        self._writing = ""
        self._dirty = True

    def _note(self, t: str, text: str, style: str) -> None:
        """A message line; the supervisor's words are shown, not obeyed."""
        line = Text(f"{t} ", style="dim")
        line.append(printable(text if len(text) < 600 else text[:600] + "…"), style=style)
        self._messages.append(line)

    def on_resize(self) -> None:
        # How many steps fit depends on the pane's size: drawn again after this layout.
        self._dirty = True
        self.call_after_refresh(self._reshow)

    def _reshow(self) -> None:
        if self._state is not None and self.is_attached:
            try:
                self.show(self._state)
            except NoMatches:
                pass  # being removed: its parts went first

    def show(self, state: RunState) -> None:
        self._state = state
        if not self._dirty:
            return
        self._dirty = False
        width = self.content_size.width
        # The steps' area is at most 60% of the pane (mlra.tcss), less the "revised" line.
        # The pane is as tall as what it holds, so the room is reckoned from the most it
        # may take (60% of its column, less its border): from its own height, a plan that
        # came when the pane was small was cut to one step and kept it small.
        column = self.parent.content_size.height if isinstance(self.parent, Widget) else 0
        tallest = int(column * 0.6) - 2 if column else self.content_size.height
        room = int(tallest * 0.6) - 1 if tallest > 0 else 0
        # Wrapped, the steps would not all fit: one line each, around the current one.
        compact = 0 < room < wrapped_lines(state.plan, width)
        steps = Text()
        if not state.plan:
            steps.append("no plan yet", style="dim")
        shown, before, after = plan_window(state, room if compact else 0)
        if before:
            steps.append(
                f"✓ {before} earlier step" + ("s" if before > 1 else "") + "\n", style="dim"
            )
        for step in shown:
            mark, style, ended = step_mark(step, state.finished)
            current = step.id == state.subtask_step_id and state.finished is None
            line = Text(f"{mark} ", style=style)
            line.append(
                printable_line(f"{step.id}. {step.title}"),
                style="bold reverse" if current else "",
            )
            if step.note:
                line.append(f" — {printable_line(step.note)}", style="dim")
            if ended:
                line.append(f" ({ended})", style="dim" if style == "green" else style)
            if compact:  # one line a step, so the count above holds and the current shows
                line.truncate(width, overflow="ellipsis")
            steps.append_text(line)
            steps.append("\n")
        if after:
            steps.append(f"○ {after} more\n", style="dim")
        if self._revision:
            steps.append(f"revised {self._revision}", style="dim italic")
        lines = list(self._messages)
        if writing := " ".join(self._writing.split()):
            line = Text("supervisor writing: ", style="cyan")
            tail = writing if len(writing) <= WRITING_TAIL else "…" + writing[-WRITING_TAIL:]
            line.append(printable_line(tail), style="dim italic")
            lines.append(line)
        log = (
            Text("\n").join(lines)
            if lines
            else Text("supervisor messages appear here", style="dim")
        )
        shown_steps = self.query_one("#plan-steps", Static)
        if tallest > 0:
            # In lines, not mlra.tcss's percentages: a percentage of a pane as tall as what
            # it holds cut the steps short of their room, silently, with no "more" line.
            steps_lines = min(room + 1, len(steps.wrap(self.app.console, max(width, 1))))
            shown_steps.styles.max_height = room + 1
            messages = self.query_one("#plan-messages")
            messages.styles.max_height = max(3, min(MESSAGES_LINES, tallest - steps_lines - 1))
        redraw(shown_steps, steps)
        redraw(self.query_one("#plan-log", Static), log)
