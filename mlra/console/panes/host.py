"""What a pane may read of the console it is mounted in: the live console, an attached
one and the replay (console/apps/app.py's MlraApp and its subclasses) all hand
themselves to their panes as this.

A protocol, so panes depend on these three reads and no more, pyright holds every app
that hosts them to it, and this wing stays below the apps. Read-only properties, so the
apps' plain attributes satisfy them (the replay sets `state` anew at each move). A pane
mounted without a host (a test's app of one pane) shows what it shows for a recorded
run outside a run folder: no attempt's progress, no steering.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from mlra.agent.record.state import RunState


class PaneHost(Protocol):
    @property
    def run_dir(self) -> Path | None:
        """The run's folder, where a search's attempts keep their own logs; None where
        it is not known (a recorded run read from elsewhere)."""
        ...

    @property
    def state(self) -> RunState:
        """The run as the console shows it now (a replay's: at its cursor)."""
        ...

    @property
    def controller(self) -> object | None:
        """The live run this console steers, or None for a recorded run: a pane asks
        only whether there is one (steering is the app's, console/screens/)."""
        ...
