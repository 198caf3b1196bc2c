"""A recorded run's log as the replay reads it: each line parsed only when looked at,
and the cheap tests on a line's bytes that sort events into the replay's marks (errors,
plan changes) and what its search looks in.

Apart from the replay's cursor (console/text/replay.py) because this is about reading a
100,000-event log without parsing it all (opening a replay must not take the second
pydantic would), while the cursor is about what the panes show at an event.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import overload

from pydantic import ValidationError

from mlra import events as ev
from mlra.agent.record.eventlog import check_lines
from mlra.agent.record.log_refs import Unresolved, resolve
from mlra.agent.record.recording import KILLED_BY_RUN_END
from mlra.console.text.written_calls import unread_call

CACHE_EVENTS = 20_000
"""Parsed events kept; past this the cache starts again (it refills with what is looked at)."""


def is_error(event: ev.Event) -> bool:
    match event:
        case ev.ToolResult():
            return not event.ok
        case ev.ModelError():
            return event.cut_off is None
        case ev.Notice():
            return event.level == "error"
        case ev.RunFinished():
            return event.status == "error"
        case _:
            return False


def is_plan_message(event: ev.Event) -> bool:
    """Events the Plan pane writes a line for (see PlanPane.feed)."""
    match event:
        case ev.PlanUpdated() | ev.SupervisorMessage() | ev.SubtaskStarted() | ev.SubtaskFinished():
            return True
        case ev.Review():
            return bool(event.guidance)
        case ev.Control():
            return event.action == "inject" and event.target == "supervisor"
        case ev.Notice():
            # The supervisor's unread call, said under its answer that follows.
            return (found := unread_call(event)) is not None and found[0] == "supervisor"
        case ev.ToolResult():
            # The supervisor's failed calls (the run's ending aside, which the plan's
            # marks say): a plan rebuilt after a jump shows them as one fed event by event.
            return event.agent == "supervisor" and not event.ok and event.error != KILLED_BY_RUN_END
        case _:
            return False


def searchable_text(event: ev.Event) -> str | None:
    """The transcript text of an event that a search looks in (None: nothing to search)."""
    match event:
        case ev.WorkerThought() | ev.SupervisorMessage():
            return event.text
        case ev.ToolCall():
            args = (
                json.dumps(event.arguments, ensure_ascii=False)
                if event.arguments is not None
                else event.raw_arguments or ""
            )
            return f"{event.tool} {args}"
        case ev.ToolOutput():
            return event.text
        case ev.ToolResult():
            return event.output
        case ev.Notice():
            return event.message
        case ev.ModelError():
            return event.error
        case ev.SubtaskStarted():
            return event.instructions
        case ev.SubtaskFinished():
            return event.report
        case ev.Review():
            return event.guidance
        case ev.Control():
            return event.text
        case _:
            return None


class RecordedLog(Sequence[ev.Event]):
    """A run's events, each parsed when first looked at.

    Parsing 100,000 events with pydantic takes most of a second; opening a replay
    must not. So the log is split into lines and each line's type read from its
    bytes (the stamp fields come first, so the first `"type":"` is the event's);
    the events themselves are parsed on demand and a bounded number kept.
    """

    def __init__(self, lines: list[bytes] | None, parsed: list[ev.Event] | None = None) -> None:
        self._lines = lines
        self._all = parsed
        self._cache: dict[int, ev.Event] = {}
        if parsed is not None:
            self.types = [e.type for e in parsed]
        else:
            assert lines is not None
            names: dict[bytes, str] = {}
            self.types = []
            for line in lines:
                i = line.find(b'"type":"') + 8
                raw = line[i : line.find(b'"', i)] if i >= 8 else b"?"
                name = names.get(raw)
                if name is None:
                    name = names[raw] = raw.decode("utf-8", "replace")
                self.types.append(name)

    @classmethod
    def read(cls, path: Path, *, on_torn_tail: Callable[[str], None] | None = None) -> RecordedLog:
        """The log at `path`; a half-written last line is dropped and reported, as
        `read_events` does, and a damaged log is `LogDamage` (see `check_lines`)."""
        data = path.read_bytes()
        lines = data.split(b"\n")
        tail = lines.pop()
        log = cls([line for line in lines if line.strip()])
        check_lines(path, lines)
        if tail.strip() and on_torn_tail is not None:
            on_torn_tail(f"{path}: dropped a half-written last line ({len(tail)} bytes)")
        return log

    @classmethod
    def of(cls, events: list[ev.Event]) -> RecordedLog:
        return cls(None, list(events))

    def __len__(self) -> int:
        return len(self._all) if self._all is not None else len(self.types)

    @overload
    def __getitem__(self, index: int) -> ev.Event: ...
    @overload
    def __getitem__(self, index: slice) -> list[ev.Event]: ...
    def __getitem__(self, index: int | slice) -> ev.Event | list[ev.Event]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if self._all is not None:
            return self._all[index]
        if index < 0:
            index += len(self)
        event = self._cache.get(index)
        if event is None:
            if len(self._cache) >= CACHE_EVENTS:
                self._cache.clear()
            event = self._cache[index] = self.peek(index)
        return event

    def peek(self, index: int) -> ev.Event:
        """The event at `index`, parsed without keeping it (for one pass over many)."""
        if self._all is not None:
            return self._all[index]
        event = self._cache.get(index)
        if event is not None:
            return event
        assert self._lines is not None
        try:
            return resolve(ev.parse_event(self._lines[index]), self._model_call)
        except ValidationError as exc:
            problem = exc.errors()[0]["msg"]
        except Unresolved as exc:
            problem = str(exc)
        # The replay goes on over a damaged line and says so where it is.
        return ev.Notice(
            seq=index + 1,
            level="error",
            message=f"line {index + 1} of the log is not a valid event: {problem}",
        )

    def _model_call(self, seq: int) -> ev.ModelCall | None:
        """The `model_call` a reference names (the log numbers its lines from 1)."""
        if not 1 <= seq <= len(self):
            return None
        event = self.peek(seq - 1)
        return event if isinstance(event, ev.ModelCall) else None

    def raw(self, index: int) -> bytes | None:
        return self._lines[index] if self._lines is not None else None

    def raw_with_refs(self, index: int) -> bytes | None:
        """The line's bytes and those of the `model_call` it refers to, which hold
        its text or arguments (see `agent/record/log_refs.py`): what search looks in."""
        line = self.raw(index)
        if line is None:
            return None
        found = _REF_RE.search(line)
        if found is not None:
            seq = int(found.group(1))
            if 1 <= seq <= len(self):
                return line + b"\n" + (self.raw(seq - 1) or b"")
        return line

    def worker_step(self, index: int) -> int | None:
        """The worker step a `step_started` line starts (None for the supervisor's)."""
        line = self.raw(index)
        if line is not None:
            found = _STEP_RE.search(line)
            if found:
                agent, step = found.groups()
                return None if agent == b"supervisor" else int(step)
        event = self.peek(index)
        assert isinstance(event, ev.StepStarted)
        return None if event.agent == "supervisor" else event.step

    def maybe(self, index: int, *needles: bytes) -> bool:
        """A cheap pre-check on the line's bytes before parsing it (True without bytes)."""
        line = self.raw(index)
        return line is None or any(n in line for n in needles)


_REF_RE = re.compile(rb'"(?:text_of|arguments_of)":(\d+)')
_STEP_RE = re.compile(rb'"type":"step_started","agent":"([a-z_]+)","step":(\d+)')
MAYBE_ERROR = {
    "tool_result": (b'"ok":false',),
    "notice": (b'"level":"error"',),
    "run_finished": (b'"status":"error"',),
    "model_error": (b"",),
}
MAYBE_PLAN = {
    "plan_updated": (b"",),
    "supervisor_message": (b"",),
    "subtask_started": (b"",),
    "subtask_finished": (b"",),
    "review": (b'"guidance":"',),
    "control": (b'"target":"supervisor"',),
    "tool_result": (b'"agent":"supervisor","ok":false',),
    "notice": (b'"kind":"unread_call"', b"supervisor's answer "),  # (the words: older logs)
}
SEARCHED = frozenset(
    {
        "worker_thought",
        "supervisor_message",
        "tool_call",
        "tool_output",
        "tool_result",
        "notice",
        "model_error",
        "subtask_started",
        "subtask_finished",
        "review",
        "control",
    }
)
