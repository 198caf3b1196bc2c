"""Driving the agent: it races the deadline and the user's stop, and whichever
ends first ends the run; the sandbox's resources are sampled beside."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol

from mlra import events as ev
from mlra.agent.loop.catchup import CatchUp
from mlra.agent.loop.clock import RunClock
from mlra.agent.loop.controls import Controls
from mlra.agent.loop.ending import Ending, EndRun, unsubmitted
from mlra.tools.sandbox.base import Sandbox
from mlra.tools.sandbox.run_group import RunGroup


class Agent(Protocol):
    """What the controller drives: the supervisor–worker pair, or the baseline agent.

    An agent names it as its base to take the hooks' defaults (PEP 544): a hook it does
    not need is then one pyright still checks, not a name looked up at run time."""

    async def run(self) -> None:
        """Work until the run ends; end it by raising EndRun (e.g. on submit)."""

    async def validate_at_limit(self) -> None:
        """A search's attempt reached its own time limit (its run's commands stopped):
        what its workspace holds is validated all the same
        (agent/agents/closing_validation.py). Only an attempt's agents have one to do."""
        return None


async def drive(
    agent: Agent,
    *,
    deadline: Coroutine[Any, Any, Ending],
    stop: Coroutine[Any, Any, Ending],
    sampler: Coroutine[Any, Any, None],
) -> Ending:
    """The ending of whichever comes first: the agent's own, the deadline's or the stop's."""
    agent_task = asyncio.create_task(run_agent(agent), name="agent")
    deadline_task = asyncio.create_task(deadline, name="deadline")
    stop_task = asyncio.create_task(stop, name="stop")
    sampler_task = asyncio.create_task(sampler, name="resources")
    try:
        done, _ = await asyncio.wait(
            {agent_task, deadline_task, stop_task}, return_when=asyncio.FIRST_COMPLETED
        )
        if agent_task in done:
            ending = agent_task.result()
        elif deadline_task in done:
            ending = deadline_task.result()
        else:
            ending = stop_task.result()
    finally:
        for task in (agent_task, deadline_task, stop_task, sampler_task):
            task.cancel()
        # Cancelling the agent kills its running commands (the sandbox kills the
        # process group on cancellation) before evaluation looks at the workspace.
        await asyncio.gather(
            agent_task, deadline_task, stop_task, sampler_task, return_exceptions=True
        )
    return ending


async def run_agent(agent: Agent) -> Ending:
    try:
        await agent.run()
    except EndRun as end:
        return end.ending
    # Returning is not submitting: nothing was handed in, so nothing is graded.
    return unsubmitted("no_submission", "the agent stopped without calling submit")


WARN_SHARE, WARN_MOST_S = 0.1, 600.0
"""The time warning comes with a tenth of the limit left, or ten minutes where that is
less: early enough to act on, late enough that a long run's warning still means "soon"."""


def warning_left_s(limit_s: float) -> float:
    """Run-clock seconds left at which a run of `limit_s` is warned."""
    return min(WARN_SHARE * limit_s, WARN_MOST_S)


async def watch_deadline(
    clock: RunClock, controls: Controls, warn: Callable[[float], None] | None = None
) -> Ending:
    """The deadline's ending, once the clock is spent; `warn` is called once (with the
    seconds left) when the time warning is due."""
    warned = warn is None
    while True:
        await controls.wait_running()
        remaining = clock.remaining()
        if remaining <= 0:
            return Ending(reason="deadline", by="deadline", note="time limit reached")
        # Of the limit as it is now: a search's attempt may be given more time as it runs.
        warn_at = None if warned else warning_left_s(clock.limit_s)
        if warn is not None and warn_at is not None and remaining <= warn_at:
            warn(remaining)
            warned, warn_at = True, None
        until = remaining if warn_at is None else remaining - warn_at
        # Re-checked after each wait: a pause stops the clock, moving the deadline on; a
        # limit set anew (raised, or cut) ends the wait at once.
        await clock.wait_moved(min(until, 5.0) + 0.01)


async def sample_resources(
    workspace: Path,
    catchup: CatchUp,
    append: Callable[[ev.Event], ev.Event],
    interval_s: float | Callable[[], float],
    sandbox: Sandbox | None = None,
    sampled: Callable[[list[str]], Awaitable[None]] | None = None,
    group: RunGroup | None = None,
    attempts: Callable[[], list[Sandbox]] | None = None,
) -> None:
    """Log a resource sample every `interval_s` (read at each, where it is a function: a
    log near its size budget is sampled less often) once the run is live; a sandbox that
    measures itself (a container) is asked, else the host is. `sampled` is handed the
    metric files the sample's workspace walk found (agent/metrics/run_metrics.py)."""
    from mlra.agent.loop.resources import ResourceMonitor

    monitor = await asyncio.to_thread(
        functools.partial(
            ResourceMonitor, workspace, sandbox=sandbox, group=group, attempts=attempts
        )
    )
    await catchup.wait_live()
    while True:
        append(await asyncio.to_thread(monitor.sample))
        if sampled is not None:
            await sampled(monitor.metric_files)
        await asyncio.sleep(interval_s() if callable(interval_s) else interval_s)
