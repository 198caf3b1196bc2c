"""A run's notifications: its events in, each notification out to every destination.

Subscribed to the run's log like a display; which events notify, and in what words, is
triggers.py; the sending, bounded and off the run's path, is dispatch.py. The run
awaits `drain` as it closes, before its log does, so the end's notification goes out
(or its failure is logged) before the process exits. The log says where notifications
go in words safe to keep (never a URL's path or a command), and a destination that
fails is one warning notice, the first time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from mlra import events as ev
from mlra.agent.notify.destinations import Destination, parse_destinations
from mlra.agent.notify.dispatch import DRAIN_BOUND_S, Dispatch
from mlra.agent.notify.note import Notification
from mlra.agent.notify.triggers import Triggers


class NotifiedRun(Protocol):
    run_id: str
    run_dir: Path

    def subscribe(self, callback: Callable[[ev.Event], None]) -> None: ...

    def append(self, event: ev.Event) -> ev.Event: ...


class Notifications:
    def __init__(self, run: NotifiedRun, destinations: list[Destination]) -> None:
        self.run = run
        self.triggers = Triggers(run.run_id, run.run_dir)
        self.dispatch = Dispatch(
            destinations,
            on_failure=lambda line: self._log(ev.Notice(level="warning", message=line)),
            on_counts=lambda line: self._log(ev.Notice(level="info", message=line)),
        )
        self._told = False

    @classmethod
    def attach(cls, run: NotifiedRun, written: list[str]) -> Notifications:
        """Notifications for `run` to the destinations as the user wrote them (checked
        already on the command line: a bad one raises ValueError here)."""
        hub = cls(run, [d for text in written for d in parse_destinations(text)])
        run.subscribe(hub.on_event)
        return hub

    @property
    def sent(self) -> list[Notification]:
        return self.dispatch.sent

    def on_event(self, event: ev.Event) -> None:
        if not self._told:
            # Once, after the first event this process writes (a new run's `run_started`,
            # a resumed one's first), past the log's fan-out of it.
            with contextlib.suppress(RuntimeError):  # not yet where no loop runs
                asyncio.get_running_loop().call_soon(self._tell_where)
                self._told = True
        note = self.triggers.notification(event)
        if note is not None:
            self.dispatch.send(note)

    def attempt_events(self, attempt: str) -> Callable[[ev.Event], None]:
        """A subscriber for a search's attempt's own log: the attempts run in this
        process with no notifications of their own, so their waits for the model server
        are told from here, counted with the run's (one notification an outage)."""

        def on_event(event: ev.Event) -> None:
            note = self.triggers.attempt_notification(attempt, event)
            if note is not None:
                self.dispatch.send(note)

        return on_event

    def _tell_where(self) -> None:
        if self.dispatch.notifiers:
            where = self.dispatch.described
            self._log(ev.Notice(level="info", message=f"notifications go to {where}"))
        for warning in self.dispatch.warnings:
            self._log(ev.Notice(level="warning", message=warning))

    def _log(self, event: ev.Event) -> None:
        with contextlib.suppress(Exception):  # the log may be closed: the run is over
            self.run.append(event)

    async def drain(self, bound_s: float = DRAIN_BOUND_S) -> None:
        await self.dispatch.drain(bound_s)
