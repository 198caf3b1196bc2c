"""The console's panes: each renders part of the run from its events."""

from typing import TypedDict

from rich.text import Text
from textual.widget import Widget
from textual.widgets import Static


class WidgetOptions(TypedDict, total=False):
    """The keywords every textual widget takes, so a pane passes them on checked."""

    name: str | None
    id: str | None
    classes: str | None
    disabled: bool


def sized_by_content(widget: Widget) -> bool:
    """Whether what a widget shows can change its size: a pane whose height and width
    are set by the screen's layout (a fixed height, a fraction) is drawn anew without
    laying the whole screen out again, which is most of what an update costs."""
    height, width = widget.styles.height, widget.styles.width
    return height is None or height.is_auto or (width is not None and width.is_auto)


def redraw(static: Static, text: Text) -> None:
    """Show `text` unless `static` shows it already: an update lays the screen out
    anew, and on a replay move, or a Resources tick, most of what is drawn looks the same."""
    if static.content != text:
        static.update(text, layout=sized_by_content(static))
