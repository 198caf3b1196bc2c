"""The run clock: active time counted against the deadline, pauses excluded."""

from __future__ import annotations

import asyncio
import contextlib
import time


class RunClock:
    """Counts active seconds; `pause()` stops it, `resume()` starts it again.

    `already` carries time spent before this process (a resumed run).
    """

    def __init__(self, limit_s: float, *, already: float = 0.0) -> None:
        self._limit_s = limit_s
        self._banked = already
        self._since: float | None = None
        self._moved = asyncio.Event()

    @property
    def limit_s(self) -> float:
        return self._limit_s

    @limit_s.setter
    def limit_s(self, value: float) -> None:
        # The deadline's watch sleeps until the limit it last read: a limit set lower
        # than that must wake it, or the run goes on past its new deadline.
        self._limit_s = value
        self._moved.set()

    async def wait_moved(self, timeout_s: float) -> None:
        """Returns after `timeout_s`, or as soon as the limit is set again (from the
        event loop), whichever comes first."""
        self._moved.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._moved.wait(), timeout_s)

    def start(self) -> None:
        if self._since is None:
            self._since = time.monotonic()

    def pause(self) -> None:
        if self._since is not None:
            self._banked += time.monotonic() - self._since
            self._since = None

    resume = start

    @property
    def running(self) -> bool:
        return self._since is not None

    def elapsed(self) -> float:
        if self._since is None:
            return self._banked
        return self._banked + (time.monotonic() - self._since)

    def remaining(self) -> float:
        return max(0.0, self.limit_s - self.elapsed())

    def expired(self) -> bool:
        return self.elapsed() >= self.limit_s


class PausedSpan:
    """How long `clock` stood still (a pause, the SDK's retries of a local server that
    is not there) since this was made, in wall seconds: a model call's `paused_s`. The
    server goes on answering through a pause, so its wall time (`latency_s`) held the
    pause too, and "answered in 1m21s" contradicted the status line, which counts by
    the run clock. A span begun with the clock stopped (a run that never started it)
    counts nothing as paused: its wall time stands, as a tool call's does."""

    def __init__(self, clock: RunClock) -> None:
        self._clock = clock
        self._counts = clock.running
        self._wall = time.monotonic()
        self._ran = clock.elapsed()

    def paused_s(self) -> float:
        if not self._counts:
            return 0.0
        wall = time.monotonic() - self._wall
        return max(0.0, wall - (self._clock.elapsed() - self._ran))
