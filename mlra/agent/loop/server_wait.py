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

from mlra import events as ev
from mlra.agent.loop.run_context import RunContext
from mlra.agent.providers.base import ServerGone

FIRST_WAIT_S = 1.0
MAX_WAIT_S = 30.0


class ServerWait:
    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.tries = 0
        self.waited_s = 0.0

    def reset(self) -> None:
        """The server answered (with an answer or an error), or the wait gave up: the
        next outage waits from the start again, with the whole `--server-wait`."""
        self.tries = 0
        self.waited_s = 0.0

    async def wait(self, agent: ev.AgentRole, exc: ServerGone) -> bool:
        """Wait before the call is asked again; False when the run's limit is used up."""
        run = self.run
        left = run.config.server_wait_s - self.waited_s
        if left <= 0:
            return False
        delay = min(MAX_WAIT_S, FIRST_WAIT_S * 2**self.tries, left)
        self.tries += 1
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
        limit again."""
        tries, waited_s = self.tries, self.waited_s
        self.reset()
        if not tries:
            return exc
        return ServerGone(
            f"{exc} (the run waited {waited_s:.0f} s for the server over {tries} "
            f"tries, its --server-wait limit)",
            cause=exc.cause,
            status=exc.status,
            waited_s=round(waited_s, 3),
        )
