"""Calls a search's attempt leaves running as its time limit falls, for its run to take up
or cut as it ends (agent/loop/tool_step.py runs them, agent/agents/closing_validation.py
decides).

A validation under way at the limit grades a frozen copy of the artifact. Killed with the
agent's task, the closing validation then graded the same bytes again from the start
(minutes of lm-eval for a model), and a person watching saw one validation cut and the
next begin. So a call of a tool that may be held (`Tool.held_at_limit`) runs in a task of
its own: where the limit cuts the agent's, it goes on, held here; the run then takes it up
as its closing validation (`finish`: the artifact is as it was frozen) or cuts it
(`drop`: changed since, no time left, or the run ended otherwise). Its result is recorded
as any call's, whichever it is. Cut by anything else (a stop, the run's end), it is killed
at once, as any call is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from mlra.tools.registry import ToolOutcome
from mlra.tools.sandbox.runner import finish_despite_cancel


class HeldCalls:
    def __init__(self, at_limit: Callable[[], bool]) -> None:
        self._at_limit = at_limit
        """Whether the run's time limit is what ends it now (its clock spent)."""
        self._held: dict[str, asyncio.Task[ToolOutcome]] = {}

    async def run(self, call_id: str, call: Coroutine[Any, Any, ToolOutcome]) -> ToolOutcome:
        """The call's outcome; cut by the time limit, it is held and goes on."""
        task = asyncio.ensure_future(call)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if self._at_limit() and not task.done():
                self._held[call_id] = task
            else:
                await _cut(task)
            raise

    def holds(self, call_id: str) -> bool:
        return call_id in self._held

    async def finish(self, call_id: str) -> ToolOutcome:
        """The held call, taken up: its outcome once it ends (cancelled meanwhile, by the
        run's end, it is killed, as a call is)."""
        return await self._held.pop(call_id)

    async def drop(self) -> None:
        """Cut every call held: killed, their results recorded, before this returns."""
        while self._held:
            await _cut(self._held.popitem()[1])


async def _cut(task: asyncio.Task[ToolOutcome]) -> None:
    """Cancel the call's task and wait for its end (its processes killed, its result
    recorded), through any cancellation of the caller's, raised after."""
    task.cancel()
    await finish_despite_cancel(asyncio.wait([task]))
    if not task.cancelled():
        task.exception()  # its own failure, recorded as its result: retrieved here
