"""What runs inside an attempt's own run (agent/loop/attempts.py): one worker subtask, or,
with no model, one variant of the task's recipe; then mlra validates its artifact.

The attempt ends there, ungraded on the test split: only the attempt the search
submits is ever graded on it. Its score is its best validation (the frozen copy kept),
read from its log by the run it belongs to.
"""

from __future__ import annotations

from mlra import events as ev
from mlra.agent.agents.closing_validation import (
    attempt_validator,
    validate_at_limit,
    validate_on_ending,
)
from mlra.agent.agents.worker import Worker
from mlra.agent.loop.ending import attempt_ending
from mlra.agent.run.controller import Agent, EndRun, RunController
from mlra.tools.registry import ToolRegistry
from mlra.tools.validate import Validate

OPERATOR_FRAMING: dict[str, str] = {
    "draft": "Write a complete solution of your own from the starter files",
    "debug": "The attempt your workspace was copied from failed; find why and fix it",
    "improve": "Your workspace is a copy of a good attempt's; make one targeted change "
    "that should improve its validation score",
    "chosen": "Do what the supervisor asks",
    "variant": "Run the recipe's variant",
}


def attempt_agent(controller: RunController) -> Agent:
    if controller.provider is None:
        from mlra.agent.agents.baseline import BaselineAgent

        return BaselineAgent(controller)
    return WorkerAttempt(controller)


def attempt_instructions(settings_id: str, operator: str, parent: str | None, text: str) -> str:
    source = f"a copy of attempt {parent}'s workspace" if parent else "the task's starter files"
    lead = OPERATOR_FRAMING.get(operator, OPERATOR_FRAMING["chosen"])
    return (
        f"[attempt {settings_id}] {lead}. Your workspace holds {source}; no other attempt "
        "can see it, and you cannot see theirs. " + text.strip() + "\n\nWhen you are done, "
        "leave the artifact where the task asks for it and call `report` with a short "
        "summary of what you changed and what you measured. mlra then validates the "
        "artifact on the hidden validation split: that score is the attempt's. Do not "
        "call `submit`: the supervisor chooses which attempt to submit."
    )


class WorkerAttempt(Agent):
    role: ev.AgentRole = "worker"

    def __init__(self, controller: RunController) -> None:
        assert controller.config.attempt is not None
        self.ctl = controller
        self.settings = controller.config.attempt
        self.validator = attempt_validator(controller)
        self.worker = Worker(controller, validator=self.validator)
        self.registry = ToolRegistry([Validate(self.validator)])

    async def run(self) -> None:
        s = self.settings
        instructions = attempt_instructions(s.id, s.operator, s.parent, s.instructions)
        try:
            result = await self.worker.run_subtask(1, instructions, None)
            summary = result.report
        except EndRun as end:
            if end.ending.reason != "submitted":
                raise
            # The worker called submit after all: its attempt ends, and is validated.
            summary = end.ending.note or "the worker submitted"
        # What the workspace holds is validated as the attempt's result, whatever its
        # worker used of the rate limit.
        await validate_on_ending(self.ctl, self.role, self.registry, self.validator)
        raise EndRun(attempt_ending(summary[:300] or "the attempt ended"))

    async def validate_at_limit(self) -> None:
        """Its time limit was reached: what its workspace holds is validated all the same
        (agent/agents/closing_validation.py)."""
        await validate_at_limit(self.ctl, self.role, self.registry, self.validator, None)
