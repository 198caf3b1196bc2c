"""A run's notifications: its events in, each notification out to every destination.

Subscribed to the run's log like a display. A send runs as a task of its own, bounded
in time, so no destination ever holds the agent; the run awaits what is still being
sent when it closes (`drain`, bounded too), so the end's notification goes out before
the process exits. A destination that fails is one warning notice in the log, the
first time (later failures of it are counted in the closing notice, not repeated).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from mlra import events as ev
from mlra.agent.notify.desktop import unavailable
from mlra.agent.notify.destinations import Destination, notifier_for, parse_destinations
from mlra.agent.notify.note import Notification, Notifier, NotifyFailed
from mlra.agent.notify.triggers import Triggers

SEND_BOUND_S = 15.0
"""The most one send may take, whatever the destination's own time-out."""
DRAIN_BOUND_S = 20.0
"""The most a closing run waits for the notifications still being sent."""


class NotifiedRun(Protocol):
    run_id: str
    run_dir: Path

    def subscribe(self, callback: Callable[[ev.Event], None]) -> None: ...

    def append(self, event: ev.Event) -> ev.Event: ...


class Notifications:
    def __init__(self, run: NotifiedRun, destinations: list[Destination]) -> None:
        self.run = run
        self.destinations = destinations
        self.triggers = Triggers(run.run_id, run.run_dir)
        self.notifiers: list[Notifier] = []
        self.warnings: list[str] = []
        for destination in destinations:
            if destination.kind == "desktop" and (why := unavailable()) is not None:
                self.warnings.append(f"--notify desktop: {why}; no desktop notifications")
                continue
            self.notifiers.append(notifier_for(destination))
        self.sent: list[Notification] = []
        self._pending: set[asyncio.Task[None]] = set()
        self._failed: dict[str, int] = {}
        self._told = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def attach(cls, run: NotifiedRun, written: list[str]) -> Notifications:
        """Notifications for `run` to the destinations as the user wrote them (checked
        already on the command line: a bad one raises ValueError here)."""
        destinations = [d for text in written for d in parse_destinations(text)]
        hub = cls(run, destinations)
        run.subscribe(hub.on_event)
        return hub

    @property
    def described(self) -> str:
        """Where notifications go, safe for the log: "bell, webhook to hooks.example.com"."""
        return ", ".join(dict.fromkeys(d.described for d in self.destinations))

    # --- events in --------------------------------------------------------------------

    def on_event(self, event: ev.Event) -> None:
        loop = self._running_loop()
        if loop is None:
            return
        if not self._told and isinstance(event, ev.RunStarted | ev.RunResumed | ev.RunForked):
            self._told = True
            loop.call_soon(self._tell_where)  # past the log's fan-out of this event
        note = self.triggers.notification(event)
        if note is None:
            return
        self.sent.append(note)
        for notifier in self.notifiers:
            self._start(loop, notifier, note)

    def _running_loop(self) -> asyncio.AbstractEventLoop | None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            pass  # an event appended from a thread: sends still start on the run's loop
        return self._loop

    def _start(
        self, loop: asyncio.AbstractEventLoop, notifier: Notifier, note: Notification
    ) -> None:
        def start() -> None:
            task = loop.create_task(self._send(notifier, note), name=f"notify {notifier.described}")
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            start()
        else:
            loop.call_soon_threadsafe(start)

    def _tell_where(self) -> None:
        self._log(ev.Notice(level="info", message=f"notifications go to {self.described}"))
        for warning in self.warnings:
            self._log(ev.Notice(level="warning", message=warning))

    # --- notifications out ------------------------------------------------------------

    async def _send(self, notifier: Notifier, note: Notification) -> None:
        try:
            await asyncio.wait_for(notifier.send(note), SEND_BOUND_S)
        except NotifyFailed as exc:
            self._failure(notifier, str(exc))
        except TimeoutError:
            self._failure(notifier, f"no answer within {SEND_BOUND_S:g} s")
        except Exception as exc:  # a destination's own bug is no reason to end the run
            self._failure(notifier, f"{type(exc).__name__}: {exc}")

    def _failure(self, notifier: Notifier, why: str) -> None:
        name = notifier.described
        self._failed[name] = self._failed.get(name, 0) + 1
        if self._failed[name] == 1:
            self._log(
                ev.Notice(
                    level="warning",
                    message=f"notification to {name} failed: {why} (the run goes on; "
                    "later failures of it are counted, not repeated)",
                )
            )

    def _log(self, event: ev.Event) -> None:
        with contextlib.suppress(Exception):  # the log may be closed: the run is over
            self.run.append(event)

    async def drain(self, bound_s: float = DRAIN_BOUND_S) -> None:
        """Wait, at most `bound_s`, for the notifications still being sent."""
        await asyncio.sleep(0)  # sends scheduled just now (the end's) have started
        pending = set(self._pending)
        if pending:
            _, late = await asyncio.wait(pending, timeout=bound_s)
            for task in late:
                task.cancel()
        repeated = {name: n for name, n in self._failed.items() if n > 1}
        if repeated:
            counts = ", ".join(f"{name} {n} times" for name, n in repeated.items())
            self._log(ev.Notice(level="info", message=f"notifications failed: {counts}"))

    def summary(self) -> dict[str, Any]:
        return {"to": self.described, "sent": len(self.sent), "failed": dict(self._failed)}
