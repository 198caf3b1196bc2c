"""The run clock: active time counted against the deadline, pauses excluded."""

from __future__ import annotations

import time


class RunClock:
    """Counts active seconds; `pause()` stops it, `resume()` starts it again.

    `already` carries time spent before this process (a resumed run).
    """

    def __init__(self, limit_s: float, *, already: float = 0.0) -> None:
        self.limit_s = limit_s
        self._banked = already
        self._since: float | None = None

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
