"""`--model demo`: a scripted supervisor and worker, so that a newcomer can try the
console's controls (pause, step, breakpoints, approving or editing an action, talking to
the agent, forking, a search's attempts) with no API key and no model server.

It is a product feature, not a test double: the suite's provider tests keep using the
loopback servers of tests/fakes, which speak the vendors' real HTTP APIs. This one speaks
no API at all; it stands behind the same provider seam as the vendors' (ModelProvider),
so its turns are real tool calls that go through the run's real tool registry, sandbox,
breakpoints and log.

Each answer is worked out from the request alone (the role its system prompt names, the
calls its history holds, the latest results), never from state kept between calls: an
edited call's result is what it reads next, a message from the user is acknowledged in the
next thought, and a forked or resumed run goes on where its history stands. What the user's
controls leave in the history is acted on as a careful agent would (demo_turns.py): a
rejection, an edit that failed or a call a stopped run cut short are followed by the call
again, and a flag the user names is changed (demo_plan.py). The words and the per-task
recipes are package data (demo_script.toml); the commands are the task's own reference
recipe (`[baseline]` in its task.toml), shortened for tiny-lm, with the run's seed put in
and, in a search's attempts, one hyperparameter varied per attempt.
Token counts are estimates from the characters, said as such; calls cost nothing.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from mlra.agent.providers.base import (
    Message,
    ModelProvider,
    ModelResponse,
    TextCallback,
    ToolCallRequest,
    estimated_usage,
)
from mlra.agent.providers.demo_plan import ATTEMPT, plan_for, script
from mlra.agent.providers.demo_turns import supervisor_turn, worker_turn

if TYPE_CHECKING:
    from mlra.agent.providers.table import ProviderRequest
    from mlra.tools.registry import ToolSpec

__all__ = ["DemoProvider", "demo", "script"]

THINK_S = 0.4
"""How long a turn "thinks" before it answers: long enough to pause or step between
turns in the console, short enough that a demo run is about its training."""


def _heard(messages: list[Message]) -> str:
    """ "noted: ..." for each message from the user in the newest prompt."""
    last = messages[-1] if messages and messages[-1].role == "user" else None
    if last is None:
        return ""
    said = re.findall(r"\[message from the user\] (.*)", last.content)
    return "".join(f"Noted: {text.strip().rstrip('.')}. " for text in said)


class DemoProvider(ModelProvider):
    priced = True  # it is free: a cost budget holds, at 0
    context_window_from = "default"

    def __init__(self, seed: int | None) -> None:
        self.name = "demo"
        self.seed = seed

    async def generate(
        self,
        *,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        on_text: TextCallback | None = None,
        max_tokens: int | None = None,
    ) -> ModelResponse:
        head = system.lstrip().splitlines()[0].lower() if system.strip() else ""
        plan = plan_for(messages, self.seed)
        offered = {t.name for t in tools}
        calls: list[ToolCallRequest] = []
        if head.startswith("you summarize"):
            text = plan.say("summary")
        elif "reviewing" in head:
            text = plan.say("review")
        elif "supervisor" in head and "assign_subtask" in offered:
            text, calls = supervisor_turn(messages, plan)
        elif "worker" in head:
            attempt = any(ATTEMPT.search(m.content) for m in messages if m.role == "user")
            text, calls = worker_turn(messages, plan, alone="alone" in head, attempt=attempt)
        else:
            text = "The demo model plays a supervisor and a worker only (not --search llm)."
        text = _heard(messages) + text
        await asyncio.sleep(THINK_S)
        if on_text is not None:
            for piece in re.findall(r"\S+\s*", text):
                on_text(piece)
        sent = len(system) + sum(len(m.content) for m in messages)
        produced = len(text) + sum(len(str(c.arguments)) for c in calls)
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=estimated_usage(sent, produced),
            stop_reason="tool_use" if calls else "end_turn",
            latency_s=THINK_S,
        )


def demo(request: ProviderRequest) -> ModelProvider:
    """`--model demo`: needs no key, no server; `--base-url` has nothing to reach."""
    return DemoProvider(request.settings.seed)
