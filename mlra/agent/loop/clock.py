"""The run clock: active time counted against the deadline, pauses excluded."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque

MARKS = 256
"""The starts and pauses a clock keeps for `elapsed_at`: a model call's few, with room
for the SDK's retries off the clock (each a pause and a start)."""


class RunClock:
    """Counts active seconds; `pause()` stops it, `resume()` starts it again.

    `already` carries time spent before this process (a resumed run).
    """

    def __init__(self, limit_s: float, *, already: float = 0.0) -> None:
        self._limit_s = limit_s
        self._banked = already
        self._since: float | None = None
        self._moved = asyncio.Event()
        self._marks: deque[tuple[float, float, bool]] = deque(maxlen=MARKS)
        """(wall, reading, running after) at each start and pause: `elapsed_at`."""

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
            self._marks.append((self._since, self._banked, True))

    def pause(self) -> None:
        if self._since is not None:
            now = time.monotonic()
            self._banked += now - self._since
            self._since = None
            self._marks.append((now, self._banked, False))

    resume = start

    @property
    def running(self) -> bool:
        return self._since is not None

    @property
    def started(self) -> bool:
        """Whether the run has started its clock (since stopped or not): a clock that
        stands still after that is a pause."""
        return bool(self._marks)

    def elapsed(self) -> float:
        if self._since is None:
            return self._banked
        return self._banked + (time.monotonic() - self._since)

    def elapsed_at(self, moment: float) -> float:
        """The reading at `moment` (a past `time.monotonic()`): a model call's pause up to
        where its time was taken, though the clock stopped or ran after it."""
        if moment >= time.monotonic():
            return self.elapsed()
        for wall, reading, running in reversed(self._marks):
            if wall <= moment:
                return reading + (moment - wall if running else 0.0)
        return self._marks[0][1] if self._marks else self._banked

    def remaining(self) -> float:
        return max(0.0, self.limit_s - self.elapsed())

    def expired(self) -> bool:
        return self.elapsed() >= self.limit_s


class PausedSpan:
    """How long `clock` stood still (a pause, the SDK's retries of a local server that
    is not there) since this was made, in wall seconds: a model call's `paused_s`. The
    server goes on answering through a pause, so its wall time (`latency_s`) held the
    pause too, and "answered in 1m21s" contradicted the status line, which counts by
    the run clock. A pause the span began in counts as much as one begun in it (a
    summary asked while paused, a call asked again after the wait for a server); a run
    that never started its clock counts nothing as paused: its wall time stands, as a
    tool call's does."""

    def __init__(self, clock: RunClock) -> None:
        self._clock = clock
        self._wall = time.monotonic()
        self._ran = clock.elapsed()

    def paused_s(self, until: float | None = None) -> float:
        """Up to `until` seconds into the span (where the call's `latency_s` was taken:
        a pause after that, while the provider asks its server more, is not the
        call's), or to now."""
        if not self._clock.started:
            return 0.0
        end = time.monotonic()
        if until is not None:
            end = min(end, self._wall + until)
        wall = end - self._wall
        return max(0.0, min(wall, wall - (self._clock.elapsed_at(end) - self._ran)))
