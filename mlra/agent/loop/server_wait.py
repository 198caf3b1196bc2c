"""Waiting out a model server that went away, instead of losing the run to it.

A local server that reloads its model, crashes and is restarted by its user, or is
killed mid-answer comes back at the same address: the call is asked again after a
wait that doubles (1 s, 2 s, 4 s ... at most `MAX_WAIT_S`), with the run's clock
paused while it waits, up to the run's `server_wait_s` for one call. Each wait is a
`model_retry` event saying why (the connection lost mid-answer, no server answering,
or a server still loading its model), so the console and headless output show the
run waiting, and the log keeps every retry. Past the limit, the failure says what
happened and how long the run waited (aider and OpenHands retry so; Inspect waits
out a restarting server).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mlra import events as ev
from mlra.agent.loop.run_context import RunContext
from mlra.agent.providers.base import ServerGone, retries_told_to
from mlra.agent.providers.server_gone import NOT_READY

FIRST_WAIT_S = 1.0
MAX_WAIT_S = 30.0
ABSENT_WITHIN_S = 20.0
"""A try with no answer, ended sooner than this (the SDKs' 10 s connect time-out and
their longest wait before a retry, 8 s), is a server not there; a longer one timed out
reading a server that is there."""


class ServerWait:
    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.tries = 0
        self.waited_s = 0.0
        self.asked = 0
        """Requests sent in the outage so far: each failed call's first and the SDK's
        retries of it."""

    def reset(self) -> None:
        """The server answered (with an answer or an error), or the wait gave up: the
        next outage waits from the start again, with the whole `--server-wait`."""
        self.tries = 0
        self.waited_s = 0.0
        self.asked = 0

    def holding(self, status: int | None) -> int | None:
        """The wait (its `attempt`) an SDK retry after `status` belongs to, or None. Only
        a retry that says the server is still away (no answer, or a not-ready status) is
        the wait's: `tries` lasts until the call ends, so a server back and answering
        429 or 500 within the same call would have its retries hidden by the displays
        while the last line printed still said the server was not ready."""
        if status is not None and status not in NOT_READY:
            return None
        return self.tries or None

    async def wait(self, agent: ev.AgentRole, exc: ServerGone) -> bool:
        """Wait before the call is asked again; False when the run's limit is used up."""
        run = self.run
        left = run.config.server_wait_s - self.waited_s
        if left <= 0:
            return False
        delay = min(MAX_WAIT_S, FIRST_WAIT_S * 2**self.tries, left)
        self.tries += 1
        self.asked += 1 + exc.retries
        run.emit(
            ev.ModelRetry(
                agent=agent,
                model=run.config.model,
                attempt=self.tries,
                status=exc.status,
                cause=exc.cause,
                wait_s=round(delay, 3),
                wait_limit_s=run.config.server_wait_s,
            )
        )
        paused = run.clock.running
        if paused:
            run.clock.pause()  # the server's absence is not the agent's time
        started = time.monotonic()
        try:
            await asyncio.sleep(delay)
        finally:
            self.waited_s += time.monotonic() - started
            if paused and not run.controls.holding():
                run.clock.resume()
        return True

    def gave_up(self, exc: ServerGone) -> ServerGone:
        """The failure as the run ends on it: what happened, and how long it waited
        (`waited_s`, which its `model_error` records, so a notification can say the
        server did not come back). The wait is over: the next outage has the whole
        limit again. One count is said, of every request sent in the outage (the SDK's
        retries within each call and the run's calls after its waits), not the last
        call's retries beside the run's waits, which read as two contradicting counts."""
        tries, waited_s, asked = self.tries, self.waited_s, self.asked + 1 + exc.retries
        self.reset()
        if not tries:
            return exc
        return ServerGone(
            f"{exc.plain} (the run waited {waited_s:.0f} s for the server and asked "
            f"{asked} times in all, its --server-wait limit)",
            cause=exc.cause,
            status=exc.status,
            waited_s=round(waited_s, 3),
            plain=exc.plain,
        )


@contextmanager
def sdk_retries_off_the_clock(
    run: RunContext, told: Callable[[int, int | None], None]
) -> Iterator[None]:
    """The SDK's own retries of a `--base-url` server that is not there (no answer at
    all, or 502/503/504) are the server's absence as much as the run's waits above:
    the clock stops at the first such retry and starts again once the server answers
    or the call ends. They counted before: in an outage, the clock went on about 11 s
    in 30 while the batch's line said "clock paused". `told` is told of each retry as
    before (`model_retry`). A hosted API's retries still count (its outages and
    time-outs are its own), as do the first try, the SDK's first wait, and a retry
    after a read that timed out (a slow server is there)."""
    provider = run.provider
    local = provider is not None and provider.base_url is not None
    read_timeout = provider.timeout_s if provider is not None else 0.0
    paused = False
    last = time.monotonic()

    def on_retry(attempt: int, status: int | None) -> None:
        nonlocal paused, last
        now = time.monotonic()
        # A retry after no answer at all follows a refused connection or a time-out; a
        # time-out of a server that is there and slow (the read's, 600 s by default) is
        # its time, not an absence: only a try that failed sooner than any read could
        # time out is taken for a server not there.
        quick = now - last < ABSENT_WITHIN_S < read_timeout
        last = now
        absent = status in NOT_READY or (status is None and quick)
        if local and absent and not paused and run.clock.running:
            run.clock.pause()
            paused = True
        told(attempt, status)

    def on_answer(status: int) -> None:
        nonlocal paused
        if paused and status not in NOT_READY:
            paused = False
            if not run.controls.holding():
                run.clock.resume()

    try:
        with retries_told_to(on_retry, on_answer):
            yield
    finally:
        if paused and not run.controls.holding():
            run.clock.resume()
