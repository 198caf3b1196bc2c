"""How a model call in flight is going, in words: reading the prompt, or writing its
answer at an estimated speed. The console's status line and the headless transcript's
heartbeats both say it, so a slow local server's minutes read as work, not a hang."""

from __future__ import annotations

from mlra.agent.record.state import RunState
from mlra.console.text.model_lines import short_seconds, tokens_per_second
from mlra.durations import format_duration


def answer_speed(state: RunState, elapsed_s: float) -> str:
    """The speed of the answer now streaming (" · ~32 tok/s"), from the text it streamed
    (four characters a token, so marked "~" as an estimate); empty until a second of
    writing has passed or where no text streams (a native tool call's arguments)."""
    if state.answering_since is None or not state.streamed_chars:
        return ""
    writing = elapsed_s - state.answering_since
    if writing < 1.0:
        return ""
    return f" · ~{tokens_per_second(state.streamed_chars / 4 / writing)}"


def model_call_line(state: RunState, now: float) -> str:
    """The heartbeat's line for the model call in flight (empty: none): headless, a
    local model's prompt reading and writing took minutes with nothing printed."""
    if state.generating_since is None or state.generating_agent is None:
        return ""
    took = format_duration(max(0.0, now - state.generating_since))
    agent = state.generating_agent
    if state.retry is not None:
        return f"… {agent}'s model call still going, {took} (retry {state.retry.attempt})"
    if state.answering_since is None:
        return f"… {agent}'s model is still reading the prompt, {took}"
    read = (
        f" (prompt read in {short_seconds(state.first_token_s)})"
        if state.first_token_s is not None
        else ""
    )
    return f"… {agent}'s model still writing, {took}{answer_speed(state, now)}{read}"
