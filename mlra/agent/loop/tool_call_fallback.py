"""`--tool-calls auto`: native tool calls, and the tools in the prompt where those fail.

`auto` sends the tools natively and reads calls a model writes as text. That is not
enough where a server takes the native tools and its chat template drops them
(llama-cpp-python with a chat format that knows no tools): the model never sees a
tool, answers in prose, and the run ends with nothing done. So when the first
answers of a run, sent tools, hold no call at all, native and written alike, the
tools are described in the system prompt from then on (as `--tool-calls text` does),
a notice says so, and the agent's next prompt says how to call one.

Only servers named by a base URL fall back (a local or self-hosted server: the
vendors' own APIs do not drop tools, and native calls are their best). Only the
start of a run counts: once any answer has held a call, the model can call
tools, and a later answer in prose is the agent's choice (the agents nudge it). The
decision is made from the answers alone, so a resumed run catching up with its log,
and a replay of it, fall back at the same answer.
"""

from __future__ import annotations

from mlra import events as ev
from mlra.agent.loop.run_context import RunContext
from mlra.agent.providers.base import ModelResponse
from mlra.agent.providers.text_calls import FALLBACK_MARK
from mlra.tools.registry import ToolRegistry

FALL_BACK_AFTER = 2
"""Answers in a row, at the start of a run, that hold no tool call though tools were
sent: the second such answer is already unusual for a model that sees its tools (the
agents' own nudges, three of them, come after), and waiting longer spends those."""

NOTE = (
    "[Your tools are now described in the system prompt. To call one, write "
    '<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call> in your answer.]'
)
"""The agent's next prompt after the fall-back."""


class ToolCallFallback:
    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.tool_less = 0
        """Answers in a row with no tool call, since the run began."""
        self.settled = False
        """An answer has held a call, or the fall-back happened: nothing more to decide."""

    def after(self, agent: ev.AgentRole, response: ModelResponse, registry: ToolRegistry) -> str:
        """Count one agent turn's answer; returns a note for the agent's next prompt when
        this answer makes the tools go into the prompt, else ''."""
        run = self.run
        if self.settled or run.config.tool_calls != "auto" or not registry.names():
            return ""
        if response.tool_calls:
            self.settled = True
            return ""
        self.tool_less += 1
        if self.tool_less < FALL_BACK_AFTER:
            return ""
        self.settled = True
        if run.provider is None or not run.provider.describe_tools_in_prompt():
            return ""  # the user chose, or the server already refused native tools
        if not run.catchup.replaying:
            message = (
                f"the model answered {self.tool_less} times without calling a tool though "
                f"it was sent its tools natively (the {agent} was sent "
                f"{len(registry.names())}; the server may drop them): the tools are now "
                f"described in the prompt and calls are read from its text {FALLBACK_MARK}"
            )
            run.emit(ev.Notice(level="warning", message=message))
        return NOTE
