"""What the user decides of a tool call stopped at a breakpoint: approve it, run it with
other arguments (edit) or reject it with a message.

Asked of the user live (the run held meanwhile, as a pause holds it); taken from the
log while a resumed run catches up; and, in a replay (`--model replay:RUN`), taken
from the recording for every call its user edited or rejected, breakpoint or not:
the recorded run ran the call so, and a replay that ran it as the model asked read
another result and diverged at the next request.
"""

from __future__ import annotations

from typing import Any

from mlra import events as ev
from mlra.agent.loop.controls import Breakpoint, Decision
from mlra.agent.loop.run_context import RunContext
from mlra.agent.providers.base import ToolCallRequest
from mlra.agent.providers.result_notes import REJECTED
from mlra.tools.registry import Tool, ToolOutcome, validated


def rejected(message: str | None) -> ToolOutcome:
    """A call the user rejected at its breakpoint, as the model reads it."""
    return ToolOutcome(
        output=REJECTED + (message or "no reason given"),
        ok=False,
        error="rejected by the user",
    )


def replayed_decision(run: RunContext, call: ToolCallRequest) -> ev.Control | None:
    """The recorded user's edit or rejection of this call, where the run replays a
    recording (None elsewhere): logged as a `control` from `replay`, so the replay's
    log and transcript say that the call ran as the user had it, not as asked."""
    provider = run.provider
    recorded = provider.recorded_decision(call) if provider is not None else None
    if recorded is None:
        return None
    # A resumed replay's log holds it already: while it catches up, or where it was
    # killed after the decision and before the call began (it runs again now).
    if not run.catchup.replaying and not run.catchup.decision_logged(call.id):
        run.append(
            ev.Control(
                action=recorded.action,
                call_id=call.id,
                arguments=recorded.arguments,
                text=recorded.text,
                source=ev.REPLAYED,
            )
        )
    return recorded


def used_up(run: RunContext, call: ToolCallRequest) -> None:
    """A call whose result a resumed replay's catch-up takes from its log: the recording's
    edit or rejection of it was applied when it ran (the log holds its `control`), so it is
    used up now as then, or the next call asked the same (a server that sends no ids has
    `call_0` in every answer) took it, where the recording ran that call as asked."""
    if run.provider is not None:
        run.provider.recorded_decision(call)


async def await_decision(
    run: RunContext, call: ToolCallRequest, bp: Breakpoint, tool: Tool[Any] | None
) -> Decision:
    """The user's decision of a call its breakpoint `bp` stopped."""
    asked = ev.ApprovalRequested(
        call_id=call.id, tool=call.name, arguments=call.arguments, reason=bp.describe()
    )
    replaying = run.catchup.replaying
    if replaying:  # a call run again while catching up: decided as it was then
        run.emit(asked)
        recorded = run.catchup.recorded_decision(call.id)
        if recorded is not None:
            return recorded
    future = run.controls.expect_decision(
        call.id, None if tool is None else lambda arguments: validated(tool, arguments)[1]
    )
    if not run.catchup.replaying:
        # Live, or gone live as no decision was recorded: asked here, after the
        # `run_resumed` that cleared the old request, or nobody sees it waiting.
        run.emit(asked)
    # While the run waits for a human it is held as a pause holds it: the clock
    # stops and so do the sandbox's commands and jobs, or a job would compute off
    # the clock and its `job_ended` would understate its run. Unless the user chose
    # to let them run (`--break-runs-jobs`): then the wait counts on the clock.
    held = run.controls.hold_at_breaks
    if held:
        run.clock.pause()
        if run.sandbox is not None:
            run.sandbox.suspend_commands()
    try:
        return await future
    finally:
        if held and not run.controls.holding():
            run.clock.resume()
            if run.sandbox is not None:
                run.sandbox.resume_commands()
