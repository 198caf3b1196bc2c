"""One step of a sandbox's start, made in a thread and undone if the start is cancelled.

A sandbox's start is awaited by its attempt's task, which the supervisor cancels
(`attempt_stop`), as the end of a search does. A cancelled await does not stop the
thread it awaited: the step goes on, and what it makes after the start gave up (a
uid's claim and its view's binds, a network namespace's holder and slirp4netns, a
cgroup, a container) is recorded by no sandbox, so no close undoes it; it stayed until
mlra exited, a container until a later mlra found its owner dead. So a cancelled start
waits for its step's thread and undoes what the step made before the cancellation goes
on. A step that hangs must not hold the cancellation for good: the wait is bounded by
the step's own timeouts (`wait_s`), and a thread still going by then undoes what it
made itself, when it ends; a close that gives back what that thread still uses waits for
it (`Pending`). A step that can stop midway (a walk of a cache or a task folder) is
told when its start gave up (`stop`), so the undo it waits for comes soon, not at the end
of a walk that no one needs any more. A loop that shuts down cancels every task at once: the step's thread and
its undo are awaited as the executor's futures, not tasks, so that undoes it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from mlra.tools.sandbox.runner import finish_despite_cancel

T = TypeVar("T")

logger = logging.getLogger(__name__)


async def made_or_undone(
    make: Callable[[], T],
    undo: Callable[[T], object],
    wait_s: float,
    pending: Pending | None = None,
    stop: threading.Event | None = None,
) -> T:
    """`make()` in a thread; its result, or, where the caller is cancelled meanwhile,
    `undo` of it (in a thread, waited for up to `wait_s`; past that, at the thread's end,
    which `pending` then holds for a close to wait for) before the cancellation goes on. A
    `make` that raised made nothing to undo. `stop` is set as the caller gives up: a
    `make` that watches it ends early (what it made so far is undone all the same)."""
    lock = threading.Lock()
    abandoned = False
    handed: list[T] = []
    """What `make` made, once it went back to the awaiter: it undoes it, if cancelled."""

    def step() -> T:
        made = make()
        with lock:
            if not abandoned:
                handed.append(made)
                return made
        _undo(undo, made)
        return made

    # Futures of the executor, not tasks: a loop's shutdown, which cancels every task,
    # cancels neither the step's end nor the undo a cancelled awaiter began.
    loop = asyncio.get_running_loop()
    making = loop.run_in_executor(None, contextvars.copy_context().run, step)
    try:
        return await asyncio.shield(making)
    except asyncio.CancelledError:
        with lock:
            abandoned = True
        if stop is not None:
            stop.set()
        # Handed back already: undone here, begun before anything else is awaited.
        undoing = loop.run_in_executor(None, _undo, undo, handed[0]) if handed else making
        await finish_despite_cancel(_waited(undoing, wait_s, pending))
        raise


class Pending:
    """The ends of steps a cancelled start stopped waiting for (each undoes what it made
    when it ends). A close that gives back what such a step still uses (a uid its container
    runs as) waits for them first: given back earlier, another sandbox could claim it."""

    def __init__(self) -> None:
        self._ends: set[asyncio.Future[object]] = set()

    def add(self, end: asyncio.Future[object]) -> None:
        self._ends.add(end)
        end.add_done_callback(self._ends.discard)

    def busy(self) -> bool:
        """Whether a step's thread is still going (what it made not yet undone)."""
        return any(not end.done() for end in self._ends)

    async def ended(self) -> None:
        """Once every such step has ended, what it made undone."""
        await asyncio.gather(
            *(asyncio.shield(end) for end in list(self._ends)), return_exceptions=True
        )


async def _waited(undoing: asyncio.Future[Any], wait_s: float, pending: Pending | None) -> None:
    """Wait up to `wait_s` for the undo (the step's thread, where it undoes what it made
    itself); `pending` holds it until it ends, past that too."""
    if pending is not None:
        pending.add(undoing)
    # Past the bound: undone at the thread's end. Else it made nothing, or its undo failed
    # (logged): nothing to wait for.
    with contextlib.suppress(Exception):
        await asyncio.wait_for(asyncio.shield(undoing), wait_s)


def _undo(undo: Callable[[T], object], made: T) -> None:
    try:
        undo(made)
    except Exception:  # the cancellation goes on all the same
        logger.warning("could not undo a cancelled sandbox start's step", exc_info=True)
