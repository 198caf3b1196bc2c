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
made itself, when it ends.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from mlra.tools.sandbox.runner import finish_despite_cancel

T = TypeVar("T")

logger = logging.getLogger(__name__)


async def made_or_undone(make: Callable[[], T], undo: Callable[[T], object], wait_s: float) -> T:
    """`make()` in a thread; its result, or, where the caller is cancelled meanwhile,
    `undo` of it (in a thread, waited for up to `wait_s`; past that, at the thread's end)
    before the cancellation goes on. A `make` that raised made nothing to undo."""
    lock = threading.Lock()
    abandoned = False
    handed = False
    """What `make` made went back to the awaiter: it undoes it, if it was cancelled."""

    def step() -> T:
        nonlocal handed
        made = make()
        with lock:
            handed = not abandoned
        if not handed:
            _undo(undo, made)
        return made

    making = asyncio.ensure_future(asyncio.to_thread(step))
    try:
        return await asyncio.shield(making)
    except asyncio.CancelledError:
        with lock:
            abandoned = True
            ours = handed
        await finish_despite_cancel(_undone(making, undo if ours else None, wait_s))
        raise


async def _undone(
    making: asyncio.Future[T], undo: Callable[[T], object] | None, wait_s: float
) -> None:
    """Wait up to `wait_s` for the step's thread, then `undo` what it made (None: the
    thread undoes it itself)."""
    try:
        made = await asyncio.wait_for(asyncio.shield(making), wait_s)
    except Exception:  # it made nothing, or it still goes on: undone at its end
        return
    if undo is not None:
        await asyncio.to_thread(_undo, undo, made)


def _undo(undo: Callable[[T], object], made: T) -> None:
    try:
        undo(made)
    except Exception:  # the cancellation goes on all the same
        logger.warning("could not undo a cancelled sandbox start's step", exc_info=True)
