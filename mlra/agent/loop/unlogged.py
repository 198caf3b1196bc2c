"""What the log no longer takes, handed to the run's own console alone.

Past a call's stream cap (agent/loop/tool_step.py) or the log budget's shortening
point (agent/record/log_budget.py), a command's output and a model's streamed text
are not written to the log, and the live console still shows them as they come. Such
an event is never logged (its `seq` is 0), so no replay, resume or attached console
sees it: what they show comes from what the log keeps in its place (the call's
result, the model's whole answer, or the text of an answer given up on, said once).
"""

from __future__ import annotations

from collections.abc import Callable

from mlra import events as ev

Unlogged = ev.ToolOutput | ev.TextDelta
UnloggedWatcher = Callable[[Unlogged], None]
"""Sees what the log no longer takes (an event never logged, `seq` 0)."""


class UnloggedFeed:
    def __init__(self, elapsed: Callable[[], float]) -> None:
        self._elapsed = elapsed
        """The run clock, read at each use (a resumed run replaces its clock)."""
        self._watchers: list[UnloggedWatcher] = []

    @property
    def watched(self) -> bool:
        return bool(self._watchers)

    def watch(self, watcher: UnloggedWatcher) -> None:
        self._watchers.append(watcher)

    def show(self, event: Unlogged) -> None:
        """Hand `event` to the watchers, stamped with the run clock as a logged one is."""
        if not self._watchers:
            return
        event.t = round(self._elapsed(), 3)
        for watcher in list(self._watchers):
            watcher(event)
