"""What a display says of an agent's answer left as text and of what the run told the
agent next: an answer that is essentially one tool call written as text, which nothing
ran (a native-only run reads no text; a call to a tool that does not exist is never
run), and the words the agent's next prompt began with (a nudge to act with a tool,
the note that its written call could not be read).

Read from the log alone (the run's config, its `worker_thought`s and `step_started`
prompts), so the live console, an attached one, a replay and the headless lines say
the same: the run's own notice of an unread call is given only where the model was told
the format, and otherwise the Worker pane showed such an answer as plain prose. Where
the notice is given, it is said once, as the line under the answer: the notice, that
line and what the next prompt told the agent said one thing three times.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from mlra import events as ev
from mlra.agent.providers.text_calls import SHORT_LINE, UNREAD, read_text_calls
from mlra.console.text.event_lines import one_line
from mlra.tools.registry import no_such_tool

USER_MESSAGE = "[message from the user] "
"""How a message the user sent begins in the agent's prompt (agent/loop/model_turn.py)."""
STATUS = "[status]"
"""How the clock note that ends every prompt begins."""


def configured_tools(started: ev.RunStarted) -> dict[str, tuple[str, ...]] | None:
    """The tools a recorded run's agents have, by its config as this mlra builds them
    (agent/agents/tool_lists.py); None where the config cannot be read (one written by a
    much older mlra). Settings this mlra no longer has are left out: they choose no tool."""
    from pydantic import ValidationError

    from mlra.agent.agents.tool_lists import run_tool_names
    from mlra.agent.setup.config import RunConfig

    known = {k: v for k, v in started.config.items() if k in RunConfig.model_fields}
    try:
        config = RunConfig.model_validate(known)
    except ValidationError:
        return None
    return run_tool_names(config, model=started.model != "baseline")


def agents_tools(
    tools: dict[str, tuple[str, ...]] | None, *, supervisor: bool = False
) -> frozenset[str] | None:
    """The supervisor's tools, or those of the agents whose answers the Worker pane
    shows (all but the supervisor); None where they are not known."""
    if tools is None:
        return None
    return frozenset(
        name
        for agent, names in tools.items()
        if (agent == "supervisor") == supervisor
        for name in names
    )


def written_call_words(text: str, tools: Collection[str] | None) -> str | None:
    """What came of an answer that is essentially one call-shaped object left as text
    (`{"name": "pretrain", "arguments": {...}}`): nothing ran it. None for any other
    answer, and where the agent's tools are not known."""
    if not tools or "{" not in text:
        return None
    names = set(tools)
    found = read_text_calls(text, names, tools_in_prompt=True)
    if found.unknown:
        unknown = "; ".join(no_such_tool(name) for name in dict.fromkeys(found.unknown))
        return f"a tool call written as text: {unknown}, so nothing ran"
    rest = found.prose.strip()
    if found.calls and "\n" not in rest and len(rest) <= SHORT_LINE:
        # Left as text where calls are native only (`--tool-calls native`).
        called = ", ".join(dict.fromkeys(call.name for call in found.calls))
        return f"a call to {called} written as text, not as a tool call: nothing ran it"
    return None


def unread_call(notice: ev.Notice) -> tuple[str, str] | None:
    """The agent and the problems of the run's notice of an answer whose call was not
    read; None for any other notice. The one place that reads a log written before the
    notice had its `kind` (agent/providers/text_calls.py unread_notice's words)."""
    if notice.kind == "unread_call" and notice.agent is not None:
        return notice.agent, "; ".join(notice.problems)
    if notice.kind is not None:
        return None
    agent, mark, rest = notice.message.partition("'s answer " + UNREAD)
    if not mark or " " in agent:
        return None
    return agent, rest.rpartition(" (nothing was run")[0] or rest


def told_words(step: ev.StepStarted, *, said_unread: bool = False) -> str:
    """What the run told the agent as its step began, besides the clock note and the
    user's messages (shown where they were sent): a nudge to act with a tool, the note
    that a written call could not be read (left out where `said_unread`: the line under
    the answer said it); '' where nothing."""
    prompt = step.prompt
    for message in step.delivered:
        prompt = prompt.replace(USER_MESSAGE + message, "", 1)
    if prompt.startswith(STATUS):
        return ""
    end = prompt.rfind("\n\n" + STATUS)
    head = prompt if end < 0 else prompt[:end]
    parts = [part.strip() for part in head.split("\n\n")]
    if said_unread:
        parts = [part for part in parts if not part.startswith("[your last answer " + UNREAD)]
    return " ".join(part for part in parts if part)


class AnswerNotes:
    """One display's notes under the agents' answers: an answer's call written as text
    that nothing ran, and what the agent was told as its next step began. `agents`:
    "workers" (the Worker pane: every agent's but the supervisor's), "supervisor" (the
    Plan pane: its answers only; its prompts carry the worker's reports, said there
    already), or "all" (the headless lines). A line and its style per event, or None."""

    def __init__(self, agents: Literal["workers", "supervisor", "all"] = "all") -> None:
        self.agents = agents
        self.tools: frozenset[str] | None = None
        self.supervisor_tools: frozenset[str] | None = None
        """The agents' tools, once the run's start is read."""
        self._unread: dict[bool, str] = {}
        """The problems of the run's notice of an unread call, by whether the answer is
        the supervisor's: said under that answer, which follows the notice."""
        self._said_unread: dict[bool, bool] = {}
        """Whether the line under the latest answer said its call was not read (by the
        supervisor's or not): the next prompt's note saying so again is left out."""
        self._acted: dict[str, bool] = {}
        """Whether each agent's latest step made a tool call: what a step's prompt told
        the agent is said only after one that made none (a nudge, the note that its
        written call could not be read); a loop's note has its notice already."""

    def hides(self, notice: ev.Notice) -> bool:
        """Whether this display leaves the run's notice out: one of an unread call, which
        the line under the answer says, in the pane of the agent that wrote it (the
        supervisor's in the Plan pane, never the Worker pane)."""
        return unread_call(notice) is not None

    def _shows(self, supervisor: bool) -> bool:
        return self.agents == "all" or (self.agents == "supervisor") == supervisor

    def _under(self, text: str, supervisor: bool) -> tuple[str, str] | None:
        tools = self.supervisor_tools if supervisor else self.tools
        unread = self._unread.pop(supervisor, None)
        written = written_call_words(text, tools)
        if unread is not None and not written:
            written = f"a tool call written as text could not be read: {unread}"
        self._said_unread[supervisor] = written is not None
        return (f"↳ {written}", "yellow") if written else None

    def line(self, event: ev.Event) -> tuple[str, str] | None:
        workers, supervisor = self.agents != "supervisor", self.agents != "workers"
        match event:
            case ev.RunStarted():
                tools = configured_tools(event)
                self.tools = agents_tools(tools)
                self.supervisor_tools = agents_tools(tools, supervisor=True)
            case ev.Notice() if (found := unread_call(event)) is not None:
                if self._shows(found[0] == "supervisor"):
                    self._unread[found[0] == "supervisor"] = found[1]
            case ev.WorkerThought() if workers:
                return self._under(event.text, False)
            case ev.SupervisorMessage() if supervisor:
                return self._under(event.text, True)
            case ev.ToolCall():
                self._acted[event.agent] = True
            case ev.StepStarted() if workers and event.agent != "supervisor":
                idle = self._acted.get(event.agent) is False
                self._acted[event.agent] = False
                said = self._said_unread.pop(False, False)
                if idle and (told := told_words(event, said_unread=said)):
                    return f"↳ the {event.agent} was told: {one_line(told, 300)}", "dim"
            case _:
                pass
        return None
