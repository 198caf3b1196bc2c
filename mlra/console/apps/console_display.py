"""The console's display: how the run's events reach the app's panes, in batches, and
the last guard on every line the app draws.

A display is what a run tells its events to (the headless ones print them); this one
queues them and asks the app to render the queue once it has gathered a moment's worth,
so a command printing thousands of lines a second costs one render per batch, not one
per line. Apart from the app because the timing is its own concern: the panes only ever
see a batch. The line filter (`NoControls`) is the other end of the same path: whatever
of the run's text reaches the terminal passes it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rich.segment import Segment
from textual.app import App
from textual.filter import LineFilter
from textual.message import Message

from mlra import events as ev
from mlra.terminal_text import has_controls, without_controls

BATCH_DELAY_S = 0.04
"""Events are gathered this long before the panes render them: at most ~25 renders a second."""
OUTPUT_DELAY_S = 0.1
"""A command's output alone waits longer: ten redraws a second read as a live tail, and
under a flood each one costs a repaint of the entry (the UI thread's main work then)."""


class NoControls(LineFilter):
    """The last guard between the run's text and the terminal, on every line Textual
    draws: a control character, an escape sequence's opener or a bidirectional
    override left in a widget's text is removed (each takes no cell, so the layout
    stands), and a lone surrogate becomes U+FFFD. The panes escape such characters
    visibly where they show the run's text; this holds for whatever they missed."""

    def apply(self, segments: list[Segment], background: object) -> list[Segment]:
        if not has_controls("".join(segment.text for segment in segments)):
            return segments  # nearly always: the line as it is, nothing allocated
        return [
            segment
            if segment.control
            else Segment(without_controls(segment.text), segment.style, segment.control)
            for segment in segments
        ]


class EventsArrived(Message):
    """Some events are waiting in the console display's queue."""


class ConsoleDisplay:
    """The console's implementation of the display interface: queues events for the app."""

    def __init__(self, app: App[Any]) -> None:
        self.app = app
        self.pending: list[ev.Event] = []
        self._due: float | None = None
        """When the pending events will be rendered (the event loop's clock); None: not asked."""

    def on_event(self, event: ev.Event) -> None:
        self.pending.append(event)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if self._due is None:
                self._due = 0.0
                self.app.post_message(EventsArrived())
            return
        due = loop.time() + (OUTPUT_DELAY_S if isinstance(event, ev.ToolOutput) else BATCH_DELAY_S)
        if self._due is None or due < self._due:
            # Anything but output brings the batch forward; a delivery already asked
            # for finds the batch taken and posts nothing.
            self._due = due
            loop.call_at(due, self._deliver)

    def _deliver(self) -> None:
        if self.pending:
            self.app.post_message(EventsArrived())

    def take(self) -> list[ev.Event]:
        batch, self.pending = self.pending, []
        self._due = None
        return batch

    def close(self) -> None:
        if self.pending:
            self.app.post_message(EventsArrived())
