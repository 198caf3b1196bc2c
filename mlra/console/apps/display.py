"""The display interface: something that shows a run from its events.

The headless transcript, the JSON-lines printer and the Textual console are
implementations of this one interface, fed the same events by the event log.
"""

from __future__ import annotations

from typing import Protocol

from mlra.events import Event


class Display(Protocol):
    def on_event(self, event: Event) -> None:
        """Show one event; called on the event loop as each event is appended."""

    def close(self) -> None:
        """The run is over (or the process is leaving): flush what is pending."""
