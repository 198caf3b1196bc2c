"""The tools each of a run's agents will have, known from its config before anything runs.

A `--break` rule (or one set later from the console or `mlra ctl`) that names a tool no
agent of the run has would never fire: the rule is checked against these names
(agent/loop/controls.py `breakpoint_problem`) and refused in one line instead. The lists
are the agents' own (agent/agents/worker.py `worker_tools`, agent/agents/supervisor.py
`supervisor_tools`, the search's and the baseline's registries), built with stand-ins
for what only a running run has, so a tool added to an agent is known here too.

A search's attempts run with no breakpoints (agent/agents/attempt_runs.py): only the
search's own tools stop at one.
"""

from __future__ import annotations

from typing import Any, cast

from mlra import events as ev
from mlra.agent.agents.supervisor import supervisor_tools
from mlra.agent.agents.worker import worker_tools
from mlra.agent.setup.config import RunConfig
from mlra.tools.attempts import attempt_tools
from mlra.tools.core import core_tools
from mlra.tools.jobs import JobManager
from mlra.tools.registry import Tool, ToolOutcome
from mlra.tools.sandbox.base import SandboxError
from mlra.tools.submit import SubmitAttempt


def run_tools(config: RunConfig, *, model: bool) -> dict[ev.AgentRole, list[Tool[Any]]]:
    """Each agent's tools, as the run's agents (agent/agents/run.py `agent_for`) build
    them; `model`: whether an LLM drives the run (not `--model baseline`)."""
    attempts = cast(Any, Unused())  # the tools only hold it until they run
    if config.search == "greedy":
        role: ev.AgentRole = "supervisor" if model else "baseline"
        return {role: [*attempt_tools(attempts, recipe=not model), SubmitAttempt(attempts)]}
    if not model:
        return {"baseline": core_tools(validator=Unused() if config.baseline_validate else None)}
    jobs = JobManager(emit=ignored, clock=lambda: 0.0, records=dict)
    alone = config.agent == "worker"
    worker = worker_tools(config, jobs=jobs, on_note=ignored, validator=Unused(), alone=alone)
    if alone:
        return {"worker": worker}
    supervisor = supervisor_tools(
        config,
        on_plan=ignored_plan,
        delegate=unused_delegate,
        attempts=attempts if config.search == "llm" else None,
    )
    if config.search == "llm":  # the workers are the attempts'
        return {"supervisor": supervisor}
    return {"supervisor": supervisor, "worker": worker}


def run_tool_names(config: RunConfig, *, model: bool) -> dict[str, tuple[str, ...]]:
    """The names of `run_tools`, by agent: what a breakpoint rule is checked against."""
    return {
        agent: tuple(tool.name for tool in tools)
        for agent, tools in run_tools(config, model=model).items()
    }


def ignored(_: object) -> None:
    """Where the stand-ins' events would go: nowhere, since nothing is run."""


def ignored_plan(steps: list[ev.PlanStep], reason: str) -> None:
    del steps, reason


async def unused_delegate(step_id: str, instructions: str) -> ToolOutcome:
    raise AssertionError("listing tools runs none")


class Unused:
    """A validator (and a search's attempts) for listing tools: only the tools'
    definitions are read."""

    async def __call__(
        self, path: str, *, call_id: str, workdir: str | None, time_outs: object = None
    ) -> ev.Validation:
        raise SandboxError("listing tools runs none")

    def calls_left(self) -> tuple[int, float | None]:
        return 0, None
