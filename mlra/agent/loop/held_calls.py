"""Calls a search's attempt leaves running as its time limit falls, for its run to take up
or cut as it ends (agent/loop/tool_step.py runs them, agent/agents/closing_validation.py
decides).

A validation under way at the limit grades a frozen copy of the artifact. Killed with the
agent's task, the closing validation then graded the same bytes again from the start
(minutes of lm-eval for a model), and a person watching saw one validation cut and the
next begin. So a call of a tool that may be held (`Tool.held_at_limit`) runs in a task of
its own: where the limit cuts the agent's, it goes on, held here; the run then takes it up
as its closing validation (`finish`: the artifact is as it was copied, a copy still being
made waited for) or cuts it (`drop`: changed since, no time left, or the run ended
otherwise). Its result is recorded as any call's, whichever it is, and says what cut it
(the limit, a stop). Cut by anything else before the limit (a stop, the run's end), it is
cut as any call is: its grader's process group killed and waited for, its result
recorded, before the run goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from mlra.tools.registry import ToolOutcome
from mlra.tools.sandbox.runner import finish_despite_cancel

LIMIT = "its time limit was reached"
"""Why the run's end cut a call, as the call's result says it (`[killed after 1.8 s: the
run ended (its time limit was reached) while this call was running]`): its limit, a stop
(a user's, the search's, its supervisor's), a failure of mlra's."""
STOPPED = "it was stopped"
FAILED = "it failed"


class HeldCalls:
    def __init__(self, at_limit: Callable[[], bool]) -> None:
        self._at_limit = at_limit
        """Whether the run's time limit is what ends it now (its clock spent)."""
        self._held: dict[str, asyncio.Task[ToolOutcome]] = {}
        self._why: dict[str, str] = {}
        """Why a held call was cut, for its result: its run's clock is spent whatever
        cut it, so the clock cannot tell a stop from the limit."""

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

    def why_cut(self, call_id: str) -> str | None:
        """Why the held call was cut (None: it was not held, or not cut)."""
        return self._why.pop(call_id, None)

    async def finish(self, call_id: str) -> ToolOutcome:
        """The held call, taken up: its outcome once it ends. The run's end meanwhile (a
        stop, the search's, its supervisor's) kills it, as a stop kills a call."""
        task = self._held.pop(call_id)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            self._why[call_id] = STOPPED
            await _cut(task)
            raise

    async def drop(self, why: str) -> None:
        """Cut every call held: killed, their results recorded saying `why`, before this
        returns."""
        while self._held:
            call_id, task = self._held.popitem()
            self._why[call_id] = why
            await _cut(task)


async def _cut(task: asyncio.Task[ToolOutcome]) -> None:
    """Cancel the call's task and wait for its end (its processes killed, its result
    recorded), through any cancellation of the caller's, raised after."""
    task.cancel()
    await finish_despite_cancel(asyncio.wait([task]))
    if not task.cancelled():
        task.exception()  # its own failure, recorded as its result: retrieved here
