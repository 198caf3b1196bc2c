"""The Worker pane: the agent's thoughts as they stream, each tool call with its
arguments, its output as it arrives, and its result.

It must stay responsive when a command prints thousands of lines a second and stay
small over a day-long run: output is kept per call as a few head lines and a bounded tail
(collapsed to head and tail unless expanded; a line that never ends, a progress bar
redrawn with carriage returns for hours, is kept bounded too), and when the call ends its
result (what the model read) replaces the stream; output past the log's cap streams here
still, from the live run alone (agent/loop/tool_step.py). Under an answer: a call it wrote
as text that nothing ran, and what the agent was told next (console/text/written_calls.py).
Entries are re-rendered at most once per batch of events, and only the newest entries are
kept as widgets; older ones live on in the event log. This module is the pane: which
entry each event goes to, batching, trimming and rebuilding; each entry's keeping and
drawing of its text is console/panes/transcript_entries.py.

Whatever the agent, the model or a command wrote is shown, never obeyed: its control
characters and escape sequences escaped (mlra/terminal_text.py) as each line of
output is kept and each entry is drawn, and every entry is a `Text`, never markup.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Unpack

from rich.text import Text

from mlra import events as ev
from mlra.agent.record.run_limits import RunLimits
from mlra.console.panes import WidgetOptions
from mlra.console.panes.transcript_entries import (
    Entry,
    NoteEntry,
    OutputBuffer,
    ThoughtEntry,
    ToolEntry,
    strip_status,
    taken_over,
)
from mlra.console.panes.transcript_notes import NotedEntries
from mlra.console.text.attempt_lines import attempt_finished_line, attempt_ok, attempt_started_line
from mlra.console.text.event_lines import (
    attempt_news,
    control_line,
    decided_line,
    decider,
    describe_call,
    ending_words,
    evaluation_started_line,
    limits_words,
    one_line,
    resumed_line,
    score_words,
    submission_line,
    time_limit_raised_line,
    time_warning_line,
    unknown_line,
)
from mlra.console.text.written_calls import AnswerNotes
from mlra.durations import format_duration
from mlra.terminal_text import printable

MAX_ENTRIES = 200
KEEP_FULL_OUTPUT = 30
"""The newest entries keep their full tail for expanding; older ones keep what they show."""
QUIET_TOOLS = {"update_plan", "assign_subtask"}
"""Supervisor tools the Plan pane shows; the transcript leaves them out."""


class TranscriptPane(NotedEntries):
    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._tools: dict[str, ToolEntry] = {}
        self._thoughts: dict[int, ThoughtEntry] = {}
        """The worker's (or baseline's) text of each turn; the supervisor's is in the Plan pane."""
        self.dropped = 0
        self.highlight = ""  # text to mark wherever it shows (a replay's search)
        self._attempt = False
        """The run shown is an attempt's own (its `run_started` says so)."""
        self._regrading = False
        self._answer_notes = AnswerNotes("workers")
        self._limits = RunLimits()
        """The run's time limit: a wait's line says no more than the run had left."""
        self._carried: set[str] = set()
        """Calls open when the run was last resumed: shown again below its line once anything
        more of them comes (`_carry_over`)."""

    def on_mount(self) -> None:
        self.border_title = "Worker"
        self.anchor()

    def set_highlight(self, query: str) -> None:
        """Mark `query` in every entry (matched without regard to case, as search does)."""
        if query != self.highlight:
            self.highlight = query
            self._dirty.update(self._entries)

    # --- events ---------------------------------------------------------------------

    def feed(self, event: ev.Event) -> None:
        self._limits.apply(event)
        if self._carried and getattr(event, "call_id", None) in self._carried:
            self._carry_over(getattr(event, "call_id", ""))
        match event:
            case ev.TextDelta() if event.agent != "supervisor":
                entry = self._thought(event.turn, event.t)
                self._dated(entry, event)
                entry.text = event.text if event.whole else entry.text + event.text
                self._dirty.add(entry)
            case ev.ModelCall() if (
                event.agent != "supervisor" and event.purpose == "turn" and not event.text.strip()
            ):
                self._unsay(event.turn)
            case ev.ModelError() | ev.ModelRetry() if event.agent != "supervisor":
                self._cut(event.seq)
            case ev.WorkerThought():
                entry = self._thought(event.turn, event.t)
                self._dated(entry, event)
                entry.text = event.text
                entry.done = True
                self._dirty.add(entry)
            case ev.ToolCall() if event.tool not in QUIET_TOOLS:
                tool = ToolEntry(event, left_s=self._limits.left_at(event.t))
                self._tools[event.call_id] = tool
                self._add(tool)
                if event.agent != "supervisor":
                    self._step_called(event.step, tool)  # its notes under its line
            case ev.ApprovalRequested() if event.call_id in self._tools:
                self._tools[event.call_id].waiting = True
                self._dirty.add(self._tools[event.call_id])
            case ev.ToolStarted() if event.call_id in self._tools:
                self._tools[event.call_id].begun = True
                self._dirty.add(self._tools[event.call_id])
            case ev.ToolOutput() if event.call_id in self._tools:
                entry = self._tools[event.call_id]
                if entry.result is None:  # output past the log's cap may come in late
                    entry.output.add(event.text)
                    self._dirty.add(entry)
            case ev.ToolResult() if event.call_id in self._tools:
                entry = self._tools[event.call_id]
                entry.result = event
                entry.waiting = False
                # The result replaces the stream: it is what the model read, the stream's
                # tail is let go, and a replay shows the same whatever it streamed.
                entry.output = OutputBuffer()
                entry.output.add(strip_status(event.output) + "\n")
                self._dirty.add(entry)
            case ev.Control():
                self._control(event)
            case ev.StepStarted() if event.agent != "supervisor":
                self._step_started(event.step)
            case ev.SubtaskStarted():
                self._note(
                    event,
                    f"── subtask {event.subtask}{f' [{event.step_id}]' if event.step_id else ''} ── {one_line(event.instructions, 300)}",
                    "bold magenta",
                )
            case ev.SubtaskFinished():
                self._note(
                    event,
                    f"── subtask {event.subtask} ended ({ev.subtask_outcome_words(event.outcome)}) ── {one_line(event.report, 300)}",
                    "magenta",
                )
            case ev.Review() if event.guidance:
                self._note(
                    event, f"supervisor, reviewing: {one_line(event.guidance, 300)}", "magenta"
                )
            case ev.Notice() if not self._answer_notes.hides(event):  # said under the answer
                self._note(
                    event, f"! {event.message}", "yellow" if event.level != "error" else "red"
                )
            case ev.TimeWarning():
                self._note(event, f"! {time_warning_line(event)}", "yellow")
            case ev.TimeLimitRaised():
                self._note(event, time_limit_raised_line(event), "cyan")
            case ev.UnknownEvent():
                self._note(event, unknown_line(event), "dim")
            case ev.ModelError() if event.cut_off:
                self._note(event, one_line(event.error, 300), "yellow")
            case ev.ModelError():
                self._note(event, f"model error: {one_line(event.error, 300)}", "bold red")
            case ev.HistorySummarized():
                self._note(
                    event,
                    f"{event.agent}'s turns {event.first_turn}–{event.last_turn} were summarized to fit the context",
                    "dim",
                )
            case ev.AttemptStarted():
                self._note(event, f"── {attempt_started_line(event)} ──", "bold cyan")
            case ev.AttemptFinished():
                style = (
                    "green" if attempt_ok(event) else "red" if event.status == "buggy" else "yellow"
                )
                self._note(event, attempt_finished_line(event), style)
            case ev.Submission():
                self._note(event, submission_line(event), "bold")
            case ev.EvaluationStarted():
                self._regrading = event.regrade_by is not None
                self._note(event, evaluation_started_line(event), "bold cyan")
            case ev.EvaluationFinished():
                line = score_words(event, regrade=self._regrading)
                self._note(event, line, "bold green" if event.ok else "bold red")
            case ev.RunStarted():
                self._attempt = event.is_attempt
            case ev.RunFinished():
                ended = ending_words(event, attempt=self._attempt)
                self._note(event, f"run {ended}: {event.message}", "bold")
            case ev.RunResumed():
                self._note(event, resumed_line(event), "bold cyan")
                self._carried = {c for c, e in self._tools.items() if e.result is None}
            case ev.RunForked():
                edit = event.edited_action
                self._note(
                    event,
                    f"── this run is a fork of {event.source_run} at step {event.at_step}, "
                    f"with {event.model}"
                    + (f", given {limits}" if (limits := limits_words(event.settings)) else "")
                    + " ──"
                    # (A message given to the fork is its `inject` just after: shown there.)
                    + (
                        f" its next action replaced: {describe_call(str(edit.get('tool', '')), edit.get('arguments'))}"
                        if edit
                        else ""
                    ),
                    "bold cyan",
                )
            case _:
                pass
        if said := self._answer_notes.line(event):  # under the answer, or the step's start
            self._note(event, *said)

    def attempt_said(self, attempt: str, event: ev.Event, now: float, *, calls: bool) -> None:
        """One of the run's attempts' model calls or notices, from its own log
        (console/text/attempt_logs.py), at the run's clock `now`."""
        said = attempt_news(event, calls=calls)
        if said is not None:
            line = Text(f"{format_duration(now)} ", style="dim")
            line.append(printable(f"{attempt} · {said[0]}"), style=said[1])
            self._add(NoteEntry(line, ("attempt", attempt, event.seq)))

    def _control(self, event: ev.Control) -> None:
        entry = self._tools.get(event.call_id or "")
        if entry is not None:
            entry.waiting = False
            self._dirty.add(entry)
            if event.action == "edit":
                entry.edited, entry.edited_by = event.arguments, decider(event)
                return
            if event.action in ("approve", "reject"):  # under the call, above its output
                entry.decided = decided_line(event)
                return
        self._note(event, control_line(event), "bold yellow")

    def _carry_over(self, call_id: str) -> None:
        """A call the run left open goes on after its resume: shown from here on below the
        "resumed here" line, where the run is now, its first place saying so."""
        self._carried.discard(call_id)
        self._dirty.add(first := self._tools[call_id])
        self._add(carried := first.carried_over())
        self._tools[call_id] = carried

    def _thought(self, turn: int, t: float) -> ThoughtEntry:
        entry = self._thoughts.get(turn)
        if entry is None:
            entry = ThoughtEntry(t, turn)
            self._thoughts[turn] = entry
            self._add(entry)
        return entry

    @staticmethod
    def _dated(entry: ThoughtEntry, event: ev.TextDelta | ev.WorkerThought) -> None:
        """A thought is dated by the first logged event that shows it, as a replay dates
        it: live, the pieces the log did not take (agent/loop/answer_stream.py) came first."""
        if event.seq and not entry.logged:
            entry.t, entry.logged = event.t, True

    def _unsay(self, turn: int) -> None:
        """Drop a turn's streamed text that its answer had none of: the model wrote only
        a tool call, as text (`--tool-calls text`), read from it and shown as the call.
        Left, it said `thinking:` and the call's JSON for good, the turn long over."""
        entry = self._thoughts.pop(turn, None)
        if entry is not None:
            self._drop(entry)

    def _cut(self, seq: int) -> None:
        """The answer streaming now will not be its turn's: it failed (a lost connection,
        a stream ended unfinished or with an error, the run's end) and the model may be
        asked again. Its text stays, marked cut off, and an answer asked again streams
        into an entry of its own: run together, the two read as one answer, which the log
        never recorded."""
        streaming = [turn for turn, entry in self._thoughts.items() if not entry.done]
        if not streaming:
            return
        entry = self._thoughts.pop(max(streaming))
        entry.cut = True
        entry.key = ("cut thought", seq)
        self._dirty.add(entry)

    def _note(self, event: ev.Event, text: str, style: str) -> None:
        line = Text(f"{format_duration(event.t)} ", style="dim")
        line.append(printable(text), style=style)
        self._add(NoteEntry(line, ("note", event.seq)))

    # --- rendering ------------------------------------------------------------------

    def flush(self) -> None:
        """Bring the widgets up to date with everything fed since the last flush."""
        if not self.is_attached:
            return  # the app is closing
        self._trim()
        for entry in self._dirty:
            entry.redraw()
        self._dirty.clear()
        if self._new:
            self.mount(*self._new)
            self._new = []
        for entry in list(self._entries)[-KEEP_FULL_OUTPUT - 5 : -KEEP_FULL_OUTPUT]:
            if isinstance(entry, ToolEntry) and entry.result is not None:
                entry.output.compact()

    def _trim(self) -> None:
        """Keep the newest MAX_ENTRIES entries; those not yet mounted never are."""
        excess = len(self._entries) - MAX_ENTRIES
        if excess <= 0:
            return
        old = [self._entries.popleft() for _ in range(excess)]
        self.dropped += excess
        self.border_subtitle = f"{self.dropped:,} earlier entries are in the event log"
        dropped = set(old)
        self._new = [entry for entry in self._new if entry not in dropped]
        self._dirty -= dropped
        for entry in old:
            if isinstance(entry, ToolEntry):
                self._tools.pop(entry.call.call_id, None)
            elif isinstance(entry, ThoughtEntry):
                self._thoughts = {k: v for k, v in self._thoughts.items() if v is not entry}
        mounted = [entry for entry in old if entry.parent is self]
        if mounted:
            self.remove_children(mounted)

    def _forget(self) -> None:
        """Forget every entry, leaving the widgets to rebuild()."""
        self._tools.clear()
        self._carried.clear()
        self._thoughts.clear()
        self._new = []
        self._dirty.clear()
        self._entries.clear()
        self._forget_notes()
        self._answer_notes = AnswerNotes("workers")  # a window's own: from its first step
        self._limits = RunLimits()  # a window begins with the run's start
        self.dropped = 0
        self.border_subtitle = ""

    def rebuild(self, events: Iterable[ev.Event]) -> None:
        """Show what `events` alone make, as clear() and feed() would, keeping the widget
        of each entry that is still there: a replay's move then redraws and lays out
        only the entries that changed, not the whole transcript (most of a move's
        time on a long run went to drawing entries anew that looked just the same)."""
        old = [entry for entry in self._entries if entry.parent is self]
        stale = [entry for entry in self.children if entry not in old]
        self._forget()
        for event in events:
            self.feed(event)
        self._trim()
        fresh = list(self._entries)
        by_key = {entry.key: entry for entry in old}
        final: list[Entry] = []
        for entry in fresh:
            was = by_key.pop(entry.key, None)
            if was is not None and type(was) is type(entry):
                was.take(entry)
                final.append(was)
            else:
                final.append(entry)
        order = {id(entry): i for i, entry in enumerate(old)}
        kept = [order[id(entry)] for entry in final if id(entry) in order]
        if kept != sorted(kept):  # cannot happen while entries are made in feed order
            final, kept = list(fresh), []
        if not kept:  # a jump: the old widgets, where their kinds line up, show the new
            for i, (was, entry) in enumerate(zip(old, fresh, strict=False)):
                if type(was) is type(entry):
                    was.adopt(entry)
                    final[i] = was
                    kept.append(i)
        staying = set(kept)
        gone = [entry for i, entry in enumerate(old) if i not in staying]
        if gone or stale:
            self.remove_children([*gone, *stale])
        previous: Entry | None = None
        batch: list[Entry] = []
        for entry in [*final, None]:
            if entry is not None and id(entry) not in order:
                batch.append(entry)
                continue
            if batch:
                if previous is not None:
                    self.mount(*batch, after=previous)
                elif entry is not None:
                    self.mount(*batch, before=entry)
                else:
                    self.mount(*batch)
                batch = []
            previous = entry
        swapped = {id(f): k for f, k in zip(fresh, final, strict=True)}
        self._tools = {cid: taken_over(e, swapped) for cid, e in self._tools.items()}
        self._thoughts = {turn: taken_over(e, swapped) for turn, e in self._thoughts.items()}
        self._notes_taken_over(swapped)
        self._entries = deque(final)
        self._new = []
        self._dirty = set(final)

    def follow(self) -> None:
        self.scroll_end(animate=False)
        self.anchor()

    def entry_count(self) -> int:
        return len(self._entries)

    def tool_entry(self, call_id: str) -> ToolEntry | None:
        return self._tools.get(call_id)
