"""Noticing an agent that goes round in circles: the same call, again and again.

Models loop: a supervisor made the same successful `update_plan` call 8 and 9 times
in a row, a worker sent the same failing `submit` 4 times, and each turn cost time
and tokens while nothing changed. So each agent's calls are watched in a row: a call
repeats the one before it when it names the same tool with the same arguments and
got the same result (whether it succeeded, and its output with command durations
left out). The result counts because waiting is not looping: a job polled while it
runs, or a log read while it grows, answers differently each time, and that is
progress.

At `repeats_told_at` repeats the agent's next prompt says so and what to do instead
(and a notice shows the person); at `repeats_end_at` the run ends "stuck", with
nothing submitted. Everything here is decided from the calls and their results as
the log records them, so a resumed run, catching up, counts exactly as the run did.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mlra import events as ev
from mlra.agent.loop.ending import Ending, unsubmitted
from mlra.agent.loop.fingerprint import normalize
from mlra.agent.providers.base import ToolCallRequest
from mlra.agent.setup.config import RunConfig
from mlra.tools.registry import ToolOutcome

ADVICE: dict[ev.AgentRole, str] = {
    "supervisor": (
        "assign the next subtask with new instructions, change the plan only when a report "
        "changes it, or submit what the workspace holds"
    ),
    "worker": (
        "try something different (another command, another file, a fix for the error it "
        "gives), or call `report` to say what blocks you"
    ),
    "baseline": "do something different",
}
"""What each agent is told to do instead of repeating its call."""
ALONE_ADVICE = (
    "try something different (another command, another file, a fix for the error it gives), "
    "or submit what the workspace holds"
)
"""The worker alone (`--agent worker`, or handed the task whole) has no `report`: told to
call it, a small model wrote `{"name": "report", ...}` as text, which nothing ran."""


def call_key(call: ToolCallRequest) -> str:
    """A call's identity for spotting repeats: its tool and its arguments as sent."""
    if call.arguments is None:  # not valid JSON: the text as sent
        arguments = call.raw_arguments
    else:
        arguments = json.dumps(call.arguments, sort_keys=True, default=str)
    return f"{call.name} {arguments}"


def _first_line(text: str, limit: int = 200) -> str:
    lines = text.strip().splitlines()
    return lines[0][:limit] if lines else "-"


@dataclass
class Repeats:
    """One agent's calls in a row, and what the latest run of identical ones calls for."""

    agent: ev.AgentRole
    told_at: int
    end_at: int
    key: str = ""
    count: int = 0
    tool: str = ""
    ok: bool = True
    output: str = ""
    advice: str = ""
    """What the agent is told to do instead: its role's `ADVICE` unless given."""

    @classmethod
    def of(cls, agent: ev.AgentRole, config: RunConfig, *, alone: bool = False) -> Repeats:
        """`alone`: the worker with no supervisor to report to."""
        advice = ALONE_ADVICE if alone else ADVICE[agent]
        return cls(
            agent, told_at=config.repeats_told_at, end_at=config.repeats_end_at, advice=advice
        )

    def reset(self) -> None:
        """Start counting afresh (a new subtask: its first call repeats nothing)."""
        self.key, self.count = "", 0

    def see(self, call: ToolCallRequest, outcome: ToolOutcome) -> int:
        """Count `call` with its result; returns how many identical calls are now in a row."""
        key = "\x1e".join((call_key(call), str(outcome.ok), normalize(outcome.output)))
        if key == self.key:
            self.count += 1
        else:
            self.key, self.count = key, 1
        self.tool, self.ok, self.output = call.name, outcome.ok, outcome.output
        return self.count

    @property
    def stuck(self) -> bool:
        return self.count >= self.end_at

    @property
    def to_tell(self) -> bool:
        return self.count >= self.told_at

    def _what(self) -> str:
        result = "succeeding" if self.ok else "failing"
        return (
            f"the same {self.tool} call {self.count} times in a row, with the same arguments, "
            f"{result} with the same result each time"
        )

    def prompt_note(self) -> str:
        """What the agent's next prompt says about the repeats (empty below the bound)."""
        if not self.to_tell:
            return ""
        return (
            f"[loop] You have made {self._what()}. Making it again will not change anything: "
            f"{self.advice or ADVICE[self.agent]}. If the same call is made {self.end_at} times in a row, "
            "the run ends (as stuck) with nothing submitted."
        )

    def notice(self) -> ev.Notice:
        """What the person is shown when the agent is told."""
        return ev.Notice(
            level="warning",
            message=f"the {self.agent} made {self._what()}; its next prompt says so "
            f"(the run ends as stuck at {self.end_at} in a row)",
        )

    def ending(self) -> Ending:
        """The run's ending once the repeats reach `end_at`."""
        verb = "succeeded" if self.ok else "failed"
        return unsubmitted(
            "stuck",
            f"the {self.agent} made the same {self.tool} call {self.count} times in a row "
            f"(it {verb} with the same result each time; last: {_first_line(self.output)}), "
            "so the run was ended and nothing was submitted",
        )
