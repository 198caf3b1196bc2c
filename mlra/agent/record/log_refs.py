"""Each text stored once in the log: references written, and resolved on reading.

A model's answer reaches the log as its `model_call` (the record resume and
`--model replay:RUN` rebuild the agent's history from), then again as the
`worker_thought` or `supervisor_message` the transcript shows, and its tool
calls' arguments again in each `tool_call` and `approval_requested`. A 10 MB
argument stored four times made a 64 MB log. So the log stores them in the
`model_call` only: the other events name its `seq` (`text_of`,
`arguments_of`) and leave the copy out, and readers put it back, so every
consumer still gets whole events. Only what is really the same is referenced:
an edited call or a text that differs is stored as it is.

Within a `model_call`, a call's `arguments` are left out when they are just
its `raw_arguments` read as JSON (the model's own text, kept byte for byte).

The streamed `text_delta` events stay: they are what the console and replay
show while the model writes, and the final `model_call` carries the text.
Logs written before this (schema 1) have no references and read as they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mlra import events as ev


class Unresolved(ValueError):
    """A reference to a `model_call` that is not in the log (a damaged log)."""


def _arguments_in_raw(call: dict[str, Any]) -> bool:
    """Whether a recorded call's arguments are exactly its raw text read as JSON."""
    raw = call.get("raw_arguments")
    if not isinstance(raw, str) or not raw or call.get("parse_error") is not None:
        return False
    try:
        return json.loads(raw) == call.get("arguments")
    except (ValueError, RecursionError):
        return False


def _stored_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in call.items() if k != "arguments"} if _arguments_in_raw(call) else call
        for call in calls
    ]


def _read_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    read: list[dict[str, Any]] = []
    for call in calls:
        raw = call.get("raw_arguments")
        if "arguments" not in call and isinstance(raw, str) and call.get("parse_error") is None:
            try:
                arguments = json.loads(raw)
            except (ValueError, RecursionError):
                arguments = None
            if isinstance(arguments, dict):
                call = {**call, "arguments": arguments}
        read.append(call)
    return read


def stored_form(event: ev.Event) -> tuple[ev.Event, set[str]]:
    """The event as the log stores it, and the fields left out for a reference."""
    match event:
        case ev.WorkerThought(text_of=int()) | ev.SupervisorMessage(text_of=int()):
            return event, {"text"}
        case ev.ToolCall(arguments_of=int()):
            return event, {"arguments", "raw_arguments"}
        case ev.ApprovalRequested(arguments_of=int()):
            return event, {"arguments"}
        case ev.ModelCall() if any(_arguments_in_raw(c) for c in event.tool_calls):
            return event.model_copy(update={"tool_calls": _stored_calls(event.tool_calls)}), set()
        case _:
            return event, set()


class _Asked:
    """One tool call as its `model_call` recorded it."""

    def __init__(self, call: dict[str, Any]) -> None:
        self.arguments: dict[str, Any] | None = call.get("arguments")
        parse_error = call.get("parse_error")
        self.raw: str | None = call.get("raw_arguments", "") if parse_error is not None else None


def _asked(call: ev.ModelCall, call_id: str) -> _Asked | None:
    for recorded in call.tool_calls:
        if recorded.get("id") == call_id:
            return _Asked(recorded)
    return None


class Referrer:
    """The writer's side: which earlier `model_call` an event can point to.

    Only the latest answer of each agent is kept: a thought or a tool call follows
    the answer it came from, before that agent's next model call.
    """

    def __init__(self) -> None:
        self._latest: dict[str, ev.ModelCall] = {}

    def link(self, event: ev.Event) -> None:
        """Set the event's reference where its text or arguments are a copy."""
        match event:
            case ev.WorkerThought() | ev.SupervisorMessage():
                agent = "worker" if isinstance(event, ev.WorkerThought) else "supervisor"
                source = self._latest.get(agent)
                if source is not None and event.text and source.text == event.text:
                    event.text_of = source.seq
            case ev.ToolCall():
                source = self._latest.get(event.agent)
                asked = _asked(source, event.call_id) if source is not None else None
                if (
                    source is not None
                    and asked is not None
                    and asked.arguments == event.arguments
                    and asked.raw == event.raw_arguments
                ):
                    event.arguments_of = source.seq
            case ev.ApprovalRequested():
                for source in self._latest.values():
                    asked = _asked(source, event.call_id)
                    if asked is not None and asked.arguments == event.arguments:
                        event.arguments_of = source.seq
                        break
            case _:
                pass

    def unlink(self, event: ev.Event) -> None:
        """Undo `link` for an event that could not be written."""
        match event:
            case ev.WorkerThought() | ev.SupervisorMessage():
                event.text_of = None
            case ev.ToolCall() | ev.ApprovalRequested():
                event.arguments_of = None
            case _:
                pass

    def written(self, event: ev.Event) -> None:
        if isinstance(event, ev.ModelCall):
            self._latest[event.agent] = event


def resolve(event: ev.Event, model_call: Callable[[int], ev.ModelCall | None]) -> ev.Event:
    """The event whole again, its references filled from the `model_call` they name.

    `model_call(seq)` looks up an earlier event of the log. `Unresolved` when a
    reference names no model call, or one without that tool call.
    """

    def source(seq: int) -> ev.ModelCall:
        found = model_call(seq)
        if found is None:
            raise Unresolved(f"it refers to seq {seq}, which is not a model call")
        return found

    match event:
        case ev.WorkerThought(text_of=int(seq)) | ev.SupervisorMessage(text_of=int(seq)):
            event.text = source(seq).text
        case ev.ToolCall(arguments_of=int(seq)) | ev.ApprovalRequested(arguments_of=int(seq)):
            asked = _asked(source(seq), event.call_id)
            if asked is None:
                raise Unresolved(f"seq {seq} asked for no tool call {event.call_id!r}")
            event.arguments = asked.arguments
            if isinstance(event, ev.ToolCall):
                event.raw_arguments = asked.raw
        case ev.ModelCall() if any("arguments" not in c for c in event.tool_calls):
            event.tool_calls = _read_calls(event.tool_calls)
        case _:
            pass
    return event


class Resolver:
    """The reader's side for a log read front to back: remembers its model calls."""

    def __init__(self) -> None:
        self._calls: dict[int, ev.ModelCall] = {}

    def __call__(self, event: ev.Event) -> ev.Event:
        event = resolve(event, self._calls.get)
        if isinstance(event, ev.ModelCall):
            self._calls[event.seq] = event
        return event
