"""What a human can do to a running agent: pause, step, break before tool calls,
approve, edit or reject them, and inject messages.

This holds only the waiting machinery; the controller records every action as
a `control` event, so the log shows what the human did and when.
"""

from __future__ import annotations

import asyncio
import difflib
import fnmatch
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class Breakpoint:
    """Break before calls of `tool` (any tool when None) whose arguments contain `pattern`.

    Patterns are plain substrings (`rm -rf`, `pip install`); a pattern with
    glob characters (`*`, `?`) is matched as a glob against the arguments' JSON.
    """

    tool: str | None = None
    pattern: str | None = None

    def matches(self, tool: str, arguments: dict[str, Any] | None) -> bool:
        if self.tool is not None and not fnmatch.fnmatchcase(tool, self.tool):
            return False
        if not self.pattern:
            return True
        text = json.dumps(arguments or {}, ensure_ascii=False)
        plain = " ".join(str(v) for v in (arguments or {}).values())
        if any(c in self.pattern for c in "*?["):
            return fnmatch.fnmatchcase(plain, self.pattern) or fnmatch.fnmatchcase(
                text, self.pattern
            )
        return self.pattern in plain or self.pattern in text

    def describe(self) -> str:
        who = self.tool or "any tool"
        return f"{who} matching {self.pattern!r}" if self.pattern else who

    @property
    def rule(self) -> str:
        """The rule as `parse` reads it back."""
        return f"{self.tool or '*'}:{self.pattern}" if self.pattern else (self.tool or "*")

    @classmethod
    def parse(cls, text: str) -> Breakpoint:
        """`bash`, `bash:rm -rf`, `:pip install` or `*`."""
        tool, sep, pattern = text.partition(":")
        tool = tool.strip() or None
        if tool == "*":
            tool = None
        return cls(tool=tool, pattern=pattern.strip() or None if sep else None)


def rule_problem(rule: str, tools: Mapping[str, Sequence[str]] | None = None) -> str | None:
    """Why a rule as the user wrote it would not do what it says: empty (`""`, `:`),
    which would break before every call (`*` says that), or naming no tool of `tools`
    (`breakpoint_problem`); None where it is sound."""
    bp = Breakpoint.parse(rule)
    if bp.tool is None and bp.pattern is None and rule.strip() != "*":
        return "an empty rule would break before every call: write '*' for that"
    return None if tools is None else breakpoint_problem(bp, tools)


def breakpoint_problem(bp: Breakpoint, tools: Mapping[str, Sequence[str]]) -> str | None:
    """Why `bp` would never fire: it names a tool (or a glob of them) none of the run's
    agents has, given `tools`, each agent's tool names (agent/agents/tool_lists.py); None
    where it may. A misspelt `--break bsah` otherwise waits for a call that never comes."""
    if bp.tool is None:
        return None
    names = sorted({name for agent_tools in tools.values() for name in agent_tools})
    if any(fnmatch.fnmatchcase(name, bp.tool) for name in names):
        return None
    glob = any(c in bp.tool for c in "*?[")
    close = [] if glob else difflib.get_close_matches(bp.tool, names, n=1)
    return (
        f"no tool of this run's agents {'matches' if glob else 'is named'} {bp.tool!r}"
        + (f" (did you mean {close[0]}?)" if close else "")
        + "; "
        + "; ".join(f"the {agent}'s tools: {', '.join(names)}" for agent, names in tools.items())
    )


@dataclass
class Decision:
    action: Literal["approve", "edit", "reject"]
    arguments: dict[str, Any] | None = None
    message: str = ""


@dataclass
class Controls:
    breakpoints: list[Breakpoint] = field(default_factory=list)
    tools: dict[str, tuple[str, ...]] | None = None
    """Each agent's tool names, where the run's agents are known (agent/agents/run.py
    `agent_for`): a breakpoint naming none of them is refused (`breakpoint_problem`)."""
    hold_at_breaks: bool = True
    """While a call waits for approval the run is held as a pause holds it: its clock
    stops and the sandbox's commands and jobs are suspended, so a person who steps away
    from a breakpoint does not let a job compute off the clock. False (the user's
    `--break-runs-jobs`): they go on running, and the wait counts on the clock."""
    _running: asyncio.Event = field(default_factory=asyncio.Event)
    _steps_granted: int | None = None
    """None: run freely. A number: actions allowed before pausing again (step mode)."""
    _action_open: bool = False
    """The gate let an action through whose first tool call has not come: that call is
    part of it (the model's turn and the call it asked for are one action); any further
    call of the same turn is an action of its own. Kept running freely too, so a step
    asked for then (`pause_after_action`) knows which call ends the action in hand."""
    _pending: dict[str, asyncio.Future[Decision]] = field(default_factory=dict)
    _inbox: dict[str, list[str]] = field(default_factory=lambda: {"worker": [], "supervisor": []})
    _checks: dict[str, Callable[[dict[str, Any]], str | None]] = field(default_factory=dict)
    """Per waiting call, what is wrong with arguments an edit would give it (`edit_problem`)."""
    _closed: bool = False
    """The run is stopping: no action passes the gate again (`close`)."""
    _at_gate: bool = False
    """The agent waits in `gate` for leave to take its next action."""

    def __post_init__(self) -> None:
        self._running.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        """`_action_open` is left as it is: the action the gate let through is still in
        hand (a pause and resume within the model's turn leave its call part of it), so a
        step asked for after (`pause_after_action`) lets that call run. Clearing it made
        the run pause before the turn's first call."""
        self._steps_granted = None
        self._running.set()

    def close(self) -> None:
        """The user stopped the run: every wait on a pause ends, and no action goes
        through the gate again (the run's driver cancels the agent where it waits).
        A stop that resumed instead let a paused run begin one more step, a model call
        the stop then cut off with its estimated tokens counted."""
        self._closed = True
        self._steps_granted = None
        self._running.set()

    def step(self) -> None:
        """Let exactly one more agent action through, then pause again. A call waiting
        for approval is that action (the step approves it): it is in hand, so a second
        `n` (`pause_after_action`) lets it run and pauses after it, not before it."""
        self._steps_granted = 1
        if self.pending_calls():
            self._action_open = True
        self._running.set()

    def pause_after_action(self) -> None:
        """Running freely: let the action in hand finish, then pause, as a debugger's step
        while running breaks at the next step boundary (`n` while running). The pause
        itself is the run's (`step_used_up`: the controller records it, `source="step"`).
        In step mode already (a step granted, its action not yet begun or under way), the
        grant is withdrawn too: the action in hand is still the one that ends, and a grant
        left at 1 let one more action through after it."""
        if self.paused:
            return
        if self._at_gate:  # woken (a resume, a step) and not yet through: its action is next
            if self._steps_granted is None:  # a 0 here paused it for good, unrecorded
                self._steps_granted = 1
            return  # a step granted and not yet taken is the action in hand itself
        self._steps_granted = 0

    @property
    def stepping(self) -> bool:
        """Paused, or in step mode: an action now goes only where a step lets it."""
        return self.paused or self._steps_granted is not None

    @property
    def at_gate(self) -> bool:
        """The agent waits for leave to take its next action (a step would be its), not
        inside one (a search's agent waiting on its attempts)."""
        return self._at_gate

    def step_used_up(self) -> bool:
        """In step mode, the granted action has been taken: time to pause again."""
        return self._steps_granted == 0 and not self.paused

    def call_waits_for_step(self) -> bool:
        """In step mode, a tool call about to run is an action the granted one did not
        cover (the second call of a turn whose first was the step): time to pause."""
        return self.step_used_up() and not self._action_open

    def call_decided(self) -> None:
        """The call the gate's action was for is done with (rejected at its breakpoint):
        the turn's next call is an action of its own."""
        self._action_open = False

    async def gate(self) -> None:
        """Called before each agent action; returns when the action may go ahead."""
        self._at_gate = True
        try:
            while True:
                await self._running.wait()
                if self._closed:
                    await asyncio.Event().wait()  # for good: the stop cancels the agent
                if self._steps_granted is None:
                    self._action_open = True
                    return
                if self._steps_granted > 0:
                    self._steps_granted -= 1
                    self._action_open = True
                    return
                self._running.clear()
        finally:
            self._at_gate = False

    async def wait_running(self) -> None:
        await self._running.wait()

    async def hold(self) -> None:
        """Before a tool call the model asked for: wait while paused. In step mode the
        call is the action the gate let through (the turn's first call), or needs a step
        of its own: a step granted meanwhile (`n` while the call waited at a breakpoint
        or was held by a pause) is used up by this call, so the run pauses after it, and
        before the same turn's next call; that call ran under the same step before,
        making one action exact only for a one-call turn."""
        if self._action_open and not self.paused:
            self._action_open = False
            if self._steps_granted:  # `n` while this call waited at its breakpoint
                self._steps_granted -= 1  # it is that step's action too, not the next turn
            return
        if self.paused or self._steps_granted is not None:
            await self.gate()
            self._action_open = False

    def breakpoint_problem(self, bp: Breakpoint) -> str | None:
        return None if self.tools is None else breakpoint_problem(bp, self.tools)

    def should_break(self, tool: str, arguments: dict[str, Any] | None) -> Breakpoint | None:
        for bp in self.breakpoints:
            if bp.matches(tool, arguments):
                return bp
        return None

    def expect_decision(
        self, call_id: str, check: Callable[[dict[str, Any]], str | None] | None = None
    ) -> asyncio.Future[Decision]:
        """`check` says what is wrong with arguments an edit would run the call with."""
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        if check is not None:
            self._checks[call_id] = check
        return future

    def edit_problem(self, call_id: str, arguments: dict[str, Any]) -> str | None:
        """Why the waiting call cannot run with these arguments (the tool would refuse
        them), or None: an edit is refused for it, and the call still waits, rather than
        the agent's step spent on the tool's error."""
        check = self._checks.get(call_id)
        return check(arguments) if check is not None else None

    def pending_calls(self) -> list[str]:
        return [cid for cid, fut in self._pending.items() if not fut.done()]

    def holding(self) -> bool:
        """Whether the run's clock and commands must stand still now: it is paused, or a
        call waits for approval and breaks hold the run (`hold_at_breaks`)."""
        return self.paused or (self.hold_at_breaks and bool(self.pending_calls()))

    def decide(self, call_id: str, decision: Decision) -> bool:
        self._checks.pop(call_id, None)
        future = self._pending.pop(call_id, None)
        if future is None or future.done():
            return False
        future.set_result(decision)
        return True

    def inject(self, target: str, text: str) -> None:
        self._inbox.setdefault(target, []).append(text)

    def take_messages(self, target: str) -> list[str]:
        messages, self._inbox[target] = self._inbox.get(target, []), []
        return messages

    def queued(self) -> dict[str, list[str]]:
        """The messages no agent has taken yet, by target, left queued."""
        return {target: list(texts) for target, texts in self._inbox.items() if texts}

    def drop_messages(self) -> None:
        """Forget every queued message (a fork's cut: see agent/loop/catchup.py)."""
        for target in self._inbox:
            self._inbox[target] = []
