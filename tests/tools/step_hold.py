"""Holding one step of a sandbox's start in its thread, so a test can cancel the start
there: the step has done its work (what it made exists) and waits to be let go."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

HOLD_S = 60.0
"""The longest a step is held: a test that never lets it go fails, not hangs."""


class Hold:
    """The `nth` call of `owner.name` (a function or a method), held once it has
    returned until `let_go`; `seen` is what each call made or was called with, for the
    test to look for afterwards."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        owner: Any,
        name: str,
        nth: int = 1,
        see: Callable[..., object] | None = None,
    ) -> None:
        real = getattr(owner, name)
        self.seen: list[Any] = []
        self._reached = threading.Event()
        self._go = threading.Event()
        calls = itertools.count(1)

        def held(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            if see is not None:
                self.seen.append(see(result, *args, **kwargs))
            if next(calls) == nth:
                self._reached.set()
                self._go.wait(HOLD_S)
            return result

        monkeypatch.setattr(owner, name, held)

    async def reached(self) -> None:
        assert await asyncio.to_thread(self._reached.wait, HOLD_S), "the step was never reached"

    def let_go(self) -> None:
        self._go.set()


async def cancel_held(
    starting: asyncio.Future[Any], hold: Hold, close: Callable[[], Awaitable[None]]
) -> None:
    """Cancel a start held at `hold`, as an attempt stopped as its sandbox starts is, and
    close the sandbox once, as the run does once the start has ended: a start that gives up
    at once is closed while the step's thread goes on; one that waits for it, once the
    step is let go. Then every thread this loop lent a step is waited for, so what an
    abandoned one made exists by the time the test looks."""
    await hold.reached()
    starting.cancel()
    await asyncio.sleep(0)  # one turn of the loop: the cancellation reaches the start
    gave_up = starting.done()
    if gave_up:
        await close()
    hold.let_go()
    with pytest.raises(asyncio.CancelledError):
        await starting
    if not gave_up:
        await close()
    await asyncio.get_running_loop().shutdown_default_executor()
