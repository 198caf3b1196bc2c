"""The transcript's entries: a thought as it streams, a tool call with its output and
result, a person's note on a step; each keeps its own text bounded and draws itself.

Apart from the pane (console/panes/transcript.py), which decides which entry an event
goes to and when entries are drawn, trimmed and rebuilt; an entry only knows its own
text. What the run wrote is escaped as each line of output is kept and as each entry is
drawn (mlra/terminal_text.py), and an entry is a `Text`, never markup.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from typing import TypeVar

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Static

from mlra import events as ev
from mlra.agent.record.annotations import Annotation
from mlra.agent.record.recording import KILLED_BY_RUN_END
from mlra.console.panes import redraw
from mlra.console.text.event_lines import describe_call, said_call
from mlra.durations import format_duration
from mlra.terminal_text import as_drawn_line, printable

HEAD_LINES = 3
COLLAPSED_TAIL_LINES = 8
KEPT_TAIL_LINES = 400
MAX_LINE_CHARS = 400
MATCH_STYLE = "bold black on yellow"
"""A replay search's text, wherever an entry shows it."""
NOTE_STYLE = "bold blue"
"""A person's annotation of a step (agent/record/annotations.py): not the run's own text."""


def annotation_line(note: Annotation) -> Text:
    """The marker a step's annotation shows as: `✎ step 3: #data · +1 · comment · who`."""
    line = Text("note ", style="dim")
    line.append(printable(f"✎ step {note.step}: {note.summary()}"), style=NOTE_STYLE)
    return line


class OutputBuffer:
    """A command's output as lines: the first few and a bounded tail, and a count."""

    def __init__(self) -> None:
        self.head: list[str] = []
        self.tail: deque[str] = deque(maxlen=KEPT_TAIL_LINES)
        self.partial = ""
        self.lines = 0

    def add(self, text: str) -> None:
        pieces = (self.partial + text).split("\n")
        self.partial = pieces.pop()
        for line in pieces:
            self._line(line)
        if len(self.partial) > 2 * MAX_LINE_CHARS:
            self.partial = _bounded_partial(self.partial)

    def _line(self, line: str) -> None:
        if "\r" in line:  # progress bars redraw their line with carriage returns
            line = as_drawn_line(line)
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + "…"
        line = printable(line)
        self.lines += 1
        if len(self.head) < HEAD_LINES:
            self.head.append(line)
        else:
            self.tail.append(line)

    def compact(self) -> None:
        """Keep only what the collapsed view shows (for entries far up the transcript)."""
        if self.tail.maxlen != COLLAPSED_TAIL_LINES:
            self.tail = deque(self.tail, maxlen=COLLAPSED_TAIL_LINES)

    def view(self, expanded: bool) -> tuple[list[str], int, list[str]]:
        """(head lines, lines hidden, tail lines) to show."""
        tail = list(self.tail)
        if self.partial:
            tail.append(printable(self.partial.rsplit("\r", 1)[-1][:MAX_LINE_CHARS]))
        keep = len(tail) if expanded else COLLAPSED_TAIL_LINES
        shown_tail = tail[-keep:] if keep else []
        hidden = self.lines + (1 if self.partial else 0) - len(self.head) - len(shown_tail)
        return self.head, max(0, hidden), shown_tail


def _bounded_partial(partial: str) -> str:
    """An unfinished line cut to what it will show: the text after its last carriage
    return (what a redrawn progress bar shows), at most one character past the width
    a line is cut to (so the cut still shows)."""
    body = partial.rstrip("\r")
    ending = partial[len(body) :]
    body = body.rsplit("\r", 1)[-1]
    return body[: MAX_LINE_CHARS + 1] + ending


class Entry(Static):
    """One transcript entry. `key` names what it shows (a call, a turn's thoughts, the
    event behind a note), so that a rebuilt transcript can keep the widget of an entry
    that is still there."""

    key: Hashable = None

    def render_entry(self) -> Text:
        raise NotImplementedError

    def take(self, other: Entry) -> None:
        """Show what `other`, a freshly fed entry with the same key, shows."""

    def adopt(self, other: Entry) -> None:
        """Become `other`, an entry of another key: a widget reused is cheaper than one
        mounted anew."""
        self.take(other)
        self.key = other.key

    def redraw(self) -> None:
        text = self.render_entry()
        query = getattr(self.parent, "highlight", "")
        if query:
            text.highlight_words([query], MATCH_STYLE, case_sensitive=False)
        self.show(text)

    def show(self, text: Text) -> None:
        redraw(self, text)


class NoteEntry(Entry):
    """A one-line marker: subtasks, the user's actions, notices, the ending."""

    def __init__(self, line: Text, key: Hashable) -> None:
        super().__init__(line)
        self.line = line
        self.key = key

    def render_entry(self) -> Text:
        return self.line

    def take(self, other: Entry) -> None:
        assert isinstance(other, NoteEntry)
        self.line = other.line


class ThoughtEntry(Entry):
    def __init__(self, t: float, turn: int) -> None:
        super().__init__()
        self.key = ("thought", turn)
        self.t = t
        self.text = ""
        self.done = False
        self.cut = False
        """Streamed by an answer cut off (a lost connection, an unfinished stream, the
        run's end): no answer the log recorded."""
        self.logged = False
        """Fed by a logged event: until then, by pieces the log did not take (past its size
        budget's shortening point), and dated by them only until the log says more."""

    def take(self, other: Entry) -> None:
        assert isinstance(other, ThoughtEntry)
        self.t, self.text, self.done, self.cut = other.t, other.text, other.done, other.cut
        self.logged = other.logged

    def render_entry(self) -> Text:
        out = Text(f"{format_duration(self.t)} ", style="dim")
        if self.cut:
            out.append("cut off: ", style="yellow")
            out.append(printable(self.text.strip()) or "…", style="italic dim")
            return out
        out.append("thinking: " if not self.done else "", style="italic dim")
        out.append(printable(self.text.strip()) or "…", style="italic" if not self.done else "")
        return out


class ToolEntry(Entry, can_focus=True):
    BINDINGS = [Binding("enter,x", "toggle_expanded", "Expand", show=False)]

    def __init__(self, call: ev.ToolCall, *, left_s: float | None = None) -> None:
        super().__init__()
        self.key = ("call", call.call_id)
        self.call = call
        self.left_s = left_s
        """The run's time left as it was called: a wait's line says no more."""
        self.output = OutputBuffer()
        self.result: ev.ToolResult | None = None
        self.waiting = False
        self.edited: dict[str, object] | None = None
        self.edited_by = "you"
        """Who edited it: you (this console), or the `control` event's source (ctl...)."""
        self.begun = False
        """Its tool began (`tool_started`): till then a pause or a step may hold it."""
        self.decided: str | None = None
        """"approved by you" (or by ctl...): said under the call, above what it printed."""
        self.went_on = False
        """The run was resumed with this call open, and it went on there: shown again
        below the "resumed here" line (`carried_over`), this first place says so."""
        self.expanded = False

    def take(self, other: Entry) -> None:
        """The call's state as fed anew; whether it is expanded stays the user's choice."""
        assert isinstance(other, ToolEntry)
        self.call, self.output, self.result = other.call, other.output, other.result
        self.left_s = other.left_s
        self.waiting, self.edited = other.waiting, other.edited
        self.edited_by, self.begun = other.edited_by, other.begun
        self.decided, self.went_on = other.decided, other.went_on

    def carried_over(self) -> ToolEntry:
        """The call shown anew where a resumed run goes on with it; this one stays, its
        first place, with what it printed before."""
        carried = ToolEntry(self.call, left_s=self.left_s)
        carried.key = (self.key, "resumed")
        carried.edited, carried.edited_by = self.edited, self.edited_by
        carried.decided = self.decided
        self.went_on, self.waiting = True, False
        return carried

    def adopt(self, other: Entry) -> None:
        super().adopt(other)
        self.expanded = False

    def action_toggle_expanded(self) -> None:
        self.expanded = not self.expanded
        self.redraw()

    @property
    def foldable(self) -> bool:
        """Whether `x` changes what it shows: its output has lines hidden, or is open."""
        return self.expanded or self.output.view(False)[1] > 0

    def show(self, text: Text) -> None:
        """While a command prints, a redraw changes the tail's lines but seldom how many
        rows the entry takes: then the entry alone is repainted, without laying the
        screen out again (under a 10,000 lines/s flood that layout pass was a fifth of
        the console's rendering, for a screen whose geometry had not changed)."""
        if self.content == text:
            return
        width, height = self.content_size
        self.update(text, layout=False)
        if (
            not width
            or self.get_content_height(self.container_size, self.app.size, width) != height
        ):
            self.refresh(layout=True)  # it grew or shrank (or was never laid out)

    def render_entry(self) -> Text:
        call = self.call
        who = "" if call.agent in ("worker", "baseline") else f"{call.agent}: "
        out = Text(f"{format_duration(call.t)} ", style="dim")
        out.append(f"{who}{said_call(call, self.left_s)}", style="bold")
        if self.edited is not None:
            out.append(f"\n  edited by {self.edited_by} → ", style="yellow")
            out.append(describe_call(call.tool, self.edited), style="bold yellow")
        if self.decided is not None:
            out.append(f"\n  {self.decided}", style="yellow")
        out.append("  ")
        r = self.result
        if r is None and self.went_on:
            out.append("↓ open when the run stopped: see below, after the resume", style="dim")
        elif r is None:
            held = call.logs_start and not self.begun  # not begun: what n or Space runs next
            out.append(
                "⏸ waiting for your approval"
                if self.waiting
                else "not begun yet"
                if held
                else "running…",
                style="black on dark_orange" if self.waiting else "yellow",
            )
        else:
            bits = [f"exit {r.exit_code}"] if r.exit_code is not None else []
            bits.append(f"{r.duration_s:.1f}s")
            if r.timed_out:
                bits.append("timed out")
            if r.error == KILLED_BY_RUN_END:
                bits.append("killed: the run ended")
            out.append(
                ("✓ " if r.ok else "✗ ") + " · ".join(bits), style="green" if r.ok else "red"
            )
        head, hidden, tail = self.output.view(self.expanded)
        for line in head:
            out.append(f"\n  │ {line}", style="")
        if hidden:
            hint = "x to collapse" if self.expanded else "x to expand"
            out.append(f"\n  │ … {hidden:,} more lines ({hint}) …", style="dim italic")
        for line in tail:
            out.append(f"\n  │ {line}", style="")
        return out


def strip_status(output: str) -> str:
    lines = output.rstrip("\n").split("\n")
    if lines and lines[-1].startswith(("[exit code", "[timed out", "[killed by")):
        lines.pop()
    return "\n".join(lines)


def newest_to_fold(entries: list[ToolEntry]) -> ToolEntry | None:
    """The call `x` opens or closes when none has the focus: the newest whose output it
    changes, else the newest. The newest call of all (a `submit` after a long training
    command) has nothing hidden, and `x` on it did nothing beside the other's hint."""
    return next((e for e in reversed(entries) if e.foldable), entries[-1] if entries else None)


E = TypeVar("E", bound=Entry)


def taken_over(entry: E, swapped: Mapping[int, Entry]) -> E:
    """The widget that shows `entry` after a rebuild: an older one of its type that took
    it over, or itself."""
    kept = swapped.get(id(entry), entry)
    return kept if isinstance(kept, type(entry)) else entry
