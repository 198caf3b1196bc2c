"""Keeping a history inside the context window: cut at turn boundaries, never the instructions."""

from __future__ import annotations

from mlra.agent.loop.history import AgentHistory
from mlra.agent.providers.base import ModelResponse, ToolCallRequest


def _history(turns: int) -> AgentHistory:
    h = AgentHistory(system="system")
    h.pin("the task: do the thing")
    for n in range(1, turns + 1):
        h.add_user(f"status {n}")
        h.add_assistant(
            ModelResponse(
                text=f"thought {n}",
                tool_calls=[
                    ToolCallRequest(id=f"c{n}", name="bash", arguments={"command": f"echo {n}"})
                ],
            )
        )
        h.add_tool_result(f"c{n}", "bash", f"output {n}", is_error=False)
    return h


def test_nothing_to_summarize_while_few_turns() -> None:
    assert _history(3).summarizable(keep_recent_turns=3) is None


def test_summary_replaces_whole_old_turns_and_keeps_instructions_and_recent_turns() -> None:
    h = _history(6)
    cut = h.summarizable(keep_recent_turns=2)
    assert cut is not None
    start, end, first, last = cut
    assert (first, last) == (1, 4)
    h.replace_with_summary(start, end, "did 1-4")
    contents = [m.content for m in h.messages]
    assert contents[0] == "the task: do the thing"
    assert any(c.startswith("[Summary of earlier steps]\ndid 1-4") for c in contents)
    assert "thought 4" not in contents and "thought 5" in contents and "thought 6" in contents
    # Every remaining tool result still follows the assistant turn that called it.
    ids_called: set[str] = set()
    for m in h.messages:
        ids_called |= {c.id for c in m.tool_calls}
        if m.role == "tool":
            assert m.tool_call_id in ids_called
    # A second summary finds the new turn boundaries.
    h.add_user("status 7")
    h.add_assistant(ModelResponse(text="thought 7"))
    cut2 = h.summarizable(keep_recent_turns=1)
    assert cut2 is not None and cut2[2:] == (5, 6)


def test_estimate_uses_the_providers_count_then_grows() -> None:
    h = _history(2)
    h.record_usage(5000)
    before = h.estimated_tokens()
    assert 5000 <= before < 5010
    h.add_user("x" * 4000)
    assert h.estimated_tokens() >= before + 1000
