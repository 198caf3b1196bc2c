"""The run screen's layout, one for the live, attached and replayed console.

The three consoles show the same run the same way; only a few panes differ (the
replay's status line says where its cursor is, its transcript and attempts are
read-only, and it shows the verdict above them). So the layout is written once
and each app hands it the panes that are its own: a pane moved or added here
moves in every console, and the stylesheet (console/mlra.tcss) keys on these ids.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widget import Widget

from mlra.console.panes.experiments import ExperimentsPane
from mlra.console.panes.files import FileSource, FilesPane
from mlra.console.panes.footer import KeyFooter
from mlra.console.panes.host import PaneHost
from mlra.console.panes.plan import PlanPane
from mlra.console.panes.resources import ResourcesPane


def run_screen(
    *,
    status: Widget,
    center: Iterable[Widget],
    files_source: FileSource | None,
    host: PaneHost,
) -> ComposeResult:
    """Status line; Plan, Experiments and Resources on the left; the app's own
    `center` (attempts and transcript) in the middle; Files on the right; the keys.
    `host` is the app, as the panes that read it see it."""
    yield status
    with Horizontal(id="body"):
        with Vertical(id="left"):
            yield PlanPane(id="plan")
            yield ExperimentsPane(id="experiments")
            yield ResourcesPane(id="resources")
        with Vertical(id="center"):
            yield from center
        yield FilesPane(files_source, host=host, id="files")
    yield KeyFooter()
