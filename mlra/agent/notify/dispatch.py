"""Sending notifications to every destination, off the caller's path.

Each send is a task of its own, bounded in time, so no destination holds a run or a
batch; one destination's sends go out one after another, in the order they were made
(a command hook, each send its own process, heard "the server is back" before "waiting
for the server" when the two came close together under load); `drain` waits (bounded
too) for what is still being sent, so the last notification goes out before the
process exits. A destination that fails is told to
`on_failure` the first time (one line); later failures of it are counted, and the
counts are told once at the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from mlra.agent.notify.desktop import unavailable
from mlra.agent.notify.destinations import Destination, notifier_for
from mlra.agent.notify.note import Notification, Notifier, NotifyFailed

SEND_BOUND_S = 15.0
"""The most one send may take, whatever the destination's own time-out."""
ORDER_WAIT_S = 3.0
"""The most a send waits for the destination's send before it: enough for a command or a
webhook that answers to keep its order; a hung one no longer holds the sends after it
(each waited for the last to be cut at its bound, so behind two hung sends the run's end
began past the drain's bound and was cancelled unsent). DRAIN_BOUND_S covers this wait
and one send's bound."""
DRAIN_BOUND_S = 20.0
"""The most a closing run (or batch) waits for the notifications still being sent."""


class Dispatch:
    def __init__(
        self,
        destinations: list[Destination],
        *,
        on_failure: Callable[[str], None],
        on_counts: Callable[[str], None] | None = None,
    ) -> None:
        self.on_failure = on_failure
        self.on_counts = on_counts or on_failure
        self.notifiers: list[Notifier] = []
        self.warnings: list[str] = []
        """Destinations this machine cannot serve (a desktop without a desktop), in words."""
        for destination in destinations:
            if destination.kind == "desktop" and (why := unavailable()) is not None:
                self.warnings.append(f"--notify desktop: {why}; no desktop notifications")
                continue
            self.notifiers.append(notifier_for(destination))
        self.sent: list[Notification] = []
        self.failed: dict[str, int] = {}
        self._pending: set[asyncio.Task[None]] = set()
        self._last: dict[int, asyncio.Task[None]] = {}
        """Each notifier's latest send (by `id`): the next one to it waits for it."""
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def described(self) -> str:
        """Where notifications go, safe to log: "bell, webhook to hooks.example.com" (a
        desktop this machine does not have is left out: its warning says so)."""
        return ", ".join(dict.fromkeys(n.described for n in self.notifiers))

    def send(self, note: Notification) -> None:
        """Start sending `note` everywhere and return at once. Called on the event loop,
        or from a thread once the loop has been seen (the sends start on the loop)."""
        try:
            self._loop = asyncio.get_running_loop()
            here = True
        except RuntimeError:
            here = False
        loop = self._loop
        if loop is None:
            return
        self.sent.append(note)
        for notifier in self.notifiers:
            if here:
                self._start(loop, notifier, note)
            else:
                loop.call_soon_threadsafe(self._start, loop, notifier, note)

    def _start(
        self, loop: asyncio.AbstractEventLoop, notifier: Notifier, note: Notification
    ) -> None:
        before = self._last.get(id(notifier))
        task = loop.create_task(
            self._send(notifier, note, before), name=f"notify {notifier.described}"
        )
        self._last[id(notifier)] = task
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _send(
        self, notifier: Notifier, note: Notification, before: asyncio.Task[None] | None
    ) -> None:
        if before is not None and not before.done():
            await asyncio.wait({before}, timeout=ORDER_WAIT_S)  # a failure is its own
        try:
            await asyncio.wait_for(notifier.send(note), SEND_BOUND_S)
        except NotifyFailed as exc:
            self._failure(notifier, str(exc))
        except TimeoutError:
            self._failure(notifier, f"no answer within {SEND_BOUND_S:g} s")
        except Exception as exc:  # a destination's own bug is no reason to end a run
            self._failure(notifier, f"{type(exc).__name__}: {exc}")

    def _failure(self, notifier: Notifier, why: str) -> None:
        name = notifier.described
        self.failed[name] = self.failed.get(name, 0) + 1
        if self.failed[name] == 1:
            self.on_failure(
                f"notification to {name} failed: {why} (later failures of it are counted, "
                "not repeated)"
            )

    async def drain(self, bound_s: float = DRAIN_BOUND_S) -> None:
        """Wait, at most `bound_s`, for the notifications still being sent."""
        await asyncio.sleep(0)  # sends scheduled just now (the end's) have started
        pending = set(self._pending)
        if pending:
            _, late = await asyncio.wait(pending, timeout=bound_s)
            for task in late:
                task.cancel()
        repeated = {name: n for name, n in self.failed.items() if n > 1}
        if repeated:
            counts = ", ".join(f"{name} {n} times" for name, n in repeated.items())
            self.on_counts(f"notifications failed: {counts}")
