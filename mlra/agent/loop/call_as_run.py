"""A tool call as it ran, for the agent's history: a call the user edited at a breakpoint
is shown to the model with the arguments that ran (its result opens with a note naming
what was asked), and a resumed run's recorded result is handed back as the outcome the
agent received then, so a resume rebuilds the same history."""

from __future__ import annotations

import json
from typing import Any

from mlra import events as ev
from mlra.agent.providers.base import ToolCallRequest
from mlra.agent.providers.result_notes import EDITED_NOTE
from mlra.tools.registry import ToolOutcome


def outcome_of(result: ev.ToolResult) -> ToolOutcome:
    """A tool's outcome as the agent received it, rebuilt from its record."""
    signal = result.signal
    if signal is None and result.ok and result.tool in ("submit", "report"):
        signal = result.tool  # logs written before the signal was recorded
    return ToolOutcome(
        output=result.output,
        ok=result.ok,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        error=result.error,
        data=dict(result.data),
        signal=signal,
        duration_s=result.duration_s,
    )


def ran_as(call: ToolCallRequest, arguments: dict[str, Any]) -> None:
    """Make `call`, the very object the agent's history holds, the call that ran: the
    model is then shown the arguments that ran, not the ones it asked for."""
    call.arguments = dict(arguments)
    call.raw_arguments = json.dumps(arguments, ensure_ascii=False)
    call.parse_error = None


def asked_text(call: ToolCallRequest, limit: int = 1_000) -> str:
    asked = f"{call.name}({call.raw_arguments or json.dumps(call.arguments)})"
    return asked if len(asked) <= limit else asked[:limit] + "…"


def edited_note(agent: ev.AgentRole, call: ToolCallRequest) -> str:
    """The note opening an edited call's result: the baseline runs its recipe, and goes
    on with the recipe's next step after the call; a model is told what it asked for."""
    whose = "The recipe's step had:" if agent == "baseline" else "You had asked for:"
    return EDITED_NOTE.format(whose=whose, asked=asked_text(call))
