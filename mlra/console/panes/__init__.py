"""The console's panes: each renders part of the run from its events."""

from typing import TypedDict

from rich.text import Text
from textual.widgets import Static


class WidgetOptions(TypedDict, total=False):
    """The keywords every textual widget takes, so a pane passes them on checked."""

    name: str | None
    id: str | None
    classes: str | None
    disabled: bool


def redraw(static: Static, text: Text) -> None:
    """Show `text` unless `static` shows it already: an update lays the screen out
    anew, and on a replay move, or a Resources tick, most of what is drawn looks the same."""
    if static.content != text:
        static.update(text)
